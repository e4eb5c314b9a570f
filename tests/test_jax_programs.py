"""Decompiling JAX programs: pure JAX functions, their gradients, loops, branches and checkpoints.

Every export is executed and compared with the original, and re-traced: its jaxpr must have
the primitives of the original (counted through every sub-jaxpr), so the structure survives
and not only the numbers.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SAMPLES, assert_defs_shared, load_sample
from golden import assert_golden
from jax import lax

from jaxside.annotate.check import load_module
from jaxside.render.ir import Program
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import Capture, Trace, capture


@dataclass
class Exported:
    trace: Trace
    program: Program
    text: str
    module: ModuleType

    @property
    def entry(self) -> Any:
        return getattr(self.module, self.program.entry.name)


def export(fn: Any, *args: Any, watch: tuple = ()) -> Exported:
    trace = Capture(watch=watch)(fn, *args)
    program = lower(trace)
    text = render_program(program, source=f"samples/jax_programs.py: {trace.entry}")
    return Exported(trace, program, text, load_module(text))


# -- comparing structure and numbers -------------------------------------------------------------

# `add_any` sums two contributions to a gradient: the export writes `+`.
_SAME_AS = {"add_any": "add"}
# Calls of a body with no effect of their own: the export calls the body's def directly.
_TRANSPARENT = {"closed_call", "core_call"}
# Equations that change nothing (`x.astype(x.dtype)`): `jnp` stages none for them.
_IDENTITIES = {"reshape", "broadcast_in_dim", "transpose", "convert_element_type", "squeeze"}


def primitive_counts(jaxpr: Any) -> Counter[str]:
    """Primitives of a jaxpr and of every jaxpr inside it, after dropping unused equations and
    repeats of an equation on the same operands (the export computes each value once)."""
    counts: Counter[str] = Counter()
    for eqn in _live(_once(jaxpr)):
        name = eqn.primitive.name
        if name not in _TRANSPARENT and not _identity(eqn):
            counts[_SAME_AS.get(name, name)] += 1
        for inner in jax.extend.core.jaxprs_in_params(eqn.params):
            counts += primitive_counts(inner)
    return counts


def _identity(eqn: Any) -> bool:
    if eqn.primitive.name not in _IDENTITIES or len(eqn.invars) != 1:
        return False
    (a,), (b,) = (v.aval for v in eqn.invars), (v.aval for v in eqn.outvars)
    return (a.shape, a.dtype, a.weak_type) == (b.shape, b.dtype, b.weak_type)


def _once(jaxpr: Any) -> Any:
    """`jaxpr` with each repeated pure equation replaced by its first occurrence's outputs."""
    first: dict[Any, Any] = {}
    alias: dict[Any, Any] = {}
    eqns = []
    for eqn in jaxpr.eqns:
        invars = [alias.get(v, v) if isinstance(v, jax.extend.core.Var) else v for v in eqn.invars]
        eqn = eqn.replace(invars=invars)
        key = (
            eqn.primitive.name, repr(sorted((k, str(v)) for k, v in eqn.params.items())),
            tuple(str(v) if isinstance(v, jax.extend.core.Literal) else id(v) for v in eqn.invars),
            tuple(str(v.aval) for v in eqn.outvars),
        )
        if not eqn.effects and key in first:
            alias.update(zip(eqn.outvars, first[key].outvars))
            continue
        first.setdefault(key, eqn)
        eqns.append(eqn)
    outvars = [alias.get(v, v) if isinstance(v, jax.extend.core.Var) else v for v in jaxpr.outvars]
    return jaxpr.replace(eqns=eqns, outvars=outvars)


def _live(jaxpr: Any) -> list[Any]:
    needed = {v for v in jaxpr.outvars if not isinstance(v, jax.extend.core.Literal)}
    live = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in needed for v in eqn.outvars):
            live.append(eqn)
            needed.update(v for v in eqn.invars if not isinstance(v, jax.extend.core.Literal))
    return live[::-1]


