"""Each call's equations, inputs and outputs in a `Trace` (tracing/_assemble.py) are what their
definitions say, read the slow way from the jaxpr: the innermost call whose span holds an
equation; the values a call reads that none of its equations made; the values it made that an
equation outside it reads or the program returns. Models with calls nested three deep, helper
functions, values crossing several levels and outputs made deep inside."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from conftest import load_sample

from jaxside.tracing import Capture, _internals


def scaled(x: torch.Tensor, by: torch.Tensor) -> torch.Tensor:
    return x * by


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, outer: torch.Tensor) -> torch.Tensor:
        return scaled(torch.tanh(self.lin(x)), outer) + 1


class Middle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.skip = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, outer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.inner(x, outer)
        return self.skip(h) + x, h


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Middle() for _ in range(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = x.mean() * 2  # read two and three levels down
        deep = x
        for block in self.blocks:
            x, deep = block(x, scale)
        return x, deep  # `deep` made inside Inner, returned by the program


def assert_dataflow_by_definition(trace: Any) -> None:
    """Inputs and outputs by their definitions, and each equation's call the innermost holding it."""
    eqns = trace.jaxpr.jaxpr.eqns
    calls = list(trace.root.walk())
    for index in range(len(eqns)):
        holders = [c for c in calls if index in c.all_eqns()]
        assert trace.eqn_calls[index] is max(holders, key=lambda c: len(_ancestors(c, trace.root)))
    returned = {v for v in trace.jaxpr.jaxpr.outvars if isinstance(v, _internals.Var)}
    for call in calls:
        own = call.all_eqns()
        made = [v for i in own for v in eqns[i].outvars]
        read: dict[Any, None] = {}
        for i in own:
            read.update((v, None) for v in eqns[i].invars if _is_var(v) and v not in made)
        outside = {v for i, eqn in enumerate(eqns) if i not in own for v in eqn.invars if _is_var(v)}
        assert call.inputs == list(read), call.function
        assert call.outputs == [v for v in made if v in returned or v in outside], call.function


def _is_var(atom: Any) -> bool:
    return isinstance(atom, _internals.Var)


def _ancestors(call: Any, root: Any) -> list[Any]:
    path: list[Any] = []

    def find(node: Any) -> bool:
        path.append(node)
        if node is call or any(find(child) for child in node.children):
            return True
        path.pop()
        return False

    find(root)
    return path


def test_nested_calls_and_helpers():
    torch.manual_seed(0)
    trace = Capture()(Outer(), torch.randn(3, 4))
    functions = {c.function for c in trace.root.walk()}
    assert {"Inner.forward", "Middle.forward", "scaled"} <= functions
    middle = next(c for c in trace.root.walk() if c.function == "Middle.forward")
    assert middle.inputs and middle.outputs  # (the check below is not vacuous)
    assert_dataflow_by_definition(trace)
    checked = 0
    for index, eqn in enumerate(trace.jaxpr.jaxpr.eqns):  # the innermost function of this file emitting it
        codes, _ = _internals.raw_frames(eqn)
        innermost = next((code for code in codes if code.co_filename == __file__), None)
        if innermost is not None:
            assert trace.eqn_calls[index].function == innermost.co_qualname
            checked += 1
    assert checked > len(trace.jaxpr.jaxpr.eqns) / 2


@pytest.mark.parametrize("resized", [False, True])
def test_llama_sample_and_its_replayed_retrace(resized):
    llama = load_sample("llama_model")
    config = llama.ModelArgs(block_size=32, vocab_size=64, n_layer=3, n_head=4, n_local_heads=2, dim=32)
    torch.manual_seed(0)
    model = llama.Transformer(config)
    model.setup_caches(max_batch_size=1, max_seq_length=config.block_size)
    args = (torch.zeros(1, 8, dtype=torch.long), torch.arange(8))
    trace = Capture()(model.eval(), *args)
    if resized:  # calls replayed from the first layer's (tracing/_replay.py)
        trace = Capture(resize={"idx": (1, 12), "input_pos": (12,)}, like=trace)(model, *args)
    assert_dataflow_by_definition(trace)
