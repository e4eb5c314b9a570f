"""Fails loudly when a new JAX or torchax moves an internal that `tracing._internals` reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

from jaxside.tracing import _internals


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


def test_primal_var_through_grad_and_vmap_tracers_and_backward_name_stacks():
    seen = {}

    def f(x):
        seen["grad"] = _internals.var_of(jnp.sin(x))  # a linearize tracer whose primal is traced
        return jnp.sum(jnp.sin(x))

    def g(x):
        seen["vmap"] = _internals.var_of(x * 2.0)  # a batch tracer around the traced value
        return x * 2.0

    closed = jax.make_jaxpr(jax.grad(f))(jnp.ones(3))
    assert seen["grad"] in {v for e in closed.jaxpr.eqns for v in e.outvars}
    stacks = [_internals.name_stack(e) for e in closed.jaxpr.eqns]
    assert any("transpose" in s for s in stacks) and any("transpose" not in s for s in stacks)
    batched = jax.make_jaxpr(jax.vmap(g))(jnp.ones((2, 3)))
    assert seen["vmap"] is batched.jaxpr.eqns[0].outvars[0]
    assert _internals.primal_var(1.0) is None


def test_sub_jaxprs_and_custom_jvp_rule():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), jnp.cos(primals[0]) * tangents[0]))
    closed = jax.make_jaxpr(lambda x: jax.lax.cond(x > 0, f, jnp.cos, x))(1.0)
    (cond,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "cond"]
    branches = _internals.sub_jaxprs(cond)
    assert len(branches) == 2
    (call,) = [e for b in branches for e in b.eqns if e.primitive.name == "custom_jvp_call"]
    rule = _internals.custom_jvp_rule(call)
    assert len(rule.jaxpr.invars) == 2 and len(rule.jaxpr.outvars) == 2
    assert "cos" in {e.primitive.name for e in rule.jaxpr.eqns}


def test_torchax_errors_for_a_missing_lowering_and_a_plain_tensor():
    env = _internals.torchax.default_env()
    with pytest.raises(Exception) as missing, env:
        torch.special.airy_ai(_internals.wrap(jnp.ones(3), env))
    assert _internals.is_missing_lowering(missing.value)
    assert _internals.missing_lowering_op(missing.value) == "aten::special_airy_ai"
    with pytest.raises(AssertionError) as mixed, env:
        _internals.wrap(jnp.ones(3), env) + torch.ones(3)
    assert _internals.is_mixed_device(mixed.value)
    assert not _internals.is_missing_lowering(mixed.value) and not _internals.is_mixed_device(missing.value)


def test_random_ops_under_own_random_key_draw_from_it_and_leave_the_environment_key_alone():
    env = _internals.torchax.default_env()
    key = env.param.prng

    def fn(x, traced_key):
        with env, _internals.own_random_key(env, traced_key), torch.device("jax"):
            noise = torch.rand(3)
        return _internals.jax_value(noise) + x

    closed = jax.make_jaxpr(fn)(jnp.ones(3), jax.random.key(1))
    key_input = closed.jaxpr.invars[1]
    assert any(key_input in eqn.invars for eqn in closed.jaxpr.eqns)  # drawn from the traced key
    assert "random_bits" in {e.primitive.name for e in closed.jaxpr.eqns} | {
        e.primitive.name for eqn in closed.jaxpr.eqns for sub in _internals.sub_jaxprs(eqn) for e in sub.eqns
    }
    assert env.param.prng is key  # not a tracer of the finished trace


def test_view_tensor_is_the_tensor_a_lazy_view_stands_for():
    env = _internals.torchax.default_env()
    shapes = {}

    def fn(x):
        tensor = _internals.wrap(x, env)
        with env:
            view = tensor[:, -1]
        assert _internals.view_tensor(tensor, env) is None  # not a view
        materialized = _internals.view_tensor(view, env)
        shapes["view"] = tuple(_internals.jax_value(materialized).shape)
        return _internals.jax_value(materialized)

    jax.make_jaxpr(fn)(jnp.ones((2, 5)))
    assert shapes["view"] == (2,)


def test_view_values_notes_the_var_a_lazy_view_becomes():
    env = _internals.torchax.default_env()
    seen = {}

    def fn(x):
        tensor = _internals.wrap(x, env)
        with env, _internals.view_values() as first:
            view = tensor[..., 0]
            out = view * 2
        seen["lazy"] = isinstance(view, _internals.TorchaxView)
        ((found, seen["var"]),) = first.values()
        seen["is_view"] = found is view
        return _internals.jax_value(out)

    closed = jax.make_jaxpr(fn)(jnp.ones((2, 3)))
    assert seen["lazy"] and seen["is_view"]
    assert seen["var"] in {v for e in closed.jaxpr.eqns for v in e.outvars}
    assert seen["var"].aval.shape == (2,)


def test_recorded_equations_emitted_again_on_other_inputs():
    """What `tracing._replay` does: a run of equations read back and emitted on other tracers,
    the same primitives, params and source info (hence traceback) each time."""

    def f(x, y):
        frame = _internals.current_jaxpr_frame()
        trace = _internals.current_trace(frame)
        assert trace is not None and _internals.traced_here(x, trace)
        start = _internals.equation_count(frame)
        a = jnp.sin(x) * 2.0
        eqns = _internals.recorded_equations(frame, start, _internals.equation_count(frame))
        assert all(_internals.replayable_equation(frame, eqn) for eqn in eqns)
        env = {_internals.var_of(x): y}
        for eqn in eqns:
            tracers = _internals.equation_inputs(eqn)
            inputs = [t if _internals.is_literal_tracer(t) else env[t.val] for t in tracers]
            env.update(zip(eqn.outvars, _internals.emit_like(trace, eqn, inputs)))
        return a, env[_internals.var_of(a)]

    closed = jax.make_jaxpr(f)(jnp.ones(3), jnp.ones(3))
    eqns = closed.jaxpr.eqns
    assert [e.primitive.name for e in eqns] == ["sin", "mul", "sin", "mul"]
    assert eqns[2].invars[0] is closed.jaxpr.invars[1]
    assert _internals.traceback_of(eqns[0]) is _internals.traceback_of(eqns[2])
    assert eqns[1].params == eqns[3].params and str(eqns[1].invars[1]) == str(eqns[3].invars[1])
    tensor = _internals.wrap(jnp.zeros(2), _internals.torchax.default_env())
    _internals.set_jax_value(tensor, jnp.ones(2))
    assert float(_internals.jax_value(tensor).sum()) == 2.0
