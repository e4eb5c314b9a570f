"""`tracing.capture`: provenance of every value and the call tree, on the samples."""

from __future__ import annotations

import sys

import jax
import numpy as np
import pytest
import torch
from conftest import load_sample
from torch.utils._python_dispatch import _len_torch_dispatch_stack

from jaxside.tracing import Capture, capture


def test_seed_example_names_and_nested_call():
    seed = load_sample("seed_example")
    weight, hidden = torch.randn(4, 4), torch.randn(4, 4)
    trace = capture(seed.my_mathy_thing, weight, hidden)

    named = {o.name for o in trace.origins.values() if o.name}
    assert {"activation", "output", "weight", "hidden"} <= named
    assert [i.name for i in trace.inputs] == ["weight", "hidden"]

    root = trace.root
    assert root.function == "my_mathy_thing"
    (other,) = root.children
    assert other.function == "my_mathy_thing.<locals>.other_math"
    assert [name for name, _ in other.args] == ["a", "b"]
    weight_var, hidden_var = (i.var for i in trace.inputs)
    assert [v for _, v in other.args] == [weight_var, hidden_var]
    assert set(other.inputs) == {weight_var, hidden_var}
    assert len(other.outputs) == 1 and other.returned == [("", other.outputs[0])]
    assert other.call_site.text == "other_math(weight, hidden)"
    # The matmul inside other_math is its own, with the expression that made it.
    (matmul,) = [i for i in other.eqns if trace.jaxpr.jaxpr.eqns[i].primitive.name == "dot_general"]
    assert trace.eqn_sites[matmul].text == "(a + b) @ (a * b)"
    activation = next(v for v, o in trace.origins.items() if o.name == "activation")
    origin = trace.origin(activation)
    assert origin.function == "my_mathy_thing" and origin.expression == "torch.matmul(weight, hidden)"
    assert origin.file == seed.__file__ and origin.line == seed.my_mathy_thing.__code__.co_firstlineno + 4

    # The traced program computes what torch computes.
    (out,) = jax.core.eval_jaxpr(trace.jaxpr.jaxpr, trace.jaxpr.consts, weight.numpy(), hidden.numpy())
    torch.testing.assert_close(torch.tensor(np.asarray(out)), seed.my_mathy_thing(weight, hidden))


def test_llama_call_tree_and_parameter_names():
    llama = load_sample("llama_model")
    model, args = llama.example()[:2]
    trace = capture(model, *args)

    assert trace.root.function == "Transformer.forward"
    assert [c.function for c in trace.root.children] == (
        ["TransformerBlock.forward"] * model.config.n_layer + ["RMSNorm.forward"]
    )
    blocks = trace.root.children[:-1]
    for i, block in enumerate(blocks):
        assert block.module_path == f"layers.{i}"
        kinds = {c.function for c in block.children}
        assert {"Attention.forward", "FeedForward.forward", "RMSNorm.forward"} <= kinds
        assert {c.module_path for c in block.children} >= {
            f"layers.{i}.attention", f"layers.{i}.feed_forward", f"layers.{i}.attention_norm"
        }
    names = {i.name for i in trace.inputs if i.kind == "param"}
    assert "layers.0.attention.wqkv.weight" in names and "tok_embeddings.weight" in names
    assert {i.name for i in trace.inputs if i.kind == "arg"} == {"idx", "input_pos"}
    # The KV cache is written in place: its new value is state coming out.
    assert {s.input.name for s in trace.state} >= {"layers.0.attention.kv_cache.k_cache"}
    # Every equation belongs to a call, and every op var has an origin with a site.
    eqns = trace.jaxpr.jaxpr.eqns
    assert len(trace.eqn_calls) == len(eqns)
    assert all(trace.origin(v) is not None for e in eqns for v in e.outvars)
    sited = sum(site is not None for site in trace.eqn_sites)
    assert sited >= 0.95 * len(eqns)
    q_names = {trace.origin(v).name for e in eqns for v in e.outvars}
    assert {"q", "k", "v", "h", "out"} <= q_names
    # Locals bound to lazy torchax views (`x_re = xshaped[..., 0]`) name what the view became.
    assert {"x_re", "x_im", "cos", "sin"} <= q_names


