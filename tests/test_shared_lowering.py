"""Calls that render alike are lowered once: the layers of a stack, each writing its own buffer,
share one group (one def written, not one per layer merged afterwards), and the module is the
same text as writing each layer's def and merging them; a layer that differs in a number or a
branch is never given another layer's def."""

from __future__ import annotations

import functools

import pytest
import torch
from test_export import assert_close, export, run_against_torch
from torch import nn

from jaxside.render.lower import lower
from jaxside.render.lower.calltree import CallTree
from jaxside.render.lower.context import Context
from jaxside.render.module import render_program
from jaxside.tracing import capture


class Block(nn.Module):
    def __init__(self, dim: int, scale: float = 2.0, gate: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.scale = scale
        self.gate = gate
        self.register_buffer("memory", torch.zeros(1, dim))

    def forward(self, x):
        h = torch.tanh(self.proj(x)) * self.scale
        if self.gate:
            h = h * torch.sigmoid(x)
        self.memory.mul_(0.5).add_(h.mean(0, keepdim=True))  # each block updates its own buffer
        return x + h + self.memory


class Stack(nn.Module):
    def __init__(self, blocks: list[Block]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


STACKS = {
    "alike": lambda: [Block(8) for _ in range(4)],
    "one scale differs": lambda: [Block(8), Block(8), Block(8, scale=3.0), Block(8)],
    "one branch differs": lambda: [Block(8), Block(8, gate=True), Block(8), Block(8)],
}


@functools.cache
def stack(name: str) -> tuple[Stack, torch.Tensor]:
    torch.manual_seed(0)
    return Stack(STACKS[name]()).eval(), torch.randn(3, 8)


def block_groups(model: Stack, x: torch.Tensor) -> int:
    """How many groups (defs written) the lowering makes of the blocks' calls."""
    tree = CallTree(Context(capture(model, x)))
    tree.hoist(tree.root)
    groups = tree.group(tree.root)
    return len([g for g in groups if g.nodes[0].call.function == "Block.forward"])


def module_text(model: Stack, x: torch.Tensor) -> str:
    trace = capture(model, x)
    return render_program(lower(trace), source="test")


@pytest.mark.parametrize(
    ("name", "groups"), [("alike", 1), ("one scale differs", 2), ("one branch differs", 2)]
)
def test_blocks_share_a_group_only_when_alike(name, groups):
    assert block_groups(*stack(name)) == groups


@pytest.mark.parametrize("name", list(STACKS))
def test_the_module_is_the_text_of_one_def_per_call_merged(name, monkeypatch):
    shared = module_text(*stack(name))
    signature = CallTree.signature

    def one_per_layer(self, node, exclude=frozenset()):  # the state's own paths: every layer apart
        return signature(self, node, exclude) + repr(node.state_out)

    monkeypatch.setattr(CallTree, "signature", one_per_layer)
    assert block_groups(*stack(name)) == 4
    assert module_text(*stack(name)) == shared


@pytest.mark.parametrize("name", list(STACKS))
def test_the_stack_runs_as_torch(name):
    model, x = stack(name)
    exported = export(model, (x,), static=True)
    defs = [f for f in exported.program.functions if f.calls[0].function == "Block.forward"]
    assert sum(len(f.calls) for f in defs) == 4
    if name == "alike":
        assert len(defs) == 1
    before = {k: v.clone() for k, v in model.named_buffers()}
    pairs, state = run_against_torch(exported)
    for got, want in pairs:
        assert_close(got, want)
    for path, value in state.items():  # what torch left in each block's buffer, block by block
        assert_close(value, dict(model.named_buffers())[path])
    assert any(not torch.equal(before[k], v) for k, v in model.named_buffers())