# What `render.rules.REWRITES` may change (same bits under jit): `x @ w.T` adds a transpose, `x * 1`
# and integer `x + 0` lose their equation, torchax's flattened matmul its reshapes, a reshape that
# only adds unit axes becomes a broadcast (`v[:, None, None]`), torch.split's slices one split.
REWRITTEN = {
    "added": {"transpose", "broadcast_in_dim", "split"},
    "dropped": {"mul", "add", "reshape", "slice"},
}


def assert_same_structure(exported: Exported, *args: Any) -> None:
    original = primitive_counts(exported.trace.jaxpr.jaxpr)
    again = primitive_counts(jax.make_jaxpr(exported.entry)(*args).jaxpr)
    added, dropped = again - original, original - again
    assert set(added) <= REWRITTEN["added"] and set(dropped) <= REWRITTEN["dropped"], (dropped, added)


def assert_same_numbers(got: Any, want: Any, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for a, b in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def roundtrip(fn: Any, *args: Any, rtol: float = 1e-6, atol: float = 1e-6) -> Exported:
    exported = export(fn, *args)
    assert_same_structure(exported, *args)
    assert_same_numbers(jax.jit(exported.entry)(*args), jax.jit(fn)(*args), rtol, atol)
    return exported


def function_source(exported: Exported, name: str) -> str:
    tree = ast.parse(exported.text)
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.unparse(node)


@functools.cache
def programs() -> ModuleType:
    return load_sample("jax_programs")


# -- the JaxDecompiler paper: edit a gradient by hand ------------------------------------------------


def test_softplus_gradient_exports_and_the_stable_branch_can_be_edited_in():
    softplus_grad = programs().softplus_grad
    exported = roundtrip(softplus_grad, 0.0)
    assert_golden("export", "softplus_grad.py", exported.text)
    entry = exported.program.entry.name
    assert exported.program.arg_names == ["x"]
    assert "grad_x = " in exported.text and "return grad_x" in exported.text
    assert np.isnan(exported.entry(100.0))  # the paper's overflow, reproduced
    # The paper's edit: return the limit where exp overflows.
    edited_text = exported.text.replace(
        f"def {entry}(x):\n", f"def {entry}(x):\n    if x > 87:\n        return jnp.float32(1.0)\n"
    )
    edited = load_module(edited_text)
    assert getattr(edited, entry)(100.0) == 1.0
    np.testing.assert_allclose(getattr(edited, entry)(0.5), softplus_grad(0.5), rtol=1e-6)
    # The same edit as a branch `jax.jit` can trace.
    jitted = load_module(exported.text.replace("return grad_x", "return jnp.where(x > 87, 1.0, grad_x)"))
    assert jax.jit(getattr(jitted, entry))(100.0) == 1.0


# -- loops and branches -----------------------------------------------------------------------------


def test_while_loop_keeps_its_functions_and_their_names():
    exported = roundtrip(programs().newton_sqrt, 2.0)
    source = function_source(exported, "newton_sqrt")
    assert "def not_done(state):" in source and "def step(state):" in source
    assert "lax.while_loop(not_done, step, (a, a + 1.0))" in source
    assert_same_numbers(exported.entry(9.0), 3.0)
    assert_golden("export", "newton_sqrt.py", exported.text)


def test_cond_picks_the_branch_the_predicate_picks():
    fn = programs().leaky_or_quadratic
    exported = roundtrip(fn, jnp.array([1.0, -2.0, 3.0]), 1.0)
    assert "lax.cond(" in exported.text and "def quadratic(x):" in exported.text
    for threshold in (-10.0, 10.0):  # one branch, then the other
        x = jnp.array([1.0, -2.0, 3.0])
        assert_same_numbers(exported.entry(x, threshold), fn(x, threshold))
    assert_golden("export", "leaky_or_quadratic.py", exported.text)


def test_fori_loop_and_switch():
    fn = programs().polynomial
    exported = roundtrip(fn, jnp.linspace(-1.0, 1.0, 3), jnp.array([0.5, -1.0, 2.0, 0.25]))
    assert "lax.fori_loop(0, 4, horner, " in exported.text
    assert "def horner(i, total):" in exported.text and "lax.switch(" in exported.text


def test_gradient_of_each_layer_of_a_python_loop_is_named_after_that_layer():
    params, x = programs().tower_params(), jnp.linspace(-1.0, 1.0, 8).reshape(2, 4)
    exported = roundtrip(jax.grad(programs().residual_tower), params, x, rtol=1e-5)
    text = exported.text
    assert text.count("def residual_block(") == 1
    assert_defs_shared(text)
    for i in range(3):  # the returned tree holds each layer's gradients under that layer's names
        for leaf in ("w", "b"):
            assert f'"{leaf}": grad_params_layers_{i}_{leaf}' in text, (i, leaf)


def test_scan_options_and_a_fori_loop_with_a_traced_bound():
    x = jnp.arange(12.0).reshape(4, 3) / 10
    exported = roundtrip(programs().decaying_sums, x, jnp.int32(3))
    text = ast.unparse(ast.parse(exported.text))  # each statement on one line, whatever its layout
    assert "lax.scan(accumulate, " in text and "reverse=True, unroll=2)" in text
    assert "lax.scan(double, (total, total), None, length=3)" in text
    assert "lax.fori_loop(0, steps, shift, " in text and "def shift(i, v):" in text


def _cache_step(cache, x, pos):
    cache = lax.dynamic_update_slice_in_dim(cache, x, pos, axis=1)
    window = lax.dynamic_slice_in_dim(cache, pos, 4, axis=1)

    def write_row(i, c):
        return lax.dynamic_update_slice(c, lax.dynamic_slice_in_dim(window, i, 1, axis=1) * 2.0, (0, pos + i))

    return lax.fori_loop(0, 2, write_row, cache), window


def test_dynamic_slices_read_as_written_without_the_wraps_of_negative_starts():
    cache, x = jnp.arange(48.0).reshape(3, 16), -jnp.ones((3, 5))
    exported = roundtrip(_cache_step, cache, x, jnp.int32(6))
    text = ast.unparse(ast.parse(exported.text))
    assert "cache = lax.dynamic_update_slice_in_dim(cache, x, pos, axis=1)" in text
    assert "window = lax.dynamic_slice_in_dim(cache, pos, 4, axis=1)" in text
    # inside the loop's body too; one moving start of two is a slice in that dimension
    row = "lax.dynamic_slice_in_dim(window, i, 1, axis=1) * 2.0"
    assert f"return lax.dynamic_update_slice_in_dim(c, {row}" in text
    assert "select" not in text and "allow_negative_indices" not in text


def test_value_and_grad_of_an_mlp_names_gradients_after_their_values():
    params, x, y = programs().mlp_data()
    exported = roundtrip(jax.value_and_grad(programs().mlp_loss), params, x, y, rtol=1e-5)
    assert exported.program.entry.name == "value_and_grad_mlp_loss"
    assert exported.program.arg_names == ["params", "x", "y"]
    for name in ("grad_params_w1", "grad_params_w2", "grad_hidden", "grad_error"):
        assert f"{name} = " in exported.text, name
    assert "def mlp(" in exported.text and "def mlp_loss(" in exported.text
    assert_golden("export", "mlp_value_and_grad.py", exported.text)


# -- jax_sourceror's README: scan, checkpoint and map under value_and_grad -----------------------------


def test_sourceror_forward_keeps_the_scanned_checkpointed_layer_and_the_mapped_block():
    jp = programs()
    params, x = jp.sourceror_inputs()
    exported = roundtrip(jp.fwd, params, x)
    text = exported.text
    one_line = ast.unparse(ast.parse(text))  # each statement on one line, whatever its layout
    assert "lax.scan(jax.checkpoint(layer, prevent_cse=False), x, (params[0], params[1]))" in one_line
    assert "def layer(x, params):" in text and "qkv, o = params" in text
    assert "lax.map(block, " in text and "def block(block_idx):" in text
    assert_golden("export", "sourceror_fwd.py", text)


def test_sourceror_readme_example_exports_and_matches():
    jp = programs()
    params, x = jp.sourceror_inputs()
    exported = roundtrip(jp.grad_fn, params, x)
    text = exported.text
    assert "jax.checkpoint(" in text and "prevent_cse=False" in text
    assert "reverse=True" in text and "lax.map(" in text
    assert "def grad_layer(" in text
    # The einsums inside the scanned, mapped bodies read as einsums, as at the top level.
    assert 'jnp.einsum("abc,dec->abde", xs_0, xs_1)' in text and "dot_general" not in text
    # The same numbers in float32 too, where rounding differences would show.
    params32, x32 = jp.sourceror_inputs(jnp.float32)
    assert_same_numbers(
        jax.jit(export(jp.grad_fn, params32, x32).entry)(params32, x32), jp.grad_fn(params32, x32), 1e-6, 1e-6
    )
    assert_golden("export", "sourceror_grad.py", text)


# -- a torch model differentiated through torchax -----------------------------------------------------


def llama_loss_setup():
    import torch

    from jaxside.tracing import _internals

    llama = load_sample("llama_model")
    torch.manual_seed(0)
    model = llama.build("tiny")
    states, forward = _internals.torchax.extract_jax(model)
    names = dict(model.named_parameters())
    params = {k: v for k, v in states.items() if k in names}
    buffers = {k: v for k, v in states.items() if k not in names}
    idx = torch.randint(0, model.config.vocab_size, (1, 8))
    targets = torch.roll(idx, -1, dims=1)

    def loss(params, buffers, idx, input_pos, targets):
        logits = forward({**params, **buffers}, (idx, input_pos))
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    inputs = (params, buffers, jnp.asarray(idx.numpy()), jnp.arange(8), jnp.asarray(targets.numpy()))
    return llama, model, loss, inputs, (idx, targets)


def test_gradient_of_the_llama_loss_through_torchax_matches_torch_autograd():
    import torch
    import torch.nn.functional as F

    llama, model, loss, inputs, (idx, targets) = llama_loss_setup()
    exported = export(jax.grad(loss), *inputs, watch=(llama.__file__,))
    assert_same_structure(exported, *inputs)
    grads = jax.jit(exported.entry)(*inputs)
    # The export's gradient of every parameter, named after it, against torch autograd.
    logits = model(idx, torch.arange(8))
    F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1)).backward()
    assert set(grads) == {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        np.testing.assert_allclose(np.asarray(grads[name]), parameter.grad.numpy(), rtol=2e-4, atol=2e-6)
    text = exported.text
    for name, _ in model.named_parameters():
        assert f"grad_params_{name.replace('.', '_')} = " in text, name
    # The torch model's functions are defs, its blocks one def called for each layer.
    assert text.count("def transformer_block_forward(") == 1
    assert_defs_shared(text)
    assert "def attention_forward(" in text and "def feed_forward(" in text


# -- capture of JAX code --------------------------------------------------------------------------------


def test_capture_of_a_jax_function_names_values_from_its_locals():
    params, x, y = programs().mlp_data()
    trace = capture(programs().mlp_loss, params, x, y)
    assert trace.frontend == "jax"
    leaves = ["params['b1']", "params['b2']", "params['w1']", "params['w2']"]
    assert [i.name for i in trace.inputs] == [*leaves, "x", "y"]
    assert trace.root.function == "mlp_loss"
    (mlp,) = trace.root.children
    assert mlp.function == "mlp" and mlp.call_site.text == "mlp(params, x)"
    named = {o.name for o in trace.origins.values() if o.name}
    assert {"hidden", "prediction", "error"} <= named
    assert not trace.gradients


def test_capture_of_a_gradient_links_each_gradient_to_its_value():
    params, x, y = programs().mlp_data()
    trace = capture(jax.grad(programs().mlp_loss), params, x, y)
    assert trace.entry == "grad_mlp_loss" and trace.root.line == 0  # no def of its own
    primals = [trace.origin(p) for p in trace.gradients.values() if p is not None]
    primal_names = {origin.name for origin in primals if origin is not None}
    assert {"hidden", "error", "params['w1']", "params['w2']"} <= primal_names
    # The forward values keep the names the forward bound them to.
    hidden = next(v for v, o in trace.origins.items() if o.name == "hidden")
    assert hidden in trace.root.children[0].outputs


@pytest.mark.parametrize("transform", ["vjp", "vmap", "jit", "hessian"])
def test_other_transformations_of_jax_code(transform):
    params, x, y = programs().mlp_data()
    loss = programs().mlp_loss
    if transform == "vjp":

        def fn(params, x, y):
            value, pullback = jax.vjp(lambda p: loss(p, x, y), params)
            return value, pullback(jnp.float32(1.0))[0]

        exported = roundtrip(fn, params, x, y, rtol=1e-5)
        assert "grad_params_w1 = " in exported.text
    elif transform == "vmap":
        exported = roundtrip(jax.vmap(programs().mlp, in_axes=(None, 0)), params, x[None])
        assert exported.program.entry.name == "vmap_mlp" and "hidden = " in exported.text
    elif transform == "hessian":
        exported = roundtrip(jax.hessian(lambda x: jnp.sum(jnp.sin(x) ** 2)), jnp.arange(3.0))
        assert exported.program.entry.name == "jacobian_jacobian_fn"  # jacfwd of jacrev
    else:
        exported = roundtrip(jax.jit(loss), params, x, y)
        assert exported.program.entry.name == "mlp_loss" and "jax.jit(" not in exported.text


def test_jitted_helpers_and_random_keys():
    fn = programs().attention_scores
    args = (jnp.linspace(0.0, 1.0, 32).reshape(4, 8), jnp.ones((5, 8)), jax.random.key(0))
    exported = roundtrip(fn, *args)
    assert "def scores(q, k):" in exported.text and "jax.jit(scores)(q, k)" in exported.text
    assert "noise_key, dropout_key = jax.random.split(key)\n" in exported.text  # as the user wrote it


def test_custom_jvp_rule_is_kept_and_custom_vjp_body_is_called():
    fn = programs().custom_rules
    x = jnp.array([1.0, 100.0])
    exported = export(fn, x)
    original = primitive_counts(exported.trace.jaxpr.jaxpr)
    original.pop("custom_vjp_call")  # its body is called instead, and says so
    assert primitive_counts(jax.make_jaxpr(exported.entry)(x).jaxpr) == original
    assert_same_numbers(exported.entry(x), fn(x))
    assert "@jax.custom_jvp" in exported.text and "@stable_softplus.defjvp" in exported.text
    assert "custom VJP rule is not reproduced" in exported.text
    # The rule survives: its derivative at 100 is the sigmoid's, where the naive one overflows.
    softplus_grad = jax.grad(lambda x: jnp.sum(exported.module.stable_softplus(x)))(x)
    assert_same_numbers(softplus_grad, jax.nn.sigmoid(x))
    assert_golden("export", "custom_rules.py", exported.text)


def test_sharding_constraints_and_shard_map_on_a_one_device_mesh():
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))

    def fn(x):
        y = jax.lax.with_sharding_constraint(x * 2.0, NamedSharding(mesh, P("data")))

        def per_shard(block):
            return block * 3.0 + jax.lax.psum(block, "data")

        return jax.shard_map(per_shard, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(y)

    exported = roundtrip(fn, jnp.arange(4.0))
    assert "jax.lax.with_sharding_constraint(" in exported.text and "jax.shard_map(" in exported.text
    assert "def per_shard(block):" in exported.text


def test_annotate_exports_and_checks_a_jax_file(tmp_path, capsys):
    from jaxside.annotate.cli import main

    out = tmp_path / "programs_jax.py"
    assert main([str(SAMPLES / "jax_programs.py"), "--export", "-o", str(out), "--check"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "def grad_mlp_loss(params, x, y):" in text and "torch" not in text
    assert main([str(SAMPLES / "jax_programs.py")]) == 0
    assert "# jax: def mlp(params, x)" in capsys.readouterr().out