def test_tensor_constructors_without_device_land_on_jax():
    def make(x):
        zeros = torch.zeros(x.shape[-1])
        return x + zeros + torch.arange(x.shape[-1])

    trace = capture(make, torch.ones(2, 3))
    assert trace.jaxpr.jaxpr.outvars[0].aval.shape == (2, 3)


def test_no_global_state_left_behind_even_when_user_code_raises():
    def broken(x):
        y = x * 2  # noqa: F841
        raise RuntimeError("user bug")

    def state():
        return (sys.gettrace(), torch.get_default_device(), torch._C._len_torch_function_stack(),
                _len_torch_dispatch_stack())

    before = state()
    with pytest.raises(RuntimeError, match="user bug"):
        capture(broken, torch.ones(2))
    assert state() == before
    assert torch.zeros(1).device.type == "cpu"


def test_random_ops_leave_no_tracer_behind():
    def noisy(x):
        return x + torch.rand(x.shape)

    first = capture(noisy, torch.ones(3))
    second = capture(noisy, torch.ones(3))  # raised UnexpectedTracerError when the key leaked
    assert len(first.jaxpr.jaxpr.eqns) == len(second.jaxpr.jaxpr.eqns)


def test_fresh_trace_each_call():
    def double(x):
        return x * 2

    first = capture(double, torch.ones(2))
    second = capture(double, torch.ones(3))
    assert first.jaxpr.jaxpr.invars[0].aval.shape == (2,)
    assert second.jaxpr.jaxpr.invars[0].aval.shape == (3,)


def test_abstract_inputs_allocate_nothing():
    llama = load_sample("llama_model")
    model = llama.build("tiny", device="meta")
    idx = torch.zeros(1, 4, dtype=torch.long, device="meta")
    pos = torch.arange(4, device="meta")
    trace = Capture(abstract=True)(model, idx, pos)
    assert trace.root.children[0].function == "TransformerBlock.forward"


def _doubled(x):
    doubled = x * 2
    _doubled.hooks = (sys.gettrace(), [sys.monitoring.get_tool(i) for i in range(6)]
                      if sys.version_info >= (3, 12) else [])
    return doubled


def test_capture_records_with_sys_monitoring_where_python_has_it():
    """3.12+ records through `sys.monitoring` (no `sys.settrace` hook); 3.11 through settrace.
    `make test` runs the whole suite on 3.12 too, so a fallback to settrace there fails here."""
    trace = capture(_doubled, torch.ones(2))
    settrace, tools = _doubled.hooks
    assert [name for name, _, _ in trace.root.seen.bindings] == ["doubled"]
    if sys.version_info >= (3, 12):
        assert settrace is None and "jaxside" in tools
    else:
        assert settrace is not None


def _write_into(cache, pos, value):
    cache[:, pos] = value  # torchax's own `__setitem__`: hundreds of JAX indexing frames
    flat = cache.flatten()
    return flat.type_as(value) * 2


def test_torchax_s_own_methods_run_with_the_settrace_hook_paused(monkeypatch):
    """`Tensor.__setitem__`, `flatten`, `type_as` are methods torchax defines in Python, which no
    torch function mode sees: under settrace they run paused, like the ops, and the user's line
    is still recorded."""
    from jaxside.tracing import _internals

    seen = []
    original = _internals.TorchaxTensor.flatten

    def flatten(self, *args, **kwargs):
        seen.append(sys.gettrace())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(_internals.TorchaxTensor, "flatten", flatten)
    trace = Capture(backend="settrace")(_write_into, torch.zeros(2, 3), torch.tensor(1), torch.ones(2))
    assert seen == [None]  # called once, from user code, with no hook running
    assert _internals.TorchaxTensor.flatten is flatten  # put back
    assert "flat" in {o.name for o in trace.origins.values()}


def _twice(array):
    twice = array * 2  # JAX code of the user's, run by torchax's `apply_jax`
    return twice


def _applies(x):
    return x.apply_jax(_twice) + 1


def test_a_torchax_method_handed_a_user_callable_keeps_the_hook_on():
    trace = Capture(backend="settrace")(_applies, torch.ones(3))
    assert [child.function for child in trace.root.children] == ["_twice"]
