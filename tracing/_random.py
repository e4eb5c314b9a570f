"""Randomness: torch's random ops drawn from an explicit JAX key, the way JAX code does it.

torchax draws every random op (dropout in train mode, ``torch.randn_like``) from the key its
environment holds, splitting it each time. While torch code is traced, that key is one more
input of the jaxpr, after the torch arguments, named ``key`` (``key_1`` ... when an argument
has that name): the export takes it as its last argument, ``forward(params, x, key)``, and a
new key draws new numbers. A capture whose code drew nothing has no key input.

`random_outputs` tells which outputs the key reaches: `--check` compares those by shape and
dtype only, since torch eager draws from its own generator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import jax

from jaxside.tracing._session import Entry
from jaxside.tracing.trace import Trace

KEY = "key"


def key_name(taken: Iterable[str]) -> str:
    """The key input's name: ``key``, or ``key_1``, ... when an argument is called that."""
    taken = set(taken)
    name, n = KEY, 0
    while name in taken:
        n += 1
        name = f"{KEY}_{n}"
    return name


def key_input() -> jax.ShapeDtypeStruct:
    """What the key input is traced as: a typed JAX key (`jax.random.key`)."""
    return jax.ShapeDtypeStruct((), jax.random.key(0).dtype)


def example_key(seed: int = 0) -> jax.Array:
    """A key to call an export that takes one with: ``forward(params, x, example_key())``."""
    return jax.random.key(seed)


def is_key(aval: Any) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jax.numpy.issubdtype(dtype, jax.dtypes.prng_key)


def drop_unused_key(closed: Any, entry: Entry) -> tuple[Any, Entry]:
    """Without the torch session's key input (its last) when no random op read it."""
    jaxpr = closed.jaxpr
    if entry.frontend != "torch" or not jaxpr.invars or not is_key(jaxpr.invars[-1].aval):
        return closed, entry
    key = jaxpr.invars[-1]
    read = any(v is key for eqn in jaxpr.eqns for v in eqn.invars) or any(v is key for v in jaxpr.outvars)
    if read:
        return closed, entry
    info = jaxpr.debug_info
    if info is not None and info.arg_names is not None:
        info = info._replace(arg_names=info.arg_names[:-1])
    closed = closed.replace(jaxpr=jaxpr.replace(invars=jaxpr.invars[:-1], debug_info=info))
    return closed, dataclasses.replace(entry, inputs=entry.inputs[:-1])


def random_outputs(trace: Trace) -> frozenset[str]:
    """Paths of the outputs (and ``state NAME`` of the new state buffers) computed from random bits."""
    jaxpr = trace.jaxpr.jaxpr
    tainted = {id(v) for v in jaxpr.invars if is_key(v.aval)}
    if not tainted:
        return frozenset()
    for eqn in jaxpr.eqns:
        if any(id(v) in tainted for v in eqn.invars):
            tainted.update(id(v) for v in eqn.outvars)
    paths = {path for path, var in trace.outputs if id(var) in tainted}
    paths |= {f"state {update.input.name}" for update in trace.state if id(update.var) in tainted}
    return frozenset(paths)
