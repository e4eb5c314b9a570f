"""The catalogue (`render/rules/catalogue.py`) and the training path: library functions written as
themselves (`jax.nn.gelu`, `jax.random.uniform`, `key, k = jax.random.split(key)`), proven by the
fuzzer's round trip, and a small GPT's training step (dropout, a `targets` loss) exported, run and
compared with torch, its loss and its gradients."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing.regressions import F32, program
from fuzzing.roundtrip import roundtrip

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize(("lines", "written", "gone"), [
    (["v1 = F.gelu(v0) * F.gelu(v0, approximate='tanh')"],
     ["jax.nn.gelu(a0, approximate=False)", "jax.nn.gelu(a0, approximate=True)"], ["erfc", "copy", "tanh"]),
    (["v1 = F.log_softmax(v0, 1) + v0.argmax(-1, keepdim=True)"], ["jax.nn.log_softmax(a0", "jnp.argmax(a0"],
     ["lax.argmax", "stop_gradient"]),
])
def test_library_functions_written_as_themselves(lines, written, gone):
    rendered = roundtrip(program([((3, 5), F32)], *lines)).source
    for text in written:
        assert text in rendered, rendered
    for text in gone:
        assert text not in rendered, rendered


def test_every_catalogued_function_is_recognised():
    from benchmarks.catalogue import recognised

    missing = [code for _, code, ok in recognised() if not ok]
    assert not missing


