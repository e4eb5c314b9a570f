"""Names of the random keys torchax threads through a model: `key` for the key handed on, and
`<call>_key` for the one a draw takes (`key, drop_key = jax.random.split(key)` then
`jax.random.uniform(drop_key, ...)` for `self.drop(x)`), as JAX code names them."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp

from jaxside.render import names as naming

_DRAWS = frozenset({"random_bits", "random_split", "random_fold_in"})


def is_key(v: Any) -> bool:
    """Whether `v` is a typed PRNG key (`key<fry>[]`)."""
    dtype = getattr(getattr(v, "aval", None), "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key) and not v.aval.shape


def key_name(v: Any, readers: Iterable[Any], site_text: str | None) -> str | None:
    """`drop_key` for a key a draw reads (named after the torch call that drew: `self.drop(x)`),
    `key` for any other key; None for a value that is no key."""
    if not is_key(v):
        return None
    for eqn in readers:
        name = eqn.primitive.name
        drawn = name in ("jit", "pjit") and str(eqn.params.get("name", "")).lstrip("_") in _NAMED_DRAWS
        if drawn or name == "random_bits":
            base = naming.expression_name(_callee(site_text))
            return f"{base}_key" if base and base != "key" else "draw_key"
    return "key"


def _callee(text: str | None) -> str | None:
    """`attn_dropout` for `self.attn_dropout(att)`, `scaled_dot_product_attention` for
    `torch.nn.functional.scaled_dot_product_attention(q, k, v)`: the function called, by its last
    name; else `text`."""
    try:
        node = ast.parse(text or "", mode="eval").body
    except SyntaxError:
        return text
    if not isinstance(node, ast.Call):
        return text
    return node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)


_NAMED_DRAWS = frozenset({"uniform", "normal", "bernoulli", "gumbel", "exponential", "truncated_normal",
                          "randint", "categorical"})
