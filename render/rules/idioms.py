"""Idioms: a run of equations that one `jnp` expression stages, written as that expression.

torchax lowers `freqs_cis[input_pos]` to `freqs_cis[input_pos]` in `jnp`, which stages an
index wrap (`lt`, `add`, `select_n`), a `broadcast_in_dim` and a `gather`; `k_out[:, :, pos] = k`
to `.at[...].set(...)`; `x.mean(-1, keepdim=True)` to `jnp.mean`.  `fuse` (`render.rules.fusing`)
finds such runs and replaces each by one `idiom` equation whose rule writes the expression
(`x[i]`, `x.at[:, i].set(v)`).

A match is checked, never assumed: a candidate expression (built from the last equation's
params by the pattern for its primitive, below) is traced on its operands' types, and the
equations it stages must be the run's equations, the same primitives with the same params wired
the same way.  So an idiom computes what the run computed, equation for equation; the values
the run made on the way (the wrapped index) must be used by nothing else.

An idiom may have several results: `q, k, v = x.split([64, 32, 32], -1)` stages three slices,
written `q, k, v = jnp.split(x, [64, 96], axis=2)`; the candidate names the values its results
stand for (`Candidate.outputs`) and its code is a sequence.  When the expression written is not
the one that stages the run (a `split` primitive, not three slices), the candidate traces a
reference (`code`) and writes another (`writes`), a rewrite of `REWRITES` proven bitwise.

**To add an idiom**: write a function `(eqn, graph) -> [(code, operands), ...]` (or `Candidate`s)
proposing candidate expressions over `_0`, `_1`, ... for runs ending in `eqn`, reading the program
around it through `graph` (who made a value, who reads it), and register it in `PATTERNS` under
the primitive that ends the run (a family of patterns may live in a module of its own,
`render.rules.masks`, and be registered here); `tests/test_ops.py` and the fuzzer prove every
fused program the same way as single equations.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jax.extend.core import Literal, Primitive

from jaxside.render.rules._core import Candidate, Graph, Pair, Proposal, Rule, is_traced, registrar, rewritten
from jaxside.render.rules.draw_calls import key_split
from jaxside.render.rules.dynamic import dynamic_slice
from jaxside.render.rules.einsum import einsum
from jaxside.render.rules.emitter import Emitter
from jaxside.render.rules.masks import triangle
from jaxside.render.rules.shapes import inserted_axes, new_axes, split_parts
from jaxside.render.rules.updates import AT_METHODS, basic_update, written_values

RULES: dict[str, Rule] = {}
rule = registrar(RULES)

IDIOM = Primitive("idiom")
"""The primitive of a fused run; `params["code"]` is the expression over `_0`, `_1`, ..."""
IDIOM.multiple_results = False
IDIOMS = Primitive("idiom")
"""The same for a run with several results (`q, k, v = jnp.split(...)`): the expression is a sequence."""
IDIOMS.multiple_results = True


@rule("idiom")
def _idiom(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    tree = ast.parse(eqn.params["code"], mode="eval").body
    rewrite = eqn.params.get("rewrite")

    class Fill(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id.startswith("_") and node.id[1:].isdigit():
                return args[int(node.id[1:])]
            return node

    node = Fill().visit(tree)
    return rewritten(rewrite, node, emitter) if rewrite else node


# -- patterns ----------------------------------------------------------------------------------------

# Index preparation jnp stages before a gather or scatter: the wrap of negative indices, the
# broadcasts and reshapes that line several index arrays up, their casts.
_INDEX_PREP = frozenset({"lt", "add", "select_n", "broadcast_in_dim", "reshape", "concatenate",
                         "convert_element_type", "jit"})


def _index_leaves(var: Any, graph: Graph) -> list[list[Any]]:
    """The index arrays behind a gather's or scatter's `indices` operand, in order: those found
    walking back through all of jnp's index preparation, and (when they differ) the indices that
    go into its wraps of negative values (`select_n(i < 0, i, i + n)`)."""
    greedy: list[Any] = []
    wrapped: list[Any] = []

    def walk(v: Any) -> None:
        if not is_traced(v):
            return
        eqn = graph.producer(v)
        name = eqn.primitive.name if eqn is not None else None
        where = name == "jit" and eqn.params.get("name") == "_where"
        wrap = name == "select_n" or where and _negative_test(eqn, graph)
        if wrap:
            raw = eqn.invars[-2] if name == "select_n" else eqn.invars[-1]
            if raw not in wrapped:
                wrapped.append(raw)
        if eqn is None or eqn.primitive.name not in _INDEX_PREP or (eqn.primitive.name == "jit" and not wrap):
            if v not in greedy:
                greedy.append(v)
            return
        for operand in eqn.invars:
            walk(operand)

    walk(var)
    return [greedy] if wrapped == greedy or not wrapped else [greedy, wrapped]


def _negative_test(where: Any, graph: Graph) -> bool:
    """Whether a `jnp.where` is a wrap's (`i < 0`), not torch's (`where(valid, t, 0)` of nll_loss)."""
    test = graph.producer(where.invars[0]) if is_traced(where.invars[0]) else None
    return test is not None and test.primitive.name == "lt"


def _subscript(ndim: int, axes: tuple[int, ...], indices: list[str]) -> str:
    """`:, _1, _2` for the index arrays written `indices` at `axes` (consecutive) of an `ndim` array."""
    items = [":"] * ndim
    for axis, index in zip(axes, indices):
        items[axis] = index
    while items and items[-1] == ":" and len(items) > max(axes, default=0) + 1:
        items.pop()
    if len(items) == 1 and items[0].startswith("["):  # `x[[1, 0]]` is no index for jnp: `x[[1, 0], :]`
        return f"{items[0]}, :" if ndim > 1 else f"{items[0]},"
    return ", ".join(items)


def _gather(eqn: Any, graph: Graph) -> list[Pair]:
    """`x[i]`, `x[:, :, i]`, `x[i, j]`: the index wrap (`i + n` where `i < 0`), the broadcasts and
    the `gather` (mode `PROMISE_IN_BOUNDS`) jnp stages for integer-array indexing."""
    x, indices = eqn.invars
    if not is_traced(x):
        return []
    axes = tuple(eqn.params["dimension_numbers"].start_index_map)
    if not axes or list(axes) != list(range(axes[0], axes[0] + len(axes))):
        return []
    candidates: list[Pair] = []
    for leaves in _index_leaves(indices, graph):
        if len(leaves) == len(axes):
            for items, operands in _written_indices(leaves, graph):
                candidates.append((f"_0[{_subscript(x.aval.ndim, axes, items)}]", [x, *operands]))
    return candidates


LIST_LIMIT = 32
"""An index array of at most this many numbers that the program holds as a constant (torch made
it from a Python list: `x[:, [-1], :]`) is written as that list, where it is used."""


def _written_indices(leaves: list[Any], graph: Graph, first: int = 1) -> list[tuple[list[str], list[Any]]]:
    """How to write index arrays: each constant one as its list (`[-1]`), the others as operands
    `_first`, ...; and, when some are constants, all as operands (a candidate that may match
    where the lists do not). Pairs (the index items, the operands)."""
    lists = [_index_list(leaf, graph) for leaf in leaves]
    forms = []
    if any(lists):
        items, operands = [], []
        for leaf, written in zip(leaves, lists):
            if written is None:
                operands.append(leaf)
            items.append(written or f"_{first + len(operands) - 1}")
        forms.append((items, operands))
    return [*forms, ([f"_{first + k}" for k in range(len(leaves))], list(leaves))]


def _index_list(leaf: Any, graph: Graph) -> str | None:
    """`[-1]` for a small integer constant index array (of rank 1 or 2), else None."""
    value = graph.constant(leaf)
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype.kind not in "iu" or array.ndim not in (1, 2) or not 0 < array.size <= LIST_LIMIT:
        return None
    return repr(array.tolist())


def _scatter(eqn: Any, graph: Graph) -> list[Proposal]:
    """`x.at[:, i].set(v)`, `.add(v)`, `.multiply(v)`, `.min(v)`, `.max(v)`: the index wrap, the
    broadcasts of `v` and the scatter (mode `FILL_OR_DROP`) jnp stages for an indexed update.  And
    `x.at[:, 0].set(0.0)`, `x.at[:, 1:3].set(v)`, `x.at[..., ::2].add(v)` for torch's writes at
    integers and slices (`render.rules.updates`): torchax stages the constant in-bounds starts and
    the `FILL_OR_DROP` scatter that `.at` stages for them (a negative index at its start, `n - 1`
    for -1), so the written form re-traces to the same scatter, nothing dropped."""
    x, indices, updates = eqn.invars
    candidates: list[Proposal] = list(basic_update(eqn, graph))  # (`x.at[:, 0].set(0.0)`)
    axes = tuple(eqn.params["dimension_numbers"].scatter_dims_to_operand_dims)
    if not is_traced(x) or not axes or list(axes) != list(range(axes[0], axes[0] + len(axes))):
        return candidates
    method = AT_METHODS[eqn.primitive.name]
    for leaves in _index_leaves(indices, graph):
        for items, operands in _written_indices(leaves, graph) if len(leaves) == len(axes) else ():
            index = _subscript(x.aval.ndim, axes, items)
            for text, value in written_values(updates, graph, len(operands) + 1):
                candidates.append((f"_0.at[{index}].{method}({text})", [x, *operands, *value]))
    return candidates


def _squeeze(eqn: Any, graph: Graph) -> list[Proposal]:
    """`x[:, :, 0]` (`x[..., 0]` for the last axis) for the slice and squeeze jnp stages for an
    integer index.  And `r, s, t = jnp.unstack(x, axis=1)` for torch.unbind's split into parts of
    one, each squeezed (the rewrite `unstack_parts`)."""
    (sliced,) = eqn.invars
    source = graph.producer(sliced) if is_traced(sliced) else None
    if source is not None and source.primitive.name == "split":
        return _unstack(eqn, source, graph)
    if source is not None and source.primitive.name == "slice" and is_traced(source.invars[0]):
        found = key_split(eqn, graph)  # (`key, dropout_key = jax.random.split(key)`)
        if found:
            return found
    dims = tuple(eqn.params["dimensions"])
    if source is None or source.primitive.name != "slice" or len(dims) != 1:
        return []
    x = source.invars[0]
    starts, limits = source.params["start_indices"], source.params["limit_indices"]
    if source.params["strides"] is not None:
        return []
    items = [
        ":" if (a, b) == (0, n) else f"{a or ''}:{b if b != n else ''}"
        for a, b, n in zip(starts, limits, x.aval.shape)
    ]
    items[dims[0]] = str(starts[dims[0]])
    while items[-1] == ":":
        items.pop()
    candidates: list[Proposal] = [(f"_0[{', '.join(items)}]", [x])]
    if len(items) > 2 and all(item == ":" for item in items[:-1]):
        candidates.insert(0, (f"_0[..., {items[-1]}]", [x]))
    return candidates


def _unstack(eqn: Any, split: Any, graph: Graph) -> list[Proposal]:
    axis, n = split.params["axis"], len(split.params["sizes"])
    if set(split.params["sizes"]) != {1} or n < 2 or tuple(eqn.params["dimensions"]) != (axis,):
        return []
    outputs = []
    for part in split.outvars:
        users = graph.users(part)
        squeezed = len(users) == 1 and users[0].primitive.name == "squeeze"
        if not squeezed or tuple(users[0].params["dimensions"]) != (axis,):
            return []
        outputs.append(users[0].outvars[0])
    reference = f"tuple(jnp.squeeze(p, axis={axis}) for p in jnp.split(_0, {n}, axis={axis}))"
    writes = f"jnp.unstack(_0, axis={axis})"
    return [Candidate(reference, [split.invars[0]], writes, "unstack_parts", outputs)]


def _axis(axes: tuple[int, ...]) -> str:
    return str(axes[0]) if len(axes) == 1 else str(tuple(axes))


def _div(eqn: Any, graph: Graph) -> list[Proposal]:
    """`jnp.mean(x, axis, keepdims=True)` and `jax.nn.softmax(x, axis)` end in a division (and
    `x / y` with rank promotion, as for the other operators)."""
    numerator, denominator = eqn.invars
    candidates: list[Proposal] = []
    top = graph.producer(numerator) if is_traced(numerator) else None
    if top is not None and top.primitive.name == "broadcast_in_dim" and is_traced(top.invars[0]):
        top = graph.producer(top.invars[0])
    if top is not None and top.primitive.name == "reduce_sum" and isinstance(denominator, Literal):
        axes = tuple(top.params["axes"])
        keep = ", keepdims=True" if eqn.outvars[0].aval.ndim == top.invars[0].aval.ndim else ""
        candidates.append((f"jnp.mean(_0, axis={_axis(axes)}{keep})", [top.invars[0]]))
    exp = graph.producer(numerator) if is_traced(numerator) else None
    shifted = graph.producer(exp.invars[0]) if exp is not None and exp.primitive.name == "exp" else None
    if shifted is not None and shifted.primitive.name == "sub" and is_traced(shifted.invars[0]):
        total = graph.producer(denominator) if is_traced(denominator) else None
        while total is not None and total.primitive.name == "broadcast_in_dim":
            total = graph.producer(total.invars[0])
        if total is not None and total.primitive.name == "reduce_sum":
            axes = tuple(total.params["axes"])
            candidates.append((f"jax.nn.softmax(_0, axis={_axis(axes)})", [shifted.invars[0]]))
    return candidates + _promoted(eqn, graph)


def _broadcast(eqn: Any, graph: Graph) -> list[Proposal]:
    """`x[None, None, i]`: jnp gathers, then puts the new axes in front.  And `x[:, None, :, 0]`:
    the slice and squeeze of an integer index, then the new axes."""
    (value,) = eqn.invars
    source = graph.producer(value) if is_traced(value) else None
    new = eqn.outvars[0].aval.ndim - value.aval.ndim if is_traced(value) else 0
    if source is not None and source.primitive.name == "squeeze" and new > 0:
        return _new_axes(eqn, source, graph)
    if source is None or source.primitive.name != "gather" or new <= 0:
        return []
    prefix = "_0[" + "None, " * new
    return [(code.replace("_0[", prefix, 1), operands) for code, operands in _gather(source, graph)]


def _new_axes(eqn: Any, squeeze: Any, graph: Graph) -> list[Proposal]:
    """`x[:, None, :, 0]` for `x[:, :, 0]` broadcast to new axes of size one."""
    # Only an index (`x[:, :, 0]`), not `jnp.unstack`'s parts (a rewrite with several results).
    proposed = [Candidate(*p) for p in _squeeze(squeeze, graph)]
    found = [c for c in proposed if c.writes is None and c.outputs is None and "..." not in c.code]
    if not found:
        return []
    code, operands = found[0].code, found[0].operands
    items = code[len("_0[") : -1].split(", ")
    items += [":"] * (operands[0].aval.ndim - len(items))
    kept = set(eqn.params["broadcast_dimensions"])
    woven: list[str] = []
    axis = 0  # the next axis of the result
    for item in items:
        while item == ":" and axis not in kept and axis < eqn.outvars[0].aval.ndim:
            woven.append("None")
            axis += 1
        woven.append(item)
        axis += item == ":"
    woven += ["None"] * (eqn.outvars[0].aval.ndim - axis)
    while woven[-1] == ":":
        woven.pop()
    return [(f"_0[{', '.join(woven)}]", operands)]


def _reshape(eqn: Any, graph: Graph) -> list[Proposal]:
    """`jnp.repeat(x, r, axis=d)`: a broadcast to a new axis after `d`, merged into `d`; torch's
    `k[:, :, None].expand(b, kv, r, s, d).reshape(b, kv * r, s, d)` (HF's `repeat_kv`) broadcasts
    twice, to the new axis and along it (the rewrite `repeat_broadcasts`).  And `a @ b` for the
    matmul torchax flattens to one batch axis and back (the rewrite `matmul_unflattened`)."""
    (value,) = eqn.invars
    source = graph.producer(value) if is_traced(value) else None
    if source is not None and source.primitive.name == "dot_general":
        return _unflattened_matmul(eqn, source, graph)
    if source is None or source.primitive.name != "broadcast_in_dim" or not is_traced(source.invars[0]):
        return []
    x, dims = source.invars[0], tuple(source.params["broadcast_dimensions"])
    inner = graph.producer(x)
    twice = inner is not None and inner.primitive.name == "broadcast_in_dim" and is_traced(inner.invars[0])
    if twice:  # a broadcast of a broadcast: one broadcast, of the axes composed
        x, dims = inner.invars[0], tuple(dims[d] for d in inner.params["broadcast_dimensions"])
    found = _repeat(tuple(x.aval.shape), tuple(source.params["shape"]), dims, eqn)
    if found is None:
        return []
    written = f"jnp.repeat(_0, {found[0]}, axis={found[1]})"
    if not twice:
        return [(written, [x])]
    steps = [(tuple(e.params["shape"]), tuple(e.params["broadcast_dimensions"])) for e in (inner, source)]
    reference = "lax.broadcast_in_dim(lax.broadcast_in_dim(_0, {}, {}), {}, {})".format(*steps[0], *steps[1])
    reference = f"lax.reshape({reference}, {tuple(eqn.params['new_sizes'])})"
    return [Candidate(reference, [x], written, "repeat_broadcasts")]


def _repeat(
    shape: tuple[int, ...], wide: tuple[int, ...], dims: tuple[int, ...], reshape: Any
) -> tuple[int, int] | None:
    """`(r, d)` when broadcasting `shape` to `wide` along `dims`, then `reshape`, is `jnp.repeat(x, r,
    axis=d)`: one new axis, after `d`, every other axis as it was, the new one merged into `d`."""
    new = [d for d in range(len(wide)) if d not in dims]
    if len(new) != 1 or new[0] == 0 or wide[: new[0]] + wide[new[0] + 1 :] != shape:
        return None
    axis, r = new[0] - 1, wide[new[0]]
    merged = (*shape[:axis], shape[axis] * r, *shape[axis + 1 :])
    if reshape.params.get("dimensions") is not None or tuple(reshape.params["new_sizes"]) != merged:
        return None
    return (r, axis) if dims == tuple(d for d in range(len(wide)) if d != new[0]) else None


def _unflattened_matmul(eqn: Any, dot: Any, graph: Graph) -> list[Proposal]:
    made = [graph.producer(v) if is_traced(v) else None for v in dot.invars]
    flat = [e for e in made if e is not None and e.primitive.name == "reshape" and is_traced(e.invars[0])]
    if len(flat) < len(made):
        return []
    a, b = (e.invars[0] for e in flat)
    sa, sb, out = tuple(a.aval.shape), tuple(b.aval.shape), tuple(eqn.outvars[0].aval.shape)
    if len(sa) < 3 or sa[:-2] != sb[:-2] or len(sb) != len(sa) or out != (*sa[:-1], sb[-1]):
        return []
    shapes = [tuple(e.params["new_sizes"]) for e in flat]
    reference = f"jnp.reshape(jnp.reshape(_0, {shapes[0]}) @ jnp.reshape(_1, {shapes[1]}), {out})"
    return [Candidate(reference, [a, b], "_0 @ _1", "matmul_unflattened")]


_BINARY = {"add": "_0 + _1", "sub": "_0 - _1", "mul": "_0 * _1", "div": "_0 / _1", "and": "_0 & _1",
           "or": "_0 | _1", "xor": "_0 ^ _1", "eq": "_0 == _1", "ne": "_0 != _1", "lt": "_0 < _1",
           "le": "_0 <= _1", "gt": "_0 > _1", "ge": "_0 >= _1", "max": "jnp.maximum(_0, _1)",
           "min": "jnp.minimum(_0, _1)"}


def _promoted(eqn: Any, graph: Graph) -> list[Proposal]:
    """'x * w' for a binary operator (or 'jnp.maximum', 'jnp.minimum') whose operand of lower rank
    jnp broadcasts first: the 'broadcast_in_dim' adding leading axes that rank promotion stages.
    And 'x - v[:, None, None]' for an operand reshaped from '(16,)' to '(1, 16, 1, 1)' beside one
    of full rank (the rewrite 'unit_axes')."""
    sources = []
    for v in eqn.invars:
        made = graph.producer(v) if is_traced(v) else None
        broadcast = made is not None and made.primitive.name == "broadcast_in_dim"
        inner = made.invars[0] if made is not None and broadcast else None
        sources.append(inner if broadcast and is_traced(inner) else None)
    code = _BINARY[eqn.primitive.name]
    tries = [[s if s is not None else v for s, v in zip(sources, eqn.invars)]] if all(sources) else []
    for i, source in enumerate(sources):
        if source is not None:
            tries.append([source if i == j else v for j, v in enumerate(eqn.invars)])
    return _unit_axes(eqn, graph) + [(code, operands) for operands in tries]


def _and(eqn: Any, graph: Graph) -> list[Proposal]:
    """`jnp.tril(x, k)` for torch's decomposition of a boolean `x.tril(k)` (`render.rules.masks`),
    else as the other operators."""
    return triangle(eqn, graph) + _promoted(eqn, graph)


def _unit_axes(eqn: Any, graph: Graph) -> list[Proposal]:
    """`x - v[:, None, None]` for an operand reshaped from `(16,)` to `(1, 16, 1, 1)` beside one of
    full rank: jnp's rank promotion adds the leading axes (the rewrite `unit_axes`)."""
    candidates: list[Proposal] = []
    rank = eqn.outvars[0].aval.ndim
    for k, v in enumerate(eqn.invars):
        partner = eqn.invars[1 - k]
        made = graph.producer(v) if is_traced(v) else None
        if made is None or made.primitive.name != "reshape" or made.params.get("dimensions") is not None:
            continue
        source, sizes = made.invars[0], tuple(made.params["new_sizes"])
        kept = inserted_axes(tuple(source.aval.shape), sizes) if is_traced(source) else None
        full = is_traced(partner) and partner is not v and partner.aval.ndim == rank == len(sizes)
        users = graph.users(v)
        if kept is None or not full or len(users) != 1 or users[0] is not eqn:
            continue
        if kept and kept[0] == 0:
            continue  # no new axis in front to leave to rank promotion: the `reshape` rule says it
        lead = kept[0] if kept else len(sizes)
        written = f"_{k}"  # (a scalar's new axes: all in front)
        if kept:
            written = ast.unparse(new_axes(ast.Name(written), sizes[lead:], tuple(d - lead for d in kept)))
        template = _BINARY[eqn.primitive.name].replace("_0", "{0}").replace("_1", "{1}")
        reshaped = f"jnp.reshape(_{k}, {sizes})"
        reference = template.format(*[reshaped if j == k else f"_{j}" for j in (0, 1)])
        writes = template.format(*[written if j == k else f"_{j}" for j in (0, 1)])
        operands = [source if j == k else w for j, w in enumerate(eqn.invars)]
        candidates.append(Candidate(reference, operands, writes, "unit_axes"))
    return candidates


def _split(eqn: Any, graph: Graph) -> list[Proposal]:
    """`q, k, v = jnp.split(x, [64, 96], axis=2)` (`jnp.split(x, 3, axis=2)` for equal parts): the
    slices torchax stages for `torch.split` and `torch.chunk`, contiguous along one axis, each
    whole along the others, together the whole axis (the rewrite `split_slices`)."""
    x, axis = eqn.invars[0], _sliced_axis(eqn)
    if axis is None or not is_traced(x):
        return []
    pieces = sorted(
        ((u.params["start_indices"][axis], u.params["limit_indices"][axis], u.outvars[0])
         for u in graph.users(x)
         if u.primitive.name == "slice" and u.invars[0] is x and _sliced_axis(u) == axis),
        key=lambda piece: piece[:2],
    )
    bounds = [0, *(limit for _, limit, _ in pieces)]
    starts = [start for start, _, _ in pieces]
    if len(pieces) < 2 or starts != bounds[:-1] or bounds[-1] != x.aval.shape[axis]:
        return []
    items = [":"] * x.aval.ndim
    parts = []
    for start, limit, _ in pieces:
        items[axis] = f"{start}:{limit}"
        parts.append(f"_0[{', '.join(items)}]")
    sizes = tuple(limit - start for start, limit, _ in pieces)
    writes = ast.unparse(split_parts(ast.Name("_0"), sizes, axis))
    return [Candidate(f"({', '.join(parts)},)", [x], writes, "split_slices", [v for _, _, v in pieces])]


def _sliced_axis(eqn: Any) -> int | None:
    """The one axis a `slice` (of stride one) takes part of, or None."""
    x, p = eqn.invars[0], eqn.params
    if p["strides"] is not None and any(s != 1 for s in p["strides"]):
        return None
    partial = [d for d, (a, b, n) in enumerate(zip(p["start_indices"], p["limit_indices"], x.aval.shape))
               if (a, b) != (0, n)]
    return partial[0] if len(partial) == 1 else None


PATTERNS: dict[str, Callable[[Any, Graph], Sequence[Proposal]]] = {
    "gather": _gather,
    "broadcast_in_dim": _broadcast,
    "reshape": _reshape,
    **dict.fromkeys(AT_METHODS, _scatter),
    "squeeze": _squeeze,
    "slice": _split,
    **dict.fromkeys(_BINARY, _promoted),
    "div": _div,
    "and": _and,
    "jit": triangle,
    "dot_general": einsum,
    "transpose": einsum,
    "dynamic_slice": dynamic_slice,
    "dynamic_update_slice": dynamic_slice,
}
