"""Rules for higher-order primitives: loops, branches, checkpoints and calls as nested defs with their call.

`lax.scan` (and `lax.map`, `lax.fori_loop` when the scan is one), `lax.while_loop`,
`lax.cond`/`lax.switch`, `jax.checkpoint` with its policy, `jax.lax.with_sharding_constraint`,
`jax.shard_map` and the gradient accumulation `add_any`. Each body is a def nested in the
function being written (`Emitter.nested`), named after the user's function it was traced
from, closing over the loop's constants the way the code that built it did; the call re-traces
to the same primitive with the same body.  An emitter that writes no nested defs gets the exact
primitive, `lax.while_loop` over lambdas, or a custom call's body inline.
"""

from __future__ import annotations

import ast
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Literal

from jaxside.render.rules._core import (
    Rule,
    atom_expr,
    aval_of,
    call,
    dotted,
    exact,
    kw,
    lambda_args,
    literal,
    registrar,
)
from jaxside.render.rules.emitter import Emitter, Signature, Structured, pack
from jaxside.render.rules.known_calls import known_call

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


def _tuple(items: list[ast.expr], empty: ast.expr | None = None) -> ast.expr:
    if not items:
        return empty if empty is not None else ast.Tuple([], ast.Load())
    return items[0] if len(items) == 1 else ast.Tuple(list(items), ast.Load())


# -- loops ------------------------------------------------------------------------------------------


