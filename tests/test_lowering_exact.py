"""The lowering's cheaper passes (issue #37) compute what the plain ones computed: each is checked
against a straightforward version of itself (the code it replaced) on real traces — a Llama with its
KV cache (the base capture and its retraces, whose layers are replayed), a GPT and a transformers
Llama: the replay of a repeated call's fusing (`Correspondence.spans`), liveness, repeated
equations, parameters made comparable, and the call tree's data flow (before and after hoisting)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
from conftest import load_model
from jax.extend.core import Literal, Var
from test_replay import llama_with_cache
from test_shapes import hf_causal_lm

from jaxside.render.lower import calltree, lower
from jaxside.render.lower.calltree import CallTree
from jaxside.render.lower.comparable import Comparable, canonical
from jaxside.render.lower.context import Context, common_subexpressions, live_eqns
from jaxside.render.lower.value_names import module_attribute
from jaxside.render.rules import fuse_memo, fusing
from jaxside.tracing import Capture


@pytest.fixture(scope="module")
def traces() -> list[Any]:
    """A Llama's base capture and the retraces a shape-generic lowering makes of it, a GPT, and a
    transformers Llama."""
    ids, positions = torch.zeros(1, 8, dtype=torch.long), torch.arange(8)
    model = llama_with_cache()
    base = Capture()(model, ids, positions)
    found = [base]

    def retrace(resize: Any) -> Any:
        found.append(Capture(resize=resize, like=base)(model, ids, positions))
        return found[-1]

    lower(base, retrace)
    assert len(found) > 1
    gpt = load_model("tiny_gpt")
    torch.manual_seed(0)
    small = gpt.GPT(gpt.GPTConfig(block_size=16, vocab_size=32, n_layer=3, n_head=2, n_embd=16)).eval()
    found.append(Capture(watch=[gpt.__file__])(small, torch.zeros(1, 8, dtype=torch.long)))
    found.append(Capture()(hf_causal_lm("llama"), torch.zeros(1, 8, dtype=torch.long)))
    return found


def _plain_equations(same: fuse_memo.Correspondence, a: Any, b: Any) -> bool:
    """`Correspondence.equations` as it was: each value bound in turn."""
    if a.primitive is not b.primitive or len(a.invars) != len(b.invars) or len(a.outvars) != len(b.outvars):
        return False
    if a.effects != b.effects or not fuse_memo.same_params_strictly(a.params, b.params):
        return False
    return all(same.bind(x, y) for x, y in zip(a.outvars, b.outvars)) and all(
        same.bind(x, y) for x, y in zip(a.invars, b.invars)
    )


def _prepared(trace: Any) -> tuple[list[Any], set[int], list[list[int]]]:
    """The equations `fuse` is given, those alive, and each call's."""
    alias = common_subexpressions(trace)
    eqns = [
        e.replace(invars=[alias.get(v, v) if isinstance(v, Var) else v for v in e.invars])
        if any(isinstance(v, Var) and v in alias for v in e.invars) else e
        for e in trace.jaxpr.jaxpr.eqns
    ]
    outvars = [alias.get(v, v) if isinstance(v, Var) else v for v in trace.jaxpr.jaxpr.outvars]
    alive = fusing.live(eqns, {v for v in outvars if isinstance(v, Var)})
    spans: dict[int, list[int]] = {}
    for i, call in enumerate(trace.eqn_calls):
        spans.setdefault(id(call), []).append(i)
    return eqns, alive, list(spans.values())


def test_spans_correspond_as_their_equations_do_one_by_one(traces):
    compared = agreed = 0
    for trace in traces:
        eqns, alive, spans = _prepared(trace)
        for n, first in enumerate(spans):
            for span in spans[n + 1 : n + 40]:
                if len(span) != len(first):
                    continue
                fast, plain = fuse_memo.Correspondence(), fuse_memo.Correspondence()
                same = fast.spans(eqns, first, span, alive)
                expected = all(
                    (i in alive) == (j in alive) and _plain_equations(plain, eqns[i], eqns[j])
                    for i, j in zip(first, span)
                )
                assert same == expected, (trace.entry, first[:3], span[:3])
                if same:
                    assert fast.forward == plain.forward and fast.backward == plain.backward
                compared += 1
                agreed += same
    assert agreed > 10 and compared > agreed  # (both answers met: repeated layers, other calls)


