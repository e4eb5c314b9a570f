"""dtypes torch took from a tensor: `h.type_as(x)` written `h.astype(x.dtype)`, not `jnp.bfloat16`.

A cast's torch expression (its site) says where the dtype came from: `.type_as(x)`,
`.to(x.dtype)`, `.to(dtype=x.dtype)`, `.type(x.dtype)`. Where the def holds a value under that
name with the very dtype cast to, the cast reads the dtype from it. `.astype(x.dtype)` stages
the same `convert_element_type` as `.astype(jnp.bfloat16)` while `x` is bfloat16.
"""

from __future__ import annotations

import ast
from typing import Any, TypeVar

import numpy as np

from jaxside.tracing.trace import Site

Written = TypeVar("Written")


def followed_dtype(eqn: Any, value: Written, env: dict[Any, Any], site: Site | None) -> Written:
    """`value` (the rendering of `eqn`) with its cast's dtype read from the tensor torch read it
    from, where the site names one the def holds with that dtype; else `value` as it is."""
    if eqn.primitive.name != "convert_element_type" or site is None or not site.text:
        return value
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return value
    if value.func.attr != "astype" or len(value.args) != 1:
        return value
    source = _dtype_source(site.text)
    dtype = np.dtype(eqn.params["new_dtype"])
    for var, expr in env.items():
        held = getattr(getattr(var, "aval", None), "dtype", None)
        if isinstance(expr, ast.Name) and expr.id == source and held is not None and np.dtype(held) == dtype:
            value.args[0] = ast.Attribute(ast.Name(source, ast.Load()), "dtype", ast.Load())
            break
    return value


def _dtype_source(text: str) -> str | None:
    """`x` for `h.type_as(x)`, `h.to(x.dtype)`, `h.to(dtype=x.dtype)`, `h.type(x.dtype)`."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    method, given = node.func.attr, [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
    if method == "type_as" and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
        return node.args[0].id
    if method in ("to", "type") and len(given) == 1:
        read = given[0]
        if isinstance(read, ast.Attribute) and read.attr == "dtype" and isinstance(read.value, ast.Name):
            return read.value.id
    return None
