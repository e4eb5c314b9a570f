"""Fails loudly when a new JAX or torchax moves an internal that `tracing._internals` reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from tracing import _internals


def test_tracer_var_equation_count_and_tracebacks():
    seen = {}

    def fn(x):
        frame = _internals.current_jaxpr_frame()
        before = _internals.equation_count(frame)
        y = jnp.sin(x)
        seen["count"] = _internals.equation_count(frame) - before
        seen["var"] = _internals.var_of(y)
        seen["emitted"] = _internals.emitted_outvars(frame)
        return y

    closed = jax.make_jaxpr(fn)(jnp.ones(3))
    (eqn,) = closed.jaxpr.eqns
    assert seen["count"] == 1
    assert seen["var"] is eqn.outvars[0] is closed.jaxpr.outvars[0]
    assert list(seen["emitted"][-1]) == [eqn.outvars[0]]
    codes, lastis = _internals.raw_frames(eqn)
    assert fn.__code__ in codes
    assert len(codes) == len(lastis)


def test_torchax_tensor_wraps_a_jax_value():
    env = _internals.torchax.default_env()

    def fn(x):
        tensor = _internals.wrap(x, env)
        with env:
            out = tensor * 2
        assert _internals.var_of(out) is not None
        return _internals.jax_value(out)

    closed = jax.make_jaxpr(fn)(jnp.ones(3))
    assert [e.primitive.name for e in closed.jaxpr.eqns] == ["mul"]
    assert _internals.to_jax_array(torch.ones(2, dtype=torch.bfloat16)).dtype == jnp.bfloat16
    assert _internals.to_jax_dtype(torch.float32) == jnp.float32