@pytest.mark.parametrize(
    ("fn", "dead", "same"),
    [
        (lambda x, y: (jnp.sin(x) + x, jnp.sin(y) + y), (), True),
        (lambda x, y: (jnp.sin(x) + x, jnp.sin(y) + jnp.sin(y)), (), False),  # (wired otherwise)
        (lambda x, y: (jnp.sin(x) + 1.0, jnp.sin(y) + 2.0), (), False),  # (another literal)
        (lambda x, y: (jnp.sin(x) + 1.0, jnp.sin(y) + y), (), False),  # (a value for a literal)
        (lambda x, y: (jnp.sin(x) + x, jnp.sin(y) + x), (), False),  # (reads the first call's value)
        (lambda x, y: (jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)), (), True),
        (lambda x, y: (jnp.sin(x), jnp.cos(x), jnp.sin(y), jnp.cos(y)), (3,), False),  # (one dead)
    ],
)
def test_spans_correspond_only_as_their_equations_do(fn, dead, same):
    struct = jax.ShapeDtypeStruct((3,), jnp.float32)
    closed = jax.make_jaxpr(fn)(struct, struct)
    eqns = list(closed.jaxpr.eqns)
    alive = fusing.live(eqns, {v for n, v in enumerate(closed.jaxpr.outvars) if n not in dead})
    half = len(eqns) // 2
    first, span = list(range(half)), list(range(half, 2 * half))
    fast, plain = fuse_memo.Correspondence(), fuse_memo.Correspondence()
    expected = all(
        (i in alive) == (j in alive) and _plain_equations(plain, eqns[i], eqns[j])
        for i, j in zip(first, span)
    )
    assert expected is same
    assert fast.spans(eqns, first, span, alive) is same


def test_liveness_and_repeats_as_a_plain_walk_finds_them(traces):
    for trace in traces:
        eqns, alive, _ = _prepared(trace)
        needed, plain = {v for v in trace.jaxpr.jaxpr.outvars if isinstance(v, Var)}, set()
        for i in range(len(eqns) - 1, -1, -1):
            if eqns[i].effects or any(v in needed for v in eqns[i].outvars):
                plain.add(i)
                needed.update(v for v in eqns[i].invars if isinstance(v, Var))
        wanted = {v for v in trace.jaxpr.jaxpr.outvars if isinstance(v, Var)}
        assert fusing.live(eqns, wanted) == plain
        alias = common_subexpressions(trace)
        assert alias  # (torchax re-slices views: each trace has repeats)
        needed, plain = set(wanted), set()
        for i in range(len(eqns) - 1, -1, -1):
            if any(v in alias for v in eqns[i].outvars):
                continue
            if eqns[i].effects or any(v in needed for v in eqns[i].outvars):
                plain.add(i)
                needed.update(v for v in eqns[i].invars if isinstance(v, Var))
        assert live_eqns(eqns, list(wanted), alias) == plain
        keys, plain_alias = Comparable(), {}
        for call in trace.root.walk():
            seen: dict[Any, Any] = {}
            for i in call.eqns:
                e = trace.jaxpr.jaxpr.eqns[i]
                if e.effects:
                    continue
                key = (
                    e.primitive.name,
                    tuple(
                        keys.literal(v) if isinstance(v, Literal) else plain_alias.get(v, v) for v in e.invars
                    ),
                    tuple(str(v.aval) for v in e.outvars),
                    keys.params(e.params),
                )
                if key in seen:
                    plain_alias.update(zip(e.outvars, seen[key].outvars))
                else:
                    seen[key] = e
        assert alias == plain_alias


