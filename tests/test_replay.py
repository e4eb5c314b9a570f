"""Retraces that replay repeated module calls (`Capture(like=...)`, tracing/_replay.py) give the
trace a full retrace gives: the same jaxpr, sites, call tree, Seen records and origins, hence the
same exported module; calls that are not provably alike run torch again."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn as nn
from conftest import ROOT, load_sample

from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import Capture, _internals


@pytest.fixture
def replays(monkeypatch):
    """Counts the equations replays emitted (`.call_count`); a mock, as a function of this
    file would be recorded as user code."""
    counted = mock.Mock(wraps=_internals.emit_like)
    monkeypatch.setattr(_internals, "emit_like", counted)
    return counted


def assert_same_trace(full: Any, replayed: Any) -> None:
    """Equal but for var names: jaxpr, sites, each call's record, every value's origin."""
    assert str(full.jaxpr) == str(replayed.jaxpr)
    vars_ = dict(zip(full.jaxpr.jaxpr.invars, replayed.jaxpr.jaxpr.invars))
    vars_.update(zip(full.jaxpr.jaxpr.constvars, replayed.jaxpr.jaxpr.constvars))
    for a, b in zip(full.jaxpr.jaxpr.eqns, replayed.jaxpr.jaxpr.eqns):
        vars_.update(zip(a.outvars, b.outvars))
    assert full.eqn_sites == replayed.eqn_sites
    assert [c.function for c in full.eqn_calls] == [c.function for c in replayed.eqn_calls]

    def same(a: Any) -> Any:
        return vars_.get(a, a) if isinstance(a, _internals.Var) else a

    full_calls, replayed_calls = list(full.root.walk()), list(replayed.root.walk())
    assert len(full_calls) == len(replayed_calls)
    for a, b in zip(full_calls, replayed_calls):
        fields = ("function", "file", "line", "module_path", "module_type", "eqns", "call_site", "raised")
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert [(n, same(v)) for n, v in a.args] == b.args
        assert [(n, same(v)) for n, v in a.returned] == b.returned
        assert [same(v) for v in a.inputs] == b.inputs and [same(v) for v in a.outputs] == b.outputs
        assert [(n, line, same(v)) for n, line, v in a.seen.bindings] == b.seen.bindings
        assert (a.seen.numbers, a.seen.attributes, a.seen.lines) == (
            b.seen.numbers, b.seen.attributes, b.seen.lines)
    assert {vars_.get(v, v): o for v, o in full.origins.items()} == replayed.origins


def exports(fn: Any, args: tuple, watch: list[str] = ()) -> tuple[str, str, int]:
    """The module exported with full retraces and with replaying ones (each replaying retrace
    compared with the full one at its sizes), and how many retraces there were."""
    base = Capture(watch=watch)(fn, *args)
    traces: dict[str, Any] = {}

    def full(resize: Any) -> Any:
        traces[repr(resize)] = Capture(watch=watch, resize=resize)(fn, *args)
        return traces[repr(resize)]

    def replaying(resize: Any) -> Any:
        replayed = Capture(watch=watch, resize=resize, like=base)(fn, *args)
        assert_same_trace(traces.get(repr(resize)) or full(resize), replayed)
        return replayed

    plain = render_program(lower(base, full), source="test")
    return plain, render_program(lower(base, replaying), source="test"), len(traces)


def llama_with_cache() -> nn.Module:
    """The Llama sample at three layers, with its KV cache set up."""
    llama = load_sample("llama_model")
    config = llama.ModelArgs(block_size=32, vocab_size=64, n_layer=3, n_head=4, n_local_heads=2, dim=32)
    torch.manual_seed(0)
    model = llama.Transformer(config)
    model.setup_caches(max_batch_size=1, max_seq_length=config.block_size)
    return model.eval()


def test_llama_sample_with_its_kv_cache_replays_its_layers(replays):
    ids, positions = torch.zeros(1, 8, dtype=torch.long), torch.arange(8)
    plain, replayed, retraces = exports(llama_with_cache(), (ids, positions))
    assert replayed == plain and retraces
    assert replays.call_count > 0


def test_a_gpt_replays_its_blocks(replays):
    path = ROOT / "tests" / "models" / "tiny_gpt.py"
    spec = importlib.util.spec_from_file_location("_replay_tiny_gpt", path)  # not `tiny_gpt`: other
    gpt = importlib.util.module_from_spec(spec)  # tests import their own copy by that name
    sys.modules[spec.name] = gpt
    spec.loader.exec_module(gpt)
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(block_size=16, vocab_size=32, n_layer=3, n_head=2, n_embd=16)).eval()
    watch = [str(path)]
    plain, replayed, retraces = exports(model, (torch.zeros(1, 8, dtype=torch.long),), watch)
    assert replayed == plain and retraces
    assert replays.call_count > 0


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_transformers_models_export_the_same(family):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(config).eval()
    else:
        config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=3, n_head=4, n_positions=64)
        model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.zeros(1, 8, dtype=torch.long)
    plain, replayed, retraces = exports(_Logits(model), (ids,))
    assert replayed == plain and retraces


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False).logits


class _Layer(nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.index == 1 and x.shape[0] > 2:  # only this layer, only at some sizes
            x = x * 2
        return torch.tanh(self.proj(x))


class _Branching(nn.Module):
    """Layers alike at the example size but for the index one of them branches on, with the size."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(i) for i in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


