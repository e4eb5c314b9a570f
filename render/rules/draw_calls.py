"""Draws: the `jit` that `jax.random.uniform` (`normal`, `bernoulli`, ...) stages, written as that call.

torchax draws `nn.Dropout`'s mask with `jax.random.uniform(key, shape)` and `torch.randn` with
`jax.random.normal(key, shape, dtype)`; each stages one `jit` (`_uniform`, `_normal`) whose
operands are the key and, for `uniform`, its bounds (literals when they were numbers).  The
shape and dtype are the result's.  A candidate call is traced on the same operands (literal
bounds passed as the numbers they are) and kept only when it stages the very equation
(`known_calls.same_eqn`); the bounds are left out where they are the defaults.
"""

from __future__ import annotations

import ast
import functools
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

_DRAWS = {"_uniform": "uniform", "_normal": "normal", "_bernoulli": "bernoulli", "_gumbel": "gumbel",
          "_exponential": "exponential", "_truncated_normal": "truncated_normal"}


def draw_call(eqn: Any, args: list[ast.expr], same_eqn: Any) -> ast.expr | None:
    """`jax.random.uniform(key, (2, 8, 32))` for the `jit` that call stages, else None."""
    name = _DRAWS.get(eqn.params.get("name", ""))
    keyed = eqn.invars and jnp.issubdtype(eqn.invars[0].aval.dtype, jax.dtypes.prng_key)
    if name is None or not keyed:
        return None
    out = eqn.outvars[0].aval
    extra = [text for v in eqn.invars[1:] if (text := _literal_text(v)) is not None]
    if len(extra) != len(eqn.invars) - 1:
        return None  # (bounds computed in the program: the `jit` rule writes it)
    key = eqn.invars[0].aval
    for code in _candidates(name, tuple(out.shape), np.dtype(out.dtype).name, tuple(extra)):
        staged = _stage(code, (tuple(key.shape), key.dtype))
        if staged is not None and same_eqn(staged, eqn):
            tree = ast.parse(code, mode="eval").body
            return cast(ast.expr, _Fill(args).visit(tree))
    return None


def _candidates(name: str, shape: tuple[int, ...], dtype: str, operands: tuple[str, ...]) -> list[str]:
    """Calls over `_0` (the key), simplest first."""
    typed = "" if dtype == "float32" or name == "bernoulli" else f", jnp.{dtype}"
    calls = []
    if name == "uniform" and len(operands) == 2:
        minval, maxval = operands
        defaults = (minval, maxval) == ("0.0", "1.0")
        calls += [f"jax.random.uniform(_0, {shape}{typed})"] if defaults else []
        calls.append(f"jax.random.uniform(_0, {shape}{typed}, minval={minval}, maxval={maxval})")
    elif name == "bernoulli" and len(operands) == 1:
        calls.append(f"jax.random.bernoulli(_0, {operands[0]}, {shape})")
    elif not operands:
        calls.append(f"jax.random.{name}(_0, {shape}{typed})")
    return calls


def _literal_text(v: Any) -> str | None:
    if not isinstance(v, Literal) or np.ndim(v.val) != 0:
        return None
    value = np.asarray(v.val).item()
    return repr(float(value)) if isinstance(value, float) and np.isfinite(value) else None


@functools.lru_cache(maxsize=256)
def _stage(code: str, key: tuple[tuple[int, ...], Any]) -> Any:
    """The jaxpr `code` stages on a key of this type, if it is one equation."""
    fn = eval(f"lambda _0: {code}", {"jax": jax, "jnp": jnp})  # noqa: S307  (our own code)
    try:
        closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(*key))
    except Exception:  # not this call
        return None
    return closed.jaxpr if len(closed.jaxpr.eqns) == 1 and not closed.consts else None


class _Fill(ast.NodeTransformer):
    def __init__(self, args: list[ast.expr]) -> None:
        self.args = args

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id.startswith("_") and node.id[1:].isdigit():
            return self.args[int(node.id[1:])]
        return node


def key_split(eqn: Any, graph: Any) -> list[Any]:
    """`key, dropout_key = jax.random.split(key)` for torchax's turn of its key before each draw: a
    `random_split` into `n` keys, each sliced out and squeezed (the rewrite `keys_unpacked`)."""
    (sliced,) = eqn.invars
    source = graph.producer(sliced) if not isinstance(sliced, Literal) else None
    sliced_key = source is not None and source.primitive.name == "slice"
    split = graph.producer(source.invars[0]) if source is not None and sliced_key else None
    if split is None or split.primitive.name != "random_split" or len(split.params["shape"]) != 1:
        return []
    (n,) = split.params["shape"]
    parts: dict[int, Any] = {}
    for user in graph.users(split.outvars[0]):
        start = user.params["start_indices"][0] if user.primitive.name == "slice" else None
        if start is None or user.params["limit_indices"][0] != start + 1:
            return []
        squeezes = graph.users(user.outvars[0])
        if len(squeezes) != 1 or squeezes[0].primitive.name != "squeeze":
            return []
        parts[start] = squeezes[0].outvars[0]
    from jaxside.render.rules._core import Candidate

    written = "jax.random.split(_0)" if n == 2 else f"jax.random.split(_0, {n})"
    if len(parts) == 1:  # the other parts unused: `jax.random.split(key)[1]`
        (i,) = parts
        return [Candidate(f"tuple({written})[{i}]", [split.invars[0]], f"{written}[{i}]", "keys_unpacked")]
    if sorted(parts) != list(range(n)):
        return []
    return [Candidate(f"tuple({written})", [split.invars[0]], written, "keys_unpacked",
                      [parts[i] for i in range(n)])]
