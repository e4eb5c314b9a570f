"""The catalogue (`render/rules/catalogue.py`) and the training path: library functions written as
themselves (`jax.nn.gelu`, `jax.random.uniform`, `key, k = jax.random.split(key)`), proven by the
fuzzer's round trip, and a small GPT's training step (dropout, a `targets` loss) exported, run and
compared with torch, its loss and its gradients."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from fuzzing.regressions import F32, I64, program
from fuzzing.roundtrip import roundtrip

from benchmarks.readability import plain, statements

MODELS = Path(__file__).parent / "models"


@pytest.mark.parametrize(("lines", "written", "gone"), [
    (["v1 = F.gelu(v0) * F.gelu(v0, approximate='tanh')"],
     ["jax.nn.gelu(a0, approximate=False)", "jax.nn.gelu(a0, approximate=True)"], ["erfc", "copy", "tanh"]),
    (["v1 = F.log_softmax(v0, 1) + v0.argmax(-1, keepdim=True)"], ["jax.nn.log_softmax(a0", "jnp.argmax(a0"],
     ["lax.argmax", "stop_gradient"]),
    (["v1 = torch.sort(v0, -1).values + torch.argsort(v0, -1)"],  # torch asks for no stable sort
     ["jnp.sort(a0, axis=1, stable=False)", "jnp.argsort(a0, axis=1, stable=False)"], ["jax.jit"]),
    (["v1 = torch.histc(v0.flatten(), bins=4, min=0, max=3)",  # transformers' MoE experts count tokens
      "v2 = torch.cumsum(v1, 0, dtype=torch.int32)"],
     ["jnp.histogram(", "bins=4, range=(0.0, 3.0))[0]", "jnp.cumsum("],
     ["jax.jit", "linspace", "searchsorted"]),
])
def test_library_functions_written_as_themselves(lines, written, gone):
    rendered = roundtrip(program([((3, 5), F32)], *lines)).source
    for text in written:
        assert text in rendered, rendered
    for text in gone:
        assert text not in rendered, rendered


@pytest.mark.parametrize("loss", [
    "F.cross_entropy(v0, v2, ignore_index=-1)",
    "F.cross_entropy(v0, v2.clamp(min=0), reduction='sum')",
    "F.nll_loss(torch.log_softmax(v0, -1), v2, ignore_index=-1, reduction='none')",
])
def test_losses_index_without_lax_gather(loss):
    targets = "v2 = torch.where(v1 % 3 == 0, -1, v1.abs() % 5)"
    rendered = roundtrip(program([((6, 5), F32), ((6,), I64)], targets, f"v3 = {loss}")).source
    assert "jax.nn.log_softmax(" in rendered and "gather" not in rendered and "lax." not in rendered, rendered


def test_every_catalogued_function_is_recognised():
    from benchmarks.catalogue import recognised

    missing = [code for _, code, ok in recognised() if not ok]
    assert not missing


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _export(model: torch.nn.Module, args: tuple) -> tuple[str, types.ModuleType]:
    from jaxside.render.lower import lower
    from jaxside.render.module import render_program
    from jaxside.tracing import Capture

    def retrace(resize):  # noqa: ANN001, ANN202  (a Trace)
        return Capture(resize=resize)(model, *args)

    text = render_program(lower(Capture()(model, *args), retrace), source="tests/models/train_gpt.py")
    exported = types.ModuleType("train_gpt_jax")
    sys.modules["train_gpt_jax"] = exported  # (its dataclass looks its module up)
    exec(compile(text, "train_gpt_jax.py", "exec"), exported.__dict__)  # noqa: S102  (our export)
    return text, exported


@pytest.fixture(scope="module")
def training() -> tuple:
    gpt = _load("train_gpt")
    model, args = gpt.example()
    return (model, args, *_export(model, args))


def test_training_step_reads_as_jax(training):
    _, _, text, _ = training
    for unwanted in ("jnp.copy", "lax.gather", "lax.slice", "lax.scatter", "jax.jit(", "CONST"):
        assert unwanted not in text, unwanted
    assert "jax.nn.gelu(" in text and "jax.random.uniform(" in text and "jax.random.split(" in text
    found = statements(text)
    share = sum(plain(s) for s in found) / len(found)
    assert share >= 0.95, [s for s in found if not plain(s)]


def test_training_step_runs_with_a_key(training):
    model, (idx, targets), _, exported = training
    params = exported.load_params(model)
    run = jax.jit(exported.forward)
    logits, loss = run(params, jnp.asarray(idx.numpy()), jnp.asarray(targets.numpy()), jax.random.key(0))
    again = run(params, jnp.asarray(idx.numpy()), jnp.asarray(targets.numpy()), jax.random.key(0))[1]
    other = run(params, jnp.asarray(idx.numpy()), jnp.asarray(targets.numpy()), jax.random.key(1))[1]
    assert logits.shape == (2, 8, 48) and np.isfinite(float(loss))
    assert float(loss) == float(again) and float(loss) != float(other)  # the key draws the masks
    grads = jax.jit(jax.grad(lambda p: exported.forward(p, jnp.asarray(idx.numpy()), jnp.asarray(
        targets.numpy()), jax.random.key(0))[1]))(params)  # the training step: a gradient through dropout
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
    assert float(jnp.abs(grads["transformer"]["h"][0]["mlp"]["fc"]["weight"]).sum()) > 0


def test_training_loss_and_gradients_match_torch_without_dropout():
    gpt = _load("train_gpt")
    torch.manual_seed(0)
    model = gpt.TrainGPT(gpt.TrainConfig(dropout=0.0)).train()
    _, (idx, targets) = gpt.example()
    _, exported = _export(model, (idx, targets))
    params = exported.load_params(model)
    inputs = [jnp.asarray(idx.numpy()), jnp.asarray(targets.numpy())]
    key = [jax.random.key(0)] if "key" in exported.forward.__code__.co_varnames else []

    def loss_of(p):  # noqa: ANN001, ANN202
        return exported.forward(p, *inputs, *key)[1]

    loss, grads = jax.value_and_grad(loss_of)(params)
    _, want = model(idx, targets)
    want.backward()
    np.testing.assert_allclose(float(loss), want.item(), rtol=1e-5)
    blocks = grads["transformer"]["h"]
    for got, weight in [(grads["transformer"]["wte"]["weight"], model.lm_head.weight),  # (tied)
                        (blocks[1]["mlp"]["fc"]["weight"], model.transformer.h[1].mlp.fc.weight)]:
        np.testing.assert_allclose(np.asarray(got), weight.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_generation_keeps_the_python_index_list_literal():
    """`logits = self.lm_head(x[:, [-1], :])` (the generate path): the list stays a list where it is
    used, no module-level `CONST = np.full((1,), -1)`."""
    gpt = _load("train_gpt")
    torch.manual_seed(0)
    model = gpt.TrainGPT(gpt.TrainConfig()).eval()
    idx = torch.randint(0, 48, (1, 8))
    text, exported = _export(model, (idx,))
    assert "x[:, [-1]]" in text and "CONST" not in text and "jax.random" not in text, text
    logits, loss = exported.forward(exported.load_params(model), jnp.asarray(idx.numpy()))
    want, _ = model(idx)
    assert loss is None
    np.testing.assert_allclose(np.asarray(logits), want.detach().numpy(), rtol=1e-5, atol=1e-6)
