"""Fusing a repeated call once (`render.rules.fuse_memo`, issue #37) is exact: every trace a
shape-generic export lowers (the first capture and its replaying retraces) fuses to the very same
equations with the memo on and off, and the exported modules are the same text."""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn as nn
from conftest import MODELS
from test_replay import llama_with_cache
from test_shapes import hf_causal_lm

from jaxside.render.lower import lower
from jaxside.render.lower.context import Dataflow
from jaxside.render.module import render_program
from jaxside.render.rules import fuse, fuse_memo, fusing
from jaxside.tracing import Capture


def _key(v: Any) -> Any:
    if type(v).__name__ == "Literal":
        return "literal", repr(v.val), v.aval
    if type(v).__name__ == "DropVar":
        return "dropped", v.aval
    return id(v)


def _fused(trace: Any) -> list[Any]:
    """The equations `trace` fuses to: primitives, operands and results by identity, what each
    idiom writes."""
    return [
        (e.primitive.name, [_key(v) for v in e.invars], [_key(v) for v in e.outvars],
         (e.params.get("code"), e.params.get("rewrite")) if e.primitive.name.startswith("idiom")
         else id(e.params))
        for e in Dataflow(trace).eqns
    ]


def assert_memo_is_exact(monkeypatch: pytest.MonkeyPatch, fn: Any, args: tuple, watch: Any = ()) -> None:
    base = Capture(watch=watch)(fn, *args)
    traces = [base]

    def retrace(resize: Any) -> Any:
        traces.append(Capture(watch=watch, resize=resize, like=base)(fn, *args))
        return traces[-1]

    carried: list[int] = []
    replay = fuse_memo.Memo.replay

    def counted(memo: Any, span: Any) -> Any:
        key, runs = replay(memo, span)
        if runs:
            carried.append(len(runs))
        return key, runs

    monkeypatch.setattr(fuse_memo.Memo, "replay", counted)
    monkeypatch.setattr(fusing, "MEMO", True)
    with_memo = render_program(lower(base, retrace), source="test")
    assert carried, "no call's runs were carried over: the memo was not exercised"
    assert len(traces) > 1
    fused = [_fused(t) for t in traces]
    monkeypatch.setattr(fusing, "MEMO", False)
    assert render_program(lower(base, retrace), source="test") == with_memo
    assert [_fused(t) for t in traces[: len(fused)]] == fused


def _fused_both_ways(monkeypatch: pytest.MonkeyPatch, fn: Any, calls: list[Any], site: Any) -> list[str]:
    """The primitives `fuse` leaves of `fn`'s equations, each of the call `calls` says, with the
    memo on and off (asserted the same)."""
    struct = jax.ShapeDtypeStruct((3, 4), jnp.float32)
    closed = jax.make_jaxpr(fn)(struct, struct)
    eqns, outvars = list(closed.jaxpr.eqns), list(closed.jaxpr.outvars)
    fused = {}
    for memo in (True, False):
        monkeypatch.setattr(fusing, "MEMO", memo)
        fused[memo] = [e.primitive.name for e in fuse(eqns, outvars, site=site, calls=calls)]
    assert fused[True] == fused[False]
    return fused[True]


def test_a_call_like_an_earlier_one_but_for_a_check_beyond_it_is_matched_again(monkeypatch):
    """The second call's two slices are the first's, but come from two torch lines: no split."""
    a, b = object(), object()
    fused = _fused_both_ways(
        monkeypatch, lambda x, y: (x[:, :2], x[:, 2:], y[:, :2], y[:, 2:]), [a, a, b, b],
        lambda i: "x.split(2, 1)" if i < 2 else f"line {i}",
    )
    assert fused == ["idiom", "slice", "slice", "slice"]


def test_a_call_like_an_earlier_one_but_for_a_user_beyond_it_is_matched_again(monkeypatch):
    """The second call's operand is also sliced by its caller: its slices are not a split."""
    a, b, caller = object(), object(), object()
    fused = _fused_both_ways(
        monkeypatch, lambda x, y: (x[:, :2], x[:, 2:], y[:, :2], y[:, 2:], y[:, 1:3]), [a, a, b, b, caller],
        lambda i: "x.split(2, 1)",
    )
    assert fused == ["idiom", "slice", "slice", "slice", "slice"]


def test_a_call_of_the_same_primitives_and_types_but_other_parameters_is_matched_again(monkeypatch):
    """The second call's slices have the first's types, but are strided: no split."""
    a, b = object(), object()
    fused = _fused_both_ways(
        monkeypatch, lambda x, y: (x[:, :2], x[:, 2:], y[:, 0:4:2], y[:, 1:4:2]), [a, a, b, b],
        lambda i: "x.split(2, 1)",
    )
    assert fused == ["idiom", "slice", "slice", "slice"]


def test_llama_sample_with_its_kv_cache(monkeypatch):
    ids, positions = torch.zeros(1, 8, dtype=torch.long), torch.arange(8)
    assert_memo_is_exact(monkeypatch, llama_with_cache(), (ids, positions))


def _load(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_memo_{name}", MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_gpt(monkeypatch):
    gpt = _load("tiny_gpt")
    torch.manual_seed(0)
    model = gpt.GPT(gpt.GPTConfig(block_size=16, vocab_size=32, n_layer=3, n_head=2, n_embd=16)).eval()
    assert_memo_is_exact(monkeypatch, model, (torch.zeros(1, 8, dtype=torch.long),), [gpt.__file__])


def test_a_resnet_with_downsampling_branches(monkeypatch):
    resnet = _load("tiny_resnet")  # (its blocks: a shortcut, downsampled where the width changes)
    torch.manual_seed(0)
    block = resnet.BasicBlock
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1), block(8, 8), block(8, 8), block(8, 16, 2), block(16, 16), block(16, 16)
    ).eval()
    assert_memo_is_exact(monkeypatch, model, (torch.randn(2, 3, 16, 16),), [resnet.__file__])


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_transformers_models(monkeypatch, kind):
    model = hf_causal_lm(kind)  # (two layers, no cache)
    assert_memo_is_exact(monkeypatch, model, (torch.zeros(1, 8, dtype=torch.long),))
