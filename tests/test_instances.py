"""Instances of one class share one def: widths from shapes, strides and paddings as arguments.

Blocks built with other widths, strides and kernel sizes run the same torch method; the export
writes one def for it (one per kind, where a block took another branch) and passes each call
its own config, as a hand port does. Each test runs the export under `jax.jit` and compares it
with torch eager directly.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from test_shapes import export

from jaxside.render.module import render_program


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


def assert_equals_torch(module, program, model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        want = model(x).numpy()
    forward = jax.jit(getattr(module, program.entry.name))
    got = np.asarray(forward(module.load_params(model), jnp.asarray(x.numpy())))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_blocks_of_other_strides_and_widths_share_a_def_per_kind():
    torch.manual_seed(0)
    model = Net().eval()
    module, program = export(model, torch.randn(1, 3, 16, 16))
    blocks = defs_of(program, "Block.forward")
    # three blocks without a skip (strides 1, 2, 2; kernels 3, 5, 3), two with one (kernels 3, 5)
    assert sorted(blocks) == ["block_forward", "block_forward_has_skip"]
    plain, skip = blocks["block_forward"], blocks["block_forward_has_skip"]
    assert [a.arg for a in plain.args.kwonlyargs] == ["stride", "padding"]
    assert [a.arg for a in skip.args.kwonlyargs] == ["padding"]
    text = render_program(program, source="test")
    assert "window_strides=(stride, stride)" in text
    calls = [line.strip() for line in text.splitlines() if "block_forward" in line and "def " not in line]
    assert any("stride=2, padding=2" in line for line in calls), calls
    assert any("stride=1, padding=1" in line for line in calls), calls
    assert_equals_torch(module, program, model, torch.randn(2, 3, 16, 16))


def test_a_config_equal_in_every_call_stays_a_number():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(3, 8, 2, 3), Block(8, 16, 2, 3)).eval()
    module, program = export(model, torch.randn(1, 3, 16, 16))
    (block,) = defs_of(program, "Block.forward").values()
    assert block.args.kwonlyargs == []  # strides and paddings equal: nothing to pass
    assert "window_strides=(2, 2)" in ast.unparse(block)
    assert_equals_torch(module, program, model, torch.randn(1, 3, 16, 16))


@pytest.mark.skipif(importlib.util.find_spec("timm") is None,
                    reason="TIMM RESNET18 DID NOT RUN: timm is not installed (make setup installs it)")
def test_timm_resnet18_has_one_def_per_kind_of_block():
    if str(Path(__file__).resolve().parents[1]) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import benchmarks.zoo_shim  # noqa: F401  (a stand-in torchvision, imported before timm)

    timm = importlib.import_module("timm")

    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    module, program = export(model, torch.randn(1, 3, 32, 32))
    blocks = defs_of(program, "BasicBlock.forward")
    assert sorted(blocks) == ["basic_block_forward", "basic_block_forward_downsample"]
    assert_equals_torch(module, program, model, torch.randn(1, 3, 32, 32))