@rule("scan")
def _scan(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr | Structured:
    if not emitter.nests:
        return exact(eqn, args, emitter)
    p = eqn.params
    body: ClosedJaxpr = p["jaxpr"]
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    n_in, n_out = len(body.jaxpr.invars), len(body.jaxpr.outvars)
    n_xs = n_in - n_consts - n_carry
    consts, init, xs = args[:n_consts], args[n_consts : n_consts + n_carry], args[n_consts + n_carry :]
    closure = {i: consts[i] for i in range(n_consts)}
    carry_in = pack(range(n_consts, n_consts + n_carry))
    xs_in = pack(range(n_consts + n_carry, n_in), None)
    carry_out = pack(range(n_carry))
    ys_out = pack(range(n_carry, n_out), None)
    length, reverse, unroll = p["length"], p["reverse"], p["unroll"]

    fori = _fori(eqn) if not emitter.used(eqn.outvars[0]) else None
    if fori is not None:
        lower, step = fori
        i = n_consts
        rest_in = pack(range(n_consts + 1, n_consts + n_carry))
        rest_out = pack(range(1, n_carry))
        signature = Signature([i, rest_in], rest_out, closure, ["i", "carry"], frozenset({step}))
        fn = emitter.nested(body, "body", signature)
        start = atom_expr(eqn.invars[n_consts])  # `0`, or `jnp.int32(0)` when not weakly typed
        stop: ast.expr = ast.Constant(lower + length)
        if isinstance(start, ast.Call):
            stop = call(start.func, [stop])
        keywords = [kw("unroll", unroll)] if unroll != 1 else []
        value = call("lax.fori_loop", [start, stop, fn, _tuple(init[1:])], keywords)
        return Structured(value, rest_out)

    if n_carry == 0 and n_xs > 0 and not reverse and unroll == 1:
        fn = emitter.nested(body, "body", Signature([xs_in], ys_out, closure, ["xs" if n_xs > 1 else "x"]))
        return Structured(call("lax.map", [fn, _tuple(xs)]), pack(range(n_out), None))

    names = ["carry", "xs" if n_xs > 1 else "x"]
    fn = _checkpointed_body(body, emitter, Signature([carry_in, xs_in], (carry_out, ys_out), closure, names))
    keywords = []
    if n_xs == 0 or length != _leading(eqn, n_consts + n_carry):
        keywords.append(kw("length", length))
    if reverse:
        keywords.append(kw("reverse", True))
    if unroll != 1:
        keywords.append(kw("unroll", unroll))
    value = call("lax.scan", [fn, _tuple(init), _tuple(xs, ast.Constant(None))], keywords)
    return Structured(value, (pack(range(n_carry)), pack(range(n_carry, n_out), None)))


def _leading(eqn: Any, first_xs: int) -> int | None:
    xs = eqn.invars[first_xs:]
    return xs[0].aval.shape[0] if xs and xs[0].aval.shape else None


def _fori(eqn: Any) -> tuple[int, int] | None:
    """`(lower, index of the i + 1 equation)` when a scan is `lax.fori_loop`'s: no xs and no ys, the
    first carry an integer counter that starts at a constant and steps by one."""
    p = eqn.params
    body = p["jaxpr"].jaxpr
    n_consts, n_carry = p["num_consts"], p["num_carry"]
    if n_carry < 2 or len(body.invars) != n_consts + n_carry or len(body.outvars) != n_carry or p["reverse"]:
        return None
    start = eqn.invars[n_consts]
    if not isinstance(start, Literal) or np.ndim(start.val):
        return None
    if not np.issubdtype(aval_of(start).dtype, np.integer):
        return None
    counter = body.invars[n_consts]
    for index, inner in enumerate(body.eqns):
        if (
            inner.primitive.name == "add"
            and inner.invars[0] is counter
            and isinstance(inner.invars[1], Literal)
            and inner.invars[1].val == 1
            and inner.outvars[0] is body.outvars[0]
        ):
            return int(start.val), index
    return None


def _checkpointed_body(body: ClosedJaxpr, emitter: Emitter, signature: Signature) -> ast.expr:
    """A body that is one `jax.checkpoint` of a function of all its inputs (a `@jax.checkpoint`
    layer scanned over) as `jax.checkpoint(layer, ...)`, else the body's own def."""
    inner = body.jaxpr
    if len(inner.eqns) == 1 and not body.consts and not signature.closure:
        (only,) = inner.eqns
        if (
            only.primitive.name in ("remat2", "checkpoint")
            and list(only.invars) == list(inner.invars)
            and list(only.outvars) == list(inner.outvars)
        ):
            fn = emitter.nested(only.params["jaxpr"], "body", signature)
            return call("jax.checkpoint", [fn], _checkpoint_keywords(only, emitter))
    return emitter.nested(body, "body", signature)


@rule("while")
def _while(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr | Structured:
    if not emitter.nests:
        return _while_lambdas(eqn, args, emitter)
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts = args[:n_cond], args[n_cond : n_cond + n_body]
    init = args[n_cond + n_body :]
    n = len(init)
    step = _fori_while(eqn) if not any(emitter.used(v) for v in eqn.outvars[:2]) else None
    if step is not None:  # `lax.fori_loop` with bounds only known when it runs
        rest_in, rest_out = pack(range(n_body + 2, n_body + n)), pack(range(2, n))
        closure = dict(enumerate(body_consts))
        signature = Signature([n_body, rest_in], rest_out, closure, ["i", "carry"], frozenset({step}))
        fn = emitter.nested(p["body_jaxpr"], "body_fun", signature)
        return Structured(call("lax.fori_loop", [init[0], init[1], fn, _tuple(init[2:])]), rest_out)
    cond = emitter.nested(
        p["cond_jaxpr"], "cond_fun",
        Signature([pack(range(n_cond, n_cond + n))], 0, dict(enumerate(cond_consts)), ["carry"]),
    )
    body = emitter.nested(
        p["body_jaxpr"], "body_fun",
        Signature([pack(range(n_body, n_body + n))], pack(range(n)), dict(enumerate(body_consts)), ["carry"]),
    )
    return call("lax.while_loop", [cond, body, _tuple(init)])


def _fori_while(eqn: Any) -> int | None:
    """The index of the `i + 1` equation when a while loop is `lax.fori_loop`'s: its carry starts
    with a counter and its bound, it runs while `i < bound`, and the bound only passes through."""
    p = eqn.params
    cond, body = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    n_body = p["body_nconsts"]
    n = len(body.invars) - n_body
    if p["cond_nconsts"] or n < 3 or len(cond.eqns) != 1:
        return None
    (test,) = cond.eqns
    if test.primitive.name != "lt" or list(test.invars) != list(cond.invars[:2]):
        return None
    if cond.outvars[0] is not test.outvars[0]:
        return None
    counter, bound = body.invars[n_body], body.invars[n_body + 1]
    if body.outvars[1] is not bound or any(bound in e.invars for e in body.eqns):
        return None
    for index, inner in enumerate(body.eqns):
        if (
            inner.primitive.name == "add"
            and inner.invars[0] is counter
            and isinstance(inner.invars[1], Literal)
            and inner.invars[1].val == 1
            and inner.outvars[0] is body.outvars[0]
        ):
            return index
    return None


def _while_lambdas(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """`lax.while_loop` over lambdas calling the loop's functions (for an emitter without nested defs)."""
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = args[:n_cond], args[n_cond:n_cond + n_body], args[n_cond + n_body:]
    cond = emitter.function(p["cond_jaxpr"], "cond")
    body = emitter.function(p["body_jaxpr"], "body")
    # The loop closes over the consts, as the code that built it did: jax lifts them back out.
    carry: list[ast.expr] = [_CARRY] if len(init) == 1 else [ast.Starred(_CARRY, ast.Load())]
    cond_fn = ast.Lambda(lambda_args([_CARRY.id]), call(cond, [*cond_consts, *carry]))
    body_fn = ast.Lambda(lambda_args([_CARRY.id]), call(body, [*body_consts, *carry]))
    start = init[0] if len(init) == 1 else ast.Tuple(list(init), ast.Load())
    return call("lax.while_loop", [cond_fn, body_fn, start])


_CARRY = ast.Name("carry_", ast.Load())


# -- branches ---------------------------------------------------------------------------------------


@rule("cond")
def _cond(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if not emitter.nests:
        return exact(eqn, args, emitter)
    branches = eqn.params["branches"]
    index, operands = args[0], args[1:]
    pred = _unconverted(index) if len(branches) == 2 else None
    clamped = _unclamped(index, len(branches))
    if pred is None and clamped is None:
        # An index made elsewhere (a backward pass reuses the forward's): `lax.cond` and
        # `lax.switch` would convert or clamp it again, so the primitive itself.
        value = exact(eqn, args, emitter)
        return ast.Subscript(value, ast.Constant(0), ast.Load()) if len(eqn.outvars) == 1 else value
    n_out = len(eqn.outvars)
    signature = Signature(list(range(len(operands))), pack(range(n_out)), names=_names(operands))
    fns = [emitter.nested(branch, f"branch_{i}", signature) for i, branch in enumerate(branches)]
    if pred is not None:
        return call("lax.cond", [pred, fns[1], fns[0], *operands])
    assert clamped is not None  # (returned above without either)
    return call("lax.switch", [clamped, ast.List(fns, ast.Load()), *operands])


def _unconverted(index: ast.expr) -> ast.expr | None:
    """`pred` from `pred.astype(jnp.int32)`: `lax.cond` converts its predicate itself."""
    if isinstance(index, ast.Call) and len(index.args) == 1 and ast.unparse(index.args[0]) == "jnp.int32":
        func = index.func
        if isinstance(func, ast.Attribute) and func.attr == "astype":
            return func.value
    if isinstance(index, ast.Call) and ast.unparse(index.func) in ("lax.convert_element_type",) and len(
        index.args
    ) == 2 and ast.unparse(index.args[1]) == "jnp.int32":
        return index.args[0]
    return None


def _unclamped(index: ast.expr, n: int) -> ast.expr | None:
    """`i` from `lax.clamp(0, i, n - 1)`: `lax.switch` clamps its index itself."""
    if isinstance(index, ast.Call) and ast.unparse(index.func) == "lax.clamp" and len(index.args) == 3:
        low, value, high = index.args
        if _int_constant(low) == 0 and _int_constant(high) == n - 1:
            return value
    return None


def _int_constant(node: ast.expr) -> int | None:
    if isinstance(node, ast.Call) and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


# -- checkpoints, calls, sharding -------------------------------------------------------------------


@rule("remat2", "checkpoint")
def _remat(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if not emitter.nests:
        return exact(eqn, args, emitter)
    body = eqn.params["jaxpr"]
    n_in, n_out = len(body.invars), len(body.outvars)
    signature = Signature(list(range(n_in)), pack(range(n_out)), names=_names(args))
    fn = emitter.nested(body, "checkpointed", signature)
    return call(call("jax.checkpoint", [fn], _checkpoint_keywords(eqn, emitter)), args)


def _names(args: list[ast.expr]) -> list[str]:
    """Parameter names for a def called with `args`: the names passed, where they are names."""
    return [a.id if isinstance(a, ast.Name) else "x" for a in args]


def _checkpoint_keywords(eqn: Any, emitter: Emitter) -> list[ast.keyword]:
    keywords = []
    if not eqn.params.get("prevent_cse", True):
        keywords.append(kw("prevent_cse", False))
    policy = eqn.params.get("policy")
    if policy is not None:
        keywords.append(ast.keyword("policy", _policy_expr(policy)))
    return keywords


def _policy_expr(policy: Any) -> ast.expr:
    for name in dir(jax.checkpoint_policies):
        if getattr(jax.checkpoint_policies, name) is policy:
            return dotted(f"jax.checkpoint_policies.{name}")
    raise NotImplementedError(f"no source for the checkpoint policy {policy!r}")


@rule("closed_call", "core_call")
def _closed_call(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if not emitter.nests:
        return exact(eqn, args, emitter)
    body = eqn.params["call_jaxpr"]
    inner = body.jaxpr if isinstance(body, ClosedJaxpr) else body
    n_in, n_out = len(inner.invars), len(inner.outvars)
    fn = emitter.nested(body, "call", Signature(list(range(n_in)), pack(range(n_out)), names=_names(args)))
    return call(fn, args)


@rule("custom_jvp_call")
def _custom_jvp_call(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    known = known_call(eqn, args)
    if known is not None:  # a public function with the rule (`jax.nn.relu`): called by name
        return known
    if not emitter.nests:
        return _inlined(eqn, args, emitter)
    fn = emitter.custom_jvp(eqn)
    if fn is None:
        return _called_body(eqn, args, emitter, "custom JVP rule")
    return call(fn, args)


@rule("custom_vjp_call", "custom_vjp_call_jaxpr")
def _custom_vjp_call(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if not emitter.nests:
        return _flat_custom_call(eqn, args, emitter)
    return _called_body(eqn, args, emitter, "custom VJP rule")


def _called_body(eqn: Any, args: list[ast.expr], emitter: Emitter, what: str) -> ast.expr:
    """The function's body as a def of its name, called: the same values, differentiated by JAX
    rather than by the rule (the def's docstring says so)."""
    body = eqn.params.get("call_jaxpr", eqn.params.get("fun_jaxpr"))
    inner = body.jaxpr if isinstance(body, ClosedJaxpr) else body
    n_in, n_out = len(inner.invars), len(inner.outvars)
    note = f"Its {what} is not reproduced here:\n\n`jax.grad` of this code differentiates this body instead."
    signature = Signature(list(range(n_in)), pack(range(n_out)), names=_names(args), doc=note)
    fn = emitter.nested(body, "custom", signature)
    return call(fn, args)


@rule("add_any")
def _add_any(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # Two contributions to one gradient: the same sum `+` makes (`add_any` is `add` for cotangents).
    return ast.BinOp(args[0], ast.Add(), args[1])


@rule("sharding_constraint")
def _sharding_constraint(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.lax.with_sharding_constraint", [args[0], _sharding_expr(eqn.params["sharding"])])


def _sharding_expr(sharding: Any) -> ast.expr:
    if isinstance(sharding, jax.sharding.NamedSharding):
        return call("jax.sharding.NamedSharding", [_mesh_expr(sharding.mesh), _spec_expr(sharding.spec)])
    if isinstance(sharding, jax.sharding.PartitionSpec):
        return _spec_expr(sharding)
    raise NotImplementedError(f"no source for the sharding {sharding!r}")


def _mesh_expr(mesh: Any) -> ast.expr:
    """`jax.make_mesh(shape, names)`: the mesh over this host's first devices, as it was traced."""
    shape = tuple(mesh.axis_sizes) if hasattr(mesh, "axis_sizes") else tuple(mesh.shape.values())
    types = [dotted(f"jax.sharding.AxisType.{t.name}") for t in getattr(mesh, "axis_types", ())]
    keywords = [ast.keyword("axis_types", ast.Tuple(types, ast.Load()))] if types else []
    return call("jax.make_mesh", [literal(shape), literal(tuple(mesh.axis_names))], keywords)


def _spec_expr(spec: Any) -> ast.expr:
    return call("jax.sharding.PartitionSpec", [literal(part) for part in spec])


@rule("psum_invariant", "psum")
def _psum(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.lax.psum", [_tuple(args), _axes(eqn.params["axes"])])


@rule("pvary")
def _pvary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # Made varying over mesh axes inside `shard_map`: what `pcast(..., to="varying")` stages.
    return call("jax.lax.pcast", [_tuple(args), _axes(eqn.params["axes"])], [kw("to", "varying")])


def _axes(axes: Any) -> ast.expr:
    axes = tuple(axes)
    return literal(axes[0] if len(axes) == 1 else axes)


@rule("shard_map")
def _shard_map(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if not emitter.nests:
        return exact(eqn, args, emitter)
    p = eqn.params
    body = p["jaxpr"]
    n_in, n_out = len(body.invars), len(body.outvars)
    signature = Signature(list(range(n_in)), pack(range(n_out)), names=_names(args))
    fn = emitter.nested(body, "shard_fn", signature)
    keywords = [
        ast.keyword("mesh", _mesh_expr(p["mesh"])),
        ast.keyword("in_specs", ast.Tuple([_spec_expr(s) for s in p["in_specs"]], ast.Load())),
        ast.keyword("out_specs", _tuple([_spec_expr(s) for s in p["out_specs"]])),
    ]
    if "check_vma" in p and not p["check_vma"]:
        keywords.append(kw("check_vma", False))
    return call(call("jax.shard_map", [fn], keywords), args)


def _flat_custom_call(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """A custom VJP call for an emitter without nested defs: its known function, else its body."""
    if eqn.primitive.name != "custom_vjp_call":
        return exact(eqn, args, emitter)
    known = known_call(eqn, args)
    return known if known is not None else _inlined(eqn, args, emitter)


def _inlined(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # Last resort, exact forward only: the body runs as is, its derivative rule is lost.
    outs = emitter.inline(eqn.params["call_jaxpr"], args, eqn.primitive.name)
    return outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())