def test_parameters_compare_the_same_with_jaxprs_and_strings_printed_once(traces):
    for trace in traces:
        flow = Context(trace).flow  # (its idiom equations: each run's code, a string)
        keys = Comparable()
        for e in [*trace.jaxpr.jaxpr.eqns, *flow.eqns]:
            assert keys.params(e.params) == canonical(e.params)
        assert any(isinstance(k, str) for k in keys._memo)
    inner = jax.jit(lambda x: jnp.sin(x) * 2)
    closed = jax.make_jaxpr(lambda x: inner(inner(x)) + inner(x))(jnp.ones(3))
    calls = [e for e in closed.jaxpr.eqns if e.primitive.name in ("pjit", "jit")]
    assert len(calls) == 3
    keys = Comparable()
    assert [keys.params(e.params) for e in calls] == [canonical(e.params) for e in calls]
    assert sum(isinstance(k, int) for k in keys._memo) == 1  # the calls share one jaxpr: printed once


def _plain_flow(tree: CallTree, node: Any) -> tuple[list[Any], list[Any], list[str], int]:
    """A node's inputs, outputs, state written and position, from one walk of all its equations."""
    flow = tree.ctx.flow
    live = [i for i in node.call.all_eqns() if i in flow.live]  # (where it sits: before any hoisting)
    eqns = sorted(node.eqns)
    made: dict[Any, tuple[int, int]] = {}
    inputs: dict[Any, None] = {}
    for i in eqns:
        for v in flow.eqns[i].invars:
            if isinstance(v, Var) and v not in made:
                inputs.setdefault(v)
        for j, v in enumerate(flow.eqns[i].outvars):
            made.setdefault(v, (i, j))
    leaving = [
        v for v in made if v in flow.program_outs or any(u not in node.eqns for u in flow.uses.get(v, ()))
    ]
    anchor = node.anchor
    state = [
        p for p, v in tree.ctx.roles.state_final.items()
        if v in made and anchor is not None and (anchor == "" or p == anchor or p.startswith(anchor + "."))
    ]
    position = min(live) if live else 0
    return list(inputs), sorted(leaving, key=made.__getitem__), state, position


@pytest.mark.parametrize("merged", [True, False])
def test_the_call_tree_data_flow_is_a_walk_of_each_calls_equations(traces, monkeypatch, merged):
    """Merged from each node's children (the traces' order allows it) and walked node by node."""
    if not merged:
        monkeypatch.setattr(calltree, "_makers", lambda eqns, live: None)
    for trace in traces:
        tree = CallTree(Context(trace))
        for hoisted in (False, True):
            nodes = list(tree.root.walk())
            assert len(nodes) > 3
            for node in nodes:
                own = set(node.own).union(*(c.eqns for c in node.children))
                assert node.eqns == own
                assert (node.inputs, node.outputs, node.state_out, node.position) == _plain_flow(tree, node)
            if not hoisted:
                tree.hoist(tree.root)


class _Call:
    def __init__(self, path: str, function: str = "Block.forward") -> None:
        self.module_path, self.function = path, function


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ("self.mlpf(x)", "h.0.mlp", "mlp"), ("self.mlp(x)", "h.0.mlp", None), ("mlp(x)", "h.0.mlp", None),
        ("self.layers[0](x)", "layers.0", None), ("self.act(self.fc(x)) +", "h.0.act", None),
        ("  self.mlpf(x)  ", "h.0.mlp", "mlp"), ("self.mlpf(x)", "", None),
    ],
)
def test_a_call_sites_attribute_as_parsing_its_text_says(text, path, expected):
    assert module_attribute(text, _Call(path)) == expected
    assert module_attribute(text, _Call(path)) == expected  # (again: the parse is kept)
    assert module_attribute(text, _Call(path, "Block.compute")) is None


def test_values_made_twice_or_read_before_made_are_walked_node_by_node():
    closed = jax.make_jaxpr(lambda x: jnp.sin(jnp.cos(x)))(jnp.ones(3))
    cos, sin = closed.jaxpr.eqns
    assert calltree._makers([cos, sin], {0, 1}) == {cos.outvars[0]: (0, 0), sin.outvars[0]: (1, 0)}
    assert calltree._makers([sin, cos], {0, 1}) is None  # (sin reads what cos makes after it)
    assert calltree._makers([cos, cos], {0, 1}) is None
    assert calltree._makers([cos, cos], {1}) is not None  # (a dead equation makes nothing)
