"""The idiom pattern (see `render.rules.idioms`) for contractions that are not a plain matmul:
`jnp.einsum("abc,dec->abde", x, w)`, with the letters in order of first appearance where that
stages the same `dot_general`.
"""

from __future__ import annotations

import ast
import string
from typing import Any

import numpy as np

from jaxside.render.rules._core import Graph, Proposal, is_traced
from jaxside.render.rules.linalg import matmul


def einsum(eqn: Any, graph: Graph) -> list[Proposal]:
    """'jnp.einsum("ab,abc->ac", x, y)' for a 'dot_general' that is not a plain matmul (batch axes
    elsewhere than in front, several contracted axes, an outer product), and with the
    'transpose' of its result jnp adds when the output's axes come in another order."""
    if eqn.primitive.name == "transpose":
        dot = graph.producer(eqn.invars[0]) if is_traced(eqn.invars[0]) else None
        if dot is None or dot.primitive.name != "dot_general":
            return []
        perm = tuple(eqn.params["permutation"])
    else:
        dot, perm = eqn, None
    if matmul(dot, [ast.Name("_0", ast.Load()), ast.Name("_1", ast.Load())]) is not None:
        return []  # `a @ b` says it (and `jnp.transpose(a @ b, ...)` what the torch code did)
    p = dot.params
    if p["precision"] is not None or p.get("out_sharding") is not None:
        return []
    (contract_a, contract_b), (batch_a, batch_b) = p["dimension_numbers"]
    a, b = dot.invars
    if a.aval.ndim + b.aval.ndim > len(_LETTERS):
        return []
    names_a = _LETTERS[: a.aval.ndim]
    shared = dict(zip((*contract_b, *batch_b), (*contract_a, *batch_a)))
    fresh = iter(_LETTERS[a.aval.ndim :])
    names_b = [names_a[shared[d]] if d in shared else next(fresh) for d in range(b.aval.ndim)]
    free_a = [n for d, n in enumerate(names_a) if d not in (*contract_a, *batch_a)]
    free_b = [n for d, n in enumerate(names_b) if d not in (*contract_b, *batch_b)]
    out = [names_a[d] for d in batch_a] + free_a + free_b
    result = "".join(out[d] for d in perm) if perm is not None else "".join(out)
    keywords = [""]
    if p["preferred_element_type"] is not None and p["preferred_element_type"] != a.aval.dtype:
        keywords.append(f", preferred_element_type=jnp.{np.dtype(p['preferred_element_type']).name}")
    # (jnp contracts the second operand first, and transposes when it must)
    orders = [(a, names_a, b, "".join(names_b))] + ([(b, "".join(names_b), a, names_a)] if perm else [])
    specs = [(_relabel(f"{sx},{sy}->{result}"), x, y) for x, sx, y, sy in orders]
    # jnp contracts several axes in the order of their letters: as the dot does, if relabelling
    # changed it ('bthd,hde->bte' contracts d, then h)
    ordered = dict(zip(contract_a, sorted(names_a[d] for d in contract_a)))
    spec = f"{names_a},{''.join(names_b)}->{result}".translate(
        str.maketrans({names_a[d]: ordered[d] for d in contract_a}))
    specs += [(spec, a, b)] if len(contract_a) > 1 else []
    return [(f'jnp.einsum("{spec}", _0, _1{kws})', [x, y]) for spec, x, y in specs for kws in keywords]


_LETTERS = string.ascii_lowercase


def _relabel(spec: str) -> str:
    """The spec with its letters renamed a, b, c, ... in order of first appearance."""
    order = {c: None for c in spec if c.isalpha()}
    letters: dict[str, str | int | None] = dict(zip(order, _LETTERS))
    return spec.translate(str.maketrans(letters))
