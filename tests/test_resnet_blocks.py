"""Blocks of one class that took other branches, in timm's ResNet style (our own model, written
in the style of timm's `BasicBlock`): `shortcut = x`, then `if self.downsample is not None:
shortcut = self.downsample(shortcut)`, where `downsample` is a `Sequential(conv, norm)` only some
blocks have. The merged def writes the branch as `if`/`else` in every style (NNX and Equinox test
`self.downsample is not None`, and its `else`, not a second `if self.downsample is None`), and the
norm inside the `Sequential` reads its `eps` from the config as the block's own norms do, in
`config_from(model)` too where it has a value of its own."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import torch
from torch import nn

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.lower import lower
from jaxside.tracing import capture


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.act1(x)
        x = self.conv2(x)
        x = self.bn2(x)
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        x = self.act2(x)
        return x


class ResNet(nn.Module):
    def __init__(self, downsample_eps: float = 1e-5) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1)
        down = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16, eps=downsample_eps))
        self.layers = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2, down), BasicBlock(16, 16))
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


def _model(downsample_eps: float) -> ResNet:
    torch.manual_seed(0)
    model = ResNet(downsample_eps).eval()
    for module in model.modules():  # statistics that make an `eps` show in the numbers
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.normal_()
            module.running_var.uniform_(1e-3, 2e-3)
    return model


@functools.cache
def traced(downsample_eps: float) -> tuple[ResNet, tuple[torch.Tensor], Any]:
    """The model with this `eps` in its downsample's norm (the others' is 1e-5), traced once."""
    model, args = _model(downsample_eps), (torch.randn(2, 3, 16, 16),)
    return model, args, lower(capture(model, *args))


EPS = [1e-5, 1e-3]
IDS = ["one eps", "the downsample's own eps"]


@pytest.mark.parametrize(("style", "downsample_eps"), [
    ("functional", 1e-5), ("nnx", 1e-5), ("equinox", 1e-3), ("functional", 1e-3),
])
def test_a_branch_some_blocks_take_is_an_if_else_reading_the_config(style, downsample_eps):
    model, args, program = traced(downsample_eps)
    text = module_source(program, "tests/test_resnet_blocks.py", style, model)
    report = check_export(load_module(text), program, Entry(model, args, {}), run=runner(style))
    assert report.ok, report.table()
    code = re.sub(r"class Config:.*?\n\n\n", "", text, flags=re.S)  # the defs and classes but `Config`
    assert "1e-05" not in code and "0.001" not in code, code  # every `eps` read from the config
    if downsample_eps != 1e-5:  # the downsample's own is named for it, not numbered
        assert "downsample_eps: float = 0.001" in text and "eps_2" not in text, text
    if style == "functional":
        assert re.search(r"\n( +)if downsample:\n(?:\1 .*\n)+\1else:\n\1    shortcut = x\n", text), text
    else:
        assert "if self.downsample is not None:" in text and "if self.downsample is None:" not in text
        assert re.search(r"\n( +)else:\n\1    shortcut = x\n", text), text


@pytest.mark.parametrize("downsample_eps", EPS, ids=IDS)
def test_config_from_reads_the_norm_inside_the_sequential(downsample_eps):
    model, _, program = traced(downsample_eps)
    module = load_module(module_source(program, "tests/test_resnet_blocks.py"))
    eps = {f.name: f.value for f in program.config if "eps" in f.name}
    assert sorted(eps.values()) == sorted({1e-5, model.layers[1].downsample[1].eps})
    other = _model(model.layers[1].downsample[1].eps)
    for module_ in other.modules():  # another model built the same way, with other numbers
        if isinstance(module_, nn.BatchNorm2d):
            module_.eps *= 2
    config = module.config_from(other)
    assert sorted(v for k, v in vars(config).items() if "eps" in k) == sorted(2 * v for v in eps.values())
