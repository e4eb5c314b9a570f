"""Instances of one class share one def: widths from shapes, strides and paddings as arguments,
branches some instances took under flags.

Blocks built with other widths, strides and kernel sizes run the same torch method; the export
writes one def for it and passes each call its own config, as a hand port does; lines only some
blocks ran go under a keyword-only flag (`if has_skip:`); blocks that ran a line with other
modules (a ReLU, a Tanh) keep apart. Each test runs the export under `jax.jit` and compares it with torch
eager directly.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from test_shapes import export

from jaxside.render.module import render_program

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter


class Block(torch.nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, kernel: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2)
        self.norm = torch.nn.BatchNorm2d(cout)
        self.has_skip = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm(self.conv(x)))
        if self.has_skip:
            y = y + x
        return y


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = [(3, 8, 1, 3), (8, 16, 2, 5), (16, 16, 1, 3), (16, 32, 2, 3), (32, 32, 1, 5)]
        self.blocks = torch.nn.Sequential(*(Block(*c) for c in config))
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(x).mean((2, 3)))


def defs_of(program, function: str) -> dict[str, ast.FunctionDef]:
    return {f.name: f.node() for f in program.functions if f.calls[0].function == function}


def keywords_of_calls(program, name: str) -> list[str]:
    """The keywords each call of the def `name` passes, in the order of the program's text."""
    calls = [n for f in program.functions for n in ast.walk(f.node())
             if isinstance(n, ast.Call) and ast.unparse(n.func) == name]
    return [", ".join(ast.unparse(k) for k in call.keywords) for call in calls]


