"""``--export --style nnx`` and ``--style equinox``: the samples as Flax NNX and Equinox modules, built
with their own `from_torch`, equal to torch leaf by leaf (state included, at other shapes too), clean
under ruff, and reviewed against the torch file as a port with every torch line paired.

Each sample is traced and lowered once for both styles. The review of every export is slow (a
trace of each side); the default run reviews the Llama NNX export, ``JAXSIDE_STYLES_ALL=1`` every
one, and exports models of other files too (a nanoGPT-style GPT, transformers' Llama).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import load_sample
from golden import assert_golden
from review_rows import assert_every_line_paired
from test_export import sample as export_sample

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.cli import main
from jaxside.annotate.errors import Failure
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry, load_file
from jaxside.render.lower import lower
from jaxside.tracing import Capture, capture

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"
SAMPLES = ["llama_model", "mlp", "cnn", "rnn", "moe"]
ALL = bool(os.environ.get("JAXSIDE_STYLES_ALL"))
"""The slow profile: every export reviewed, and models of other files exported (docs/testing.md)."""


@dataclass
class Lowered:
    entry: Any
    program: Any


def lowered(sample: str) -> Lowered:
    """The sample traced and lowered as `--export` does it: the same one tests/test_export.py has."""
    found = export_sample(sample)
    return Lowered(Entry(found.fn, found.args, found.kwargs), found.program)


@functools.cache
def source(sample: str, style: str) -> str:
    found = lowered(sample)
    return module_source(found.program, f"samples/{sample}.py", style, found.entry.fn)


@pytest.mark.parametrize("style", ["nnx", "equinox"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_a_sample_exports_as_classes_that_match_torch(sample, style, tmp_path):
    text, found = source(sample, style), lowered(sample)
    report = check_export(load_module(text), found.program, found.entry, run=runner(style))
    table = report.table()
    assert report.ok, table
    assert "larger shape" in table, table  # generic sizes, checked at other shapes too
    assert text.count("\nclass ") >= 2 and "def from_torch(model" in text
    if sample == "llama_model":  # state: NNX caches written in place, Equinox state threaded
        assert ("nnx.Cache(k_cache)" in text) if style == "nnx" else ("state.set(self.k_cache" in text)
        assert "state layers.1.attention.kv_cache.v_cache" in table
    if style == "nnx":  # torch Linear/Embedding as the framework's layers, kernels transposed once
        assert "nnx.Linear(" in text and "layer.kernel[...] = weight.T" in text
        assert '["weight"]' not in text.partition("def _tensors")[0]
    if sample in ("llama_model", "mlp"):
        assert_golden("export_styles", f"{sample}_{style}.py", text)
    path = tmp_path / f"{sample}_{style}.py"
    path.write_text(text)
    for command in (["check", "--isolated", str(path)], ["format", "--isolated", "--check", str(path)]):
        done = subprocess.run([str(RUFF), *command], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_blocks_built_with_other_flags_share_their_class():
    """torchvision-style blocks: `stride` differs per instance (an `__init__` keyword with its
    default, the other value in `_FLAGS`), `downsample` is there in one block only (the methods test
    `self.downsample is not None`, as the torch code does)."""
    model, args = load_file(str(ROOT / "tests" / "models" / "tiny_resnet.py")).example()
    trace = capture(model, *args)
    program = lower(trace, lambda resize: Capture(resize=resize)(model, *args))
    for style in ("nnx", "equinox"):
        text = module_source(program, "tests/models/tiny_resnet.py", style, model)
        report = check_export(load_module(text), program, Entry(model, args, {}), run=runner(style))
        assert report.ok, report.table()
        assert text.count("class BasicBlock(") == 1
        assert '_FLAGS = {"layers.1": {"stride": 2}}' in text
        assert "if self.downsample is not None:" in text and "self.stride" in text


@pytest.mark.skipif(not ALL, reason="slow: JAXSIDE_STYLES_ALL=1 runs it")
@pytest.mark.parametrize("file", ["tests/models/run_tiny_gpt.py", "tests/models/run_hf_llama.py"])
def test_models_of_other_files_export_in_both_styles(file):
    """A nanoGPT-style model in a module its `example()` file imports, and transformers' Llama (an
    installed library's classes: `LlamaAttention`, `LlamaRMSNorm`, ...): checked in both styles."""
    if "hf_llama" in file:
        pytest.importorskip("transformers")
    sys.path.insert(0, str((ROOT / file).parent))
    try:
        fn, args, *rest = load_file(str(ROOT / file)).example()
    finally:
        sys.path.remove(str((ROOT / file).parent))
    kwargs = rest[0] if rest else {}
    program = lower(capture(fn, *args, **kwargs), lambda resize: Capture(resize=resize)(fn, *args, **kwargs))
    for style in ("nnx", "equinox"):
        text = module_source(program, file, style, fn)
        report = check_export(load_module(text), program, Entry(fn, tuple(args), kwargs), run=runner(style))
        assert report.ok, report.table()
        assert "larger shape" in report.table()