_CONTEXT: dict[str, Any] = {}


class _Reading(nn.Module):
    """A layer that reads its parent's buffer, handed over out of sight (neither argument nor state)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * _CONTEXT["offset"].mean()


class _Parent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.arange(8.0))
        self.layers = nn.ModuleList(_Reading() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _CONTEXT["offset"] = self.offset
        try:
            for layer in self.layers:
                x = layer(x)
        finally:
            _CONTEXT.clear()
        return x


_MODE = [0]


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _MODE[0] == 1:  # a global the caller sets: no key of the call's own differs
            x = x * 2
        return torch.tanh(self.proj(x))


class _Moded(nn.Module):
    """Layers alike in everything they hold; the second one branches on a global set before it."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Plain() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            _MODE[0] = i
            x = layer(x)
        return x


class _Drop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(x))


class _Dropping(nn.Module):
    """Alike layers that draw (dropout in training): each draw splits the key anew."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Drop() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize(
    ("model", "replayed_layers"), [(_Branching, 0), (_Parent, 0), (_Moded, 1), (_Dropping, 0)]
)
def test_calls_not_provably_alike_run_again(model, replayed_layers, replays):
    """Only `_Moded`'s third layer replays (from the first): the base trace shows the second unlike."""
    torch.manual_seed(0)
    fn = model()
    x = torch.randn(2, 8)
    base = Capture()(fn, x)
    full = Capture(resize={"x": (4, 8)})(fn, x)
    replayed = Capture(resize={"x": (4, 8)}, like=base)(fn, x)
    assert_same_trace(full, replayed)
    assert replays.call_count == 4 * replayed_layers  # dot_general, broadcast_in_dim, add, tanh
    plain, exported, _ = exports(fn, (x,))
    assert exported == plain


def test_the_same_layers_replay_where_nothing_differs(replays):
    """The control of the test above: `_Layer`s that never branch are replayed."""
    torch.manual_seed(0)
    fn = nn.Sequential(*(_Layer(0) for _ in range(3)))
    wrapped = _Branching()
    wrapped.layers = nn.ModuleList(fn)
    x = torch.randn(2, 8)
    base = Capture()(wrapped, x)
    replayed = Capture(resize={"x": (4, 8)}, like=base)(wrapped, x)
    assert_same_trace(Capture(resize={"x": (4, 8)})(wrapped, x), replayed)
    assert replays.call_count > 0


def test_the_command_line_export_with_replayed_retraces_passes_its_check(tmp_path, replays):
    """`annotate --export --check` on a layered model: generic sizes from replaying retraces, the
    module checked against torch at the traced shape, a smaller and a larger one."""
    from jaxside.annotate.cli import main

    file = tmp_path / "stack.py"
    file.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, dim):\n"
        "        super().__init__()\n"
        "        self.norm = nn.LayerNorm(dim)\n"
        "        self.up = nn.Linear(dim, 2 * dim)\n"
        "        self.down = nn.Linear(2 * dim, dim)\n\n"
        "    def forward(self, x):\n"
        "        return x + self.down(torch.relu(self.up(self.norm(x))))\n\n\n"
        "class Stack(nn.Module):\n"
        "    def __init__(self, dim=8, depth=4):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))\n\n"
        "    def forward(self, x):\n"
        "        for block in self.blocks:\n"
        "            x = block(x)\n"
        "        return x.mean(dim=1)\n\n\n"
        "def example():\n"
        "    torch.manual_seed(0)\n"
        "    return Stack(), (torch.randn(2, 5, 8),)\n"
    )
    exported = tmp_path / "stack_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(exported), "--check"]) == 0
    assert "x.shape[0]" in exported.read_text() or "batch" in exported.read_text()
    assert replays.call_count > 0