def assert_equals_torch(module, program, model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        want = model(x).numpy()
    forward = jax.jit(getattr(module, program.entry.name))
    got = np.asarray(forward(module.load_params(model), jnp.asarray(x.numpy())))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_blocks_of_other_strides_widths_and_branches_share_one_def():
    torch.manual_seed(0)
    model = Net().eval()
    module, program = export(model, torch.randn(1, 3, 16, 16))
    blocks = defs_of(program, "Block.forward")
    # three blocks without a skip (strides 1, 2, 2; kernels 3, 5, 3), two with one (kernels 3, 5)
    (block,) = blocks.values()
    assert block.name == "block_forward"
    assert [a.arg for a in block.args.kwonlyargs] == ["stride", "padding", "has_skip", "config"]  # config.eps
    assert [ast.unparse(d) if d else None for d in block.args.kw_defaults] == [None, None, "False", None]
    (branch,) = [n for n in ast.walk(block) if isinstance(n, ast.If)]
    assert ast.unparse(branch.test) == "has_skip" and not branch.orelse
    assert "window_strides=(stride, stride)" in render_program(program, source="test")
    assert [k.replace(", config=config", "") for k in keywords_of_calls(program, "block_forward")] == [
        "stride=1, padding=1", "stride=2, padding=2", "stride=1, padding=1, has_skip=True",
        "stride=2, padding=1", "stride=1, padding=2, has_skip=True",
    ]
    assert_equals_torch(module, program, model, torch.randn(2, 3, 16, 16))


class Residual(torch.nn.Module):
    """A ResNet block: a shortcut the blocks that change the width or stride downsample."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Conv2d(cin, cout, 1, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = torch.relu(self.conv(x))
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        return x + shortcut


def test_a_value_only_some_calls_compute_is_aliased_in_the_others():
    torch.manual_seed(0)
    config = [(3, 8, 2), (8, 8, 1), (8, 8, 1), (8, 16, 2), (16, 16, 1), (16, 32, 1)]
    model = torch.nn.Sequential(*(Residual(*c) for c in config)).eval()
    module, program = export(model, torch.randn(1, 3, 16, 16))
    (block,) = defs_of(program, "Residual.forward").values()
    assert [a.arg for a in block.args.kwonlyargs] == ["conv_stride", "downsample_stride", "downsample"]
    assert [ast.unparse(d) if d else None for d in block.args.kw_defaults] == [None, "2", "False"]
    (branch,) = [n for n in ast.walk(block) if isinstance(n, ast.If)]
    assert ast.unparse(branch.test) == "downsample"
    assert [ast.unparse(s) for s in branch.orelse] == ["shortcut = x"]
    text = render_program(program, source="test")
    assert "    if downsample:\n" in text and "\n    else:\n        shortcut = x\n" in text
    # three blocks of six keep the shortcut: the default is False; the downsample's stride,
    # fitted over the three that downsample, defaults to theirs most pass
    assert keywords_of_calls(program, block.name) == [
        "conv_stride=2, downsample=True", "conv_stride=1", "conv_stride=1",
        "conv_stride=2, downsample=True", "conv_stride=1",
        "conv_stride=1, downsample_stride=1, downsample=True",
    ]
    assert_equals_torch(module, program, model, torch.randn(3, 3, 16, 16))


class Act(torch.nn.Module):
    def __init__(self, act: torch.nn.Module) -> None:
        super().__init__()
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(x)
        return torch.sigmoid(y) * 2


def test_a_line_run_with_other_modules_parts_the_kinds_into_defs_that_merge():
    nn = torch.nn
    model = nn.Sequential(Act(nn.ReLU()), Act(nn.Tanh()), Act(nn.ReLU()), Act(nn.Identity())).eval()
    module, program = export(model, torch.randn(2, 8))
    acts = defs_of(program, "Act.forward")
    # a ReLU or nothing: one def, `if act:`; a Tanh on that line: a def of its own
    assert len(acts) == 2
    relu, tanh = acts.values()
    assert [a.arg for a in relu.args.kwonlyargs] == ["act"] and tanh.args.kwonlyargs == []
    assert [ast.unparse(n.test) for n in ast.walk(relu) if isinstance(n, ast.If)] == ["act"]
    assert "tanh" in ast.unparse(tanh) and not any(isinstance(n, ast.If) for n in ast.walk(tanh))
    x = torch.linspace(-2, 2, 24).reshape(3, 8)
    got = jax.jit(getattr(module, program.entry.name))(jnp.asarray(x.numpy()))
    np.testing.assert_allclose(np.asarray(got), model(x).numpy(), rtol=1e-6, atol=1e-6)


def test_a_config_equal_in_every_call_stays_a_number():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(3, 8, 2, 3), Block(8, 16, 2, 3)).eval()
    module, program = export(model, torch.randn(1, 3, 16, 16))
    (block,) = defs_of(program, "Block.forward").values()
    assert [a.arg for a in block.args.kwonlyargs] == ["config"]  # strides and paddings equal: only the eps
    assert "window_strides=(2, 2)" in ast.unparse(block)
    assert_equals_torch(module, program, model, torch.randn(1, 3, 16, 16))


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="TIMM RESNET18 DID NOT RUN: timm is not installed (make setup installs it)")
def test_timm_resnet18_has_one_def_for_its_blocks():
    timm = _timm()
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    module, program = export(model, torch.randn(1, 3, 32, 32))
    (block,) = defs_of(program, "BasicBlock.forward").values()
    assert block.name == "basic_block_forward"
    assert [a.arg for a in block.args.kwonlyargs] == ["stride", "downsample", "config"]
    assert_equals_torch(module, program, model, torch.randn(1, 3, 32, 32))


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="TIMM EFFICIENTNET DID NOT RUN: timm is not installed (make setup installs it)")
def test_timm_efficientnet_b0_has_one_def_per_torch_method():
    timm = _timm()
    torch.manual_seed(0)
    model = timm.create_model("efficientnet_b0", pretrained=False, num_classes=10).eval()
    module, program = export(model, torch.randn(1, 3, 32, 32))
    methods = Counter(f.calls[0].function for f in program.functions)
    assert methods["InvertedResidual.forward"] == 1 and methods["BatchNormAct2d.forward"] == 1
    assert set(methods.values()) == {1}, methods
    assert_equals_torch(module, program, model, torch.randn(2, 3, 32, 32))


def _timm():
    if str(Path(__file__).resolve().parents[1]) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.zoo_shim  # noqa: F401  (a stand-in torchvision, imported before timm)

    return importlib.import_module("timm")
