"""Random numbers: keys, splits and bits, as the `jax.random` calls that bind them."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from jaxside.render.rules._core import (
    Rule,
    call,
    dtype_expr,
    kw,
    literal,
    number_literal,
    registrar,
)
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


@rule("random_wrap")
def _random_wrap(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.wrap_key_data", args, [kw("impl", eqn.params["impl"].name)])


@rule("random_unwrap")
def _random_unwrap(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.key_data", args)


@rule("random_seed")
def _random_seed(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.key", args, [kw("impl", eqn.params["impl"].name)])


@rule("random_split")
def _random_split(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    shape = tuple(eqn.params["shape"])
    count = number_literal(shape[0]) if len(shape) == 1 else literal(shape)
    return call("jax.random.split", [args[0], count])


@rule("random_fold_in")
def _random_fold_in(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.fold_in", args)


@rule("random_bits")
def _random_bits(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    dtype = np.dtype(f"uint{p['bit_width']}")
    return call("jax.random.bits", [args[0], literal(tuple(p["shape"])), dtype_expr(dtype)])