def test_from_torch_takes_a_state_dict_too():
    model, (x,) = load_sample("mlp").example()[:2]
    built = load_module(source("mlp", "nnx")).from_torch(model.state_dict())
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(np.asarray(built(jnp.asarray(x.numpy()))), want, rtol=1e-5, atol=1e-6)


def test_a_function_entry_is_refused_in_a_class_style():
    fn, args = load_sample("seed_example").example()[:2]
    program = lower(capture(fn, *args), None)
    with pytest.raises(Failure, match="--style nnx: the entry is a function") as refused:
        module_source(program, "samples/seed_example.py", "nnx", fn)
    assert (refused.value.file, refused.value.line) == (fn.__code__.co_filename, fn.__code__.co_firstlineno)


NAMED = """\
import torch

Named = type({name!r}, (torch.nn.Module,), {{}})


def init(self):
    torch.nn.Module.__init__(self)
    self.fc = torch.nn.Linear(4, 4)


def forward(self, x):
    return self.fc(x) * 2


Named.__init__, Named.forward = init, forward


def example():
    return Named().eval(), (torch.randn(2, 4),)
"""


@pytest.mark.parametrize(("name", "said"), [
    ('Block"""\nimport os\n"""', "is no Python class name"),  # user text never becomes code
    ("Config", "has the name of the module's own `Config`"),
])
def test_a_torch_class_name_the_module_cannot_use_is_refused(name, said, tmp_path, capsys):
    model = tmp_path / "model.py"
    model.write_text(NAMED.format(name=name))
    code = main([str(model), "--export", "--style", "nnx", "--static-shapes", "-o", str(tmp_path / "out.py")])
    err = capsys.readouterr().err.strip().splitlines()
    line = NAMED.splitlines().index("def forward(self, x):") + 1  # the class's method that ran
    assert code == 2 and said in err[-1] and err[-1].startswith(f"error: {model}:{line}: --style nnx: "), err
    assert not (tmp_path / "out.py").exists()


LISTED = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.gains = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.ones(4)) for _ in range(2)]
        )

    def forward(self, x):
        for gain in self.gains:
            x = self.fc(x) * gain
        return x


def example():
    return Net().eval(), (torch.randn(2, 4),)
"""


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_a_layout_the_class_styles_cannot_write_is_refused_at_the_line_that_makes_it(style, tmp_path, capsys):
    """A `ParameterList` (tensors in a numbered list): the refusal names the line of the torch file
    that assigns it."""
    model = tmp_path / "model.py"
    model.write_text(LISTED)
    code = main([str(model), "--export", "--style", style, "--static-shapes", "-o", str(tmp_path / "out.py")])
    err = capsys.readouterr().err.strip().splitlines()
    line = LISTED.splitlines().index("        self.gains = torch.nn.ParameterList(") + 1
    said = f"error: {model}:{line}: --style {style}: `gains.0`: a tensor in a numbered list"
    assert code == 2 and err[-1].startswith(said), err
    assert not (tmp_path / "out.py").exists()


REVIEWED = [("llama_model", "nnx")] + ([(s, t) for s in SAMPLES for t in ("nnx", "equinox")][1:]
                                      if ALL else [])


@pytest.mark.parametrize(("sample", "style"), REVIEWED)
def test_the_written_port_reviews_clean_against_its_torch_file(sample, style, tmp_path, capsys):
    path = tmp_path / f"{sample}_{style}.py"
    path.write_text(source(sample, style))
    code = main(["review", str(ROOT / "samples" / f"{sample}.py"), str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert_every_line_paired(out, at_least=3)
    assert "outputs match" in out
