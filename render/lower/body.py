"""The base def writer: a body of statements for equations, and the `Emitter` rules talk to.

`Body` writes a sub-jaxpr (a scan's body, a cond's branch, a `@jax.jit` function of the
user's) as a def named from the JAX code (`write_def`, called as a `Signature` says), or a
jaxpr as a flat helper (`write_flat_def`).  Values are named like the top level: the local the
code bound, the gradient of a named value, the expression that made it.  `render.lower.calldef`
extends it to write the def of a call of user code.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from typing import Any, cast

from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var

from jaxside.render import names as naming
from jaxside.render.ir import Define, Function, Statement, named
from jaxside.render.lower.clone import clone
from jaxside.render.lower.context import CALL_LIKE, INLINE_LIMIT, Context, LoweringError, live_eqns
from jaxside.render.lower.dtypes import followed_dtype
from jaxside.render.names import Scope
from jaxside.render.rules import (
    RULES,
    Shape,
    Signature,
    Structured,
    atom_expr,
    dotted,
    function_source,
    fuse,
    indices,
    pack,
    render_eqn,
    shape_expr,
)
from jaxside.render.source import site_contains
from jaxside.tracing.trace import Site


class Body:
    """Writes one def's statements; the `Emitter` its equations' rules talk to."""

    nests = True

    def __init__(self, ctx: Context, closed_over: set[str] | frozenset[str] = frozenset()) -> None:
        self.ctx = ctx
        # A nested def's own names may shadow the enclosing def's, except the ones it reads from
        # there and the names of the defs around it.
        self.closed_over = set(closed_over)
        self.scope = Scope(reserved=set(ctx.roles.reserved) | self.closed_over, outer=ctx.module.scope)
        self.env: dict[Any, ast.expr] = {}
        self.pending: list[int] = []
        self.body: list[Statement] = []
        self.uses: Counter[Any] = Counter()
        self.consumer: dict[Any, Site | None | str] = {}
        self.site: Site | None = None

    # -- Emitter -----------------------------------------------------------------------------------

    def constant(self, value: Any, hint: str) -> ast.expr:
        return self.ctx.module.constant(value, hint)

    def used(self, var: Any) -> bool:
        return bool(self.uses[var]) if isinstance(var, Var) else False

    def rewrote(self, name: str) -> None:
        """Nothing to do: an export is held to its numbers under jit (`--check`, the fuzzer's proofs)."""

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else None
        inner: Jaxpr = closed.jaxpr if closed is not None else jaxpr
        local: dict[Any, ast.expr] = {}
        counts: Counter[Any] = Counter(v for e in inner.eqns for v in e.invars if isinstance(v, Var))
        counts.update(v for v in inner.outvars if isinstance(v, Var))
        base = naming.expression_name(self.site.text if self.site else None) or naming.identifier(hint)
        for v, arg in zip(inner.invars, args):
            if counts[v] > 1 and not _is_simple(arg):
                name = self.scope.fresh(base, "expression", temporary=True)
                self._emit(Statement([name], arg, self._take_pending(), self.site))
                arg = named(name)
            local[v] = arg
        if closed is not None:
            for v, c in zip(inner.constvars, closed.consts):
                local[v] = self.ctx.module.constant(c, hint)
        for eqn in inner.eqns:
            value = self.render(
                eqn,
                [clone(local[v]) if isinstance(v, Var) else ast.Constant(None) for v in eqn.invars],
            )
            if not isinstance(value, Structured) and len(eqn.outvars) == 1 and counts[eqn.outvars[0]] == 1:
                local[eqn.outvars[0]] = value
                continue
            targets = [
                self.scope.fresh(base, "expression", temporary=True) if counts[v] else "_"
                for v in eqn.outvars
            ]
            if isinstance(value, Structured):  # `lax.scan`'s `(carry, ys)`: unpacked by its structure
                names = {i: t for i, t in enumerate(targets) if t != "_"}
                self.emit_structured(list(eqn.outvars), value, names, self.site, self._take_pending())
            else:
                self._emit(Statement(targets, value, self._take_pending(), self.site))
            for v, t in zip(eqn.outvars, targets):
                local[v] = named(t)
        return [clone(local[v]) if isinstance(v, Var) else atom_expr(v, self) for v in inner.outvars]

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, eqn: Any, args: list[ast.expr]) -> ast.expr | Structured:
        """`eqn` by its rule.  A rule says it cannot write an equation by raising NotImplementedError
        (a parameter with no source form); anything else it raises is a bug, and propagates."""
        eqn = _without_trivial_sharding(eqn)
        name = eqn.primitive.name
        if name not in RULES:
            self.ctx.module.fallbacks[name] += 1
        try:
            return followed_dtype(eqn, render_eqn(eqn, args, self), self.env, self.site_of(eqn))
        except (NotImplementedError, LoweringError) as error:
            body = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
            if body is None or name not in CALL_LIKE:
                raise LoweringError(f"cannot render `{name}` equation {eqn}: {error}") from error
            # A call-like primitive the rules could not write: its body, inline, computes the same.
            self.ctx.module.fallbacks[f"{name} (inlined)"] += 1
            outs = self.inline(body, args, name)
            return outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())

    def _emit(self, statement: Statement) -> None:
        self.body.append(statement)

    def _take_pending(self) -> list[int]:
        pending, self.pending = sorted(set(self.pending)), []
        return pending

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        key = str(jaxpr)
        name = self.ctx.module.helper_names.get(key)
        if name is None:
            if self._user_code(jaxpr):
                # A function of the user's (`@jax.jit def attention`): its name, its arguments' names.
                base = def_name(self.ctx, jaxpr, naming.identifier(hint.lstrip("_")))
                name = self.ctx.module.scope.fresh(base, "local")
                self.ctx.module.helper_names[key] = name
                inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
                signature = Signature(
                    list(range(len(inner.invars))), pack(range(len(inner.outvars))),
                    names=_helper_params(len(inner.invars)),
                )
                self.ctx.module.helpers.append(Body(self.ctx).write_def(name, jaxpr, signature))
                return named(name)
            name = self.ctx.module.scope.fresh("_" + naming.identifier(hint.lstrip("_"), "body"), "local")
            self.ctx.module.helper_names[key] = name
            self.ctx.module.helpers.append(Body(self.ctx).write_flat_def(name, jaxpr))
        return named(name)

    def _user_code(self, jaxpr: Any) -> bool:
        """Whether a sub-jaxpr holds the user's code (values with a source expression or a name)."""
        inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
        for v in [*inner.invars, *(v for e in inner.eqns for v in e.outvars)]:
            origin = self.ctx.trace.origin(v) if isinstance(v, Var) else None
            if origin is not None and (origin.name or origin.site is not None):
                return True
        return False

    def nested(self, jaxpr: Any, hint: str, signature: Signature) -> ast.expr:
        """Write `jaxpr` as a def nested in this one's body; return the expression naming it."""
        closure = {}
        for index, expr in signature.closure.items():
            if not _is_simple(expr):  # computed once, outside the loop, as it was
                name = self.scope.fresh(naming.expression_name(ast.unparse(expr)) or "const", "expression")
                self._emit(Statement([name], expr, self._take_pending(), self.site))
                expr = named(name)
            closure[index] = expr
        signature = dataclasses.replace(signature, closure=closure)
        name = self.scope.fresh(def_name(self.ctx, jaxpr, hint), "local")
        read = {n.id for expr in closure.values() for n in ast.walk(expr) if isinstance(n, ast.Name)}
        function = Body(self.ctx, read | self.closed_over | {name}).write_def(name, jaxpr, signature)
        self._emit(Define([], ast.Constant(None), [], self.site, function=function))
        return named(name)

    def custom_jvp(self, eqn: Any) -> ast.expr | None:
        """A module-level `@jax.custom_jvp` def for the function a `custom_jvp_call` calls, and its
        `@f.defjvp` rule from the trace; None when the trace has no rule for it."""
        module = self.ctx.module
        body = eqn.params["call_jaxpr"]
        key = (function_source(body), str(body))
        if key in module.custom_names:
            return named(module.custom_names[key])
        rule = self.ctx.trace.custom_jvp_rules.get(id(eqn.params.get("jvp_jaxpr_fun")))
        if rule is None:
            return None
        n_in, n_out = len(body.jaxpr.invars), len(body.jaxpr.outvars)
        name = module.scope.fresh(def_name(self.ctx, body, "custom_jvp"), "local")
        module.custom_names[key] = name  # its rule calls it again
        signature = Signature(list(range(n_in)), pack(range(n_out)), names=_arg_names(body, n_in))
        function = Body(self.ctx).write_def(name, body, signature)
        function.decorators = [dotted("jax.custom_jvp")]
        module.helpers.append(function)
        leaves = {i: p for i, p in enumerate(function.params)}
        leaves.update({n_in + i: f"{p}_dot" for i, p in enumerate(function.params)})
        signature = Signature(
            [tuple(range(n_in)), tuple(range(n_in, 2 * n_in))],
            (pack(range(n_out)), pack(range(n_out, 2 * n_out))),
            names=["primals", "tangents"],
            leaf_names=leaves,
        )
        jvp = Body(self.ctx, {name}).write_def(module.scope.fresh(f"{name}_jvp", "local"), rule, signature)
        jvp.decorators = [ast.Attribute(named(name), "defjvp", ast.Load())]
        module.helpers.append(jvp)
        return named(name)

    def write_def(self, name: str, jaxpr: Any, signature: Signature) -> Function:
        """`jaxpr` as the def `name`, called as `signature` says."""
        closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else None
        inner = closed.jaxpr if closed is not None else jaxpr
        if closed is not None:
            for v, c in zip(inner.constvars, closed.consts):
                self.env[v] = self.ctx.module.constant(c, name)
        for index, expr in signature.closure.items():
            self.env[inner.invars[index]] = expr
        eqns = [e for i, e in enumerate(inner.eqns) if i not in signature.skip]
        returned = [inner.outvars[i] for i in indices(signature.returns)]
        # The runs one `jnp` expression stages (`jnp.einsum`, `x[i]`), as at the top level; what is
        # left of a run, and what nothing returned reads, is dead.
        consts = dict(zip(inner.constvars, closed.consts)) if closed is not None else {}
        fused = fuse(eqns, returned, site=lambda i: self.site_of(eqns[i]), consts=consts)
        eqns = [fused[i] for i in sorted(live_eqns(fused, returned, {}))]
        for eqn in eqns:
            for v in eqn.invars:
                if isinstance(v, Var):
                    self.uses[v] += 1
                    self.consumer[v] = self.site_of(eqn)
        for v in returned:
            if isinstance(v, Var):
                self.uses[v] += 1
                self.consumer[v] = "return"
        params = self._parameters_of(inner, signature)
        for eqn in eqns:
            self._emit_inner(eqn)
        leaves = {i: self.expr(inner.outvars[i]) for i in indices(signature.returns)}
        returns = shape_expr(signature.returns, _dense(leaves))
        function = Function(name, [], params, self.body, returns, self.scope, doc=signature.doc)
        function.arg_shapes = {
            p: tuple(inner.invars[at].aval.shape)
            for p, at in zip(params, signature.params)
            if isinstance(at, int)
        }
        self.record_shapes(function)
        return function

    def expr(self, v: Any) -> ast.expr:
        if isinstance(v, Literal):
            return atom_expr(v, self)
        if v in self.env:
            return clone(self.env[v])
        raise LoweringError(f"no value for {v} in a nested function")

    def record_shapes(self, function: Function) -> None:
        """Note the shape of each value the def names (what `merge.input_sizes` reads sizes from)."""
        for v, expr in self.env.items():
            if isinstance(expr, ast.Name) and isinstance(v, Var):
                function.value_shapes.setdefault(expr.id, tuple(cast(Any, v.aval).shape))

    # -- naming ----------------------------------------------------------------------------------

    def _gradient_base(self, v: Any, site: Site | None) -> str:
        """`grad_h` for the gradient of `h`: the name the forward value has here, or had where it was made."""
        return naming.gradient_name(self._primal_name(self.ctx.trace.gradients.get(v), site))

    def _primal_name(self, primal: Any, site: Site | None) -> str | None:
        base = None
        if primal is not None:
            known = self.env.get(primal)
            if isinstance(known, ast.Name):
                base = known.id
            else:
                origin = self.ctx.trace.origin(primal)
                base = origin.name or naming.expression_name(origin.expression) if origin else None
        return base or naming.expression_name(site.text if site else None)

    def _derivative_base(self, v: Any, site: Site | None) -> str:
        """`d_hidden` for a factor of the derivative of `hidden` (`1.0 - hidden` for a tanh)."""
        return naming.derivative_name(self._primal_name(self.ctx.trace.derivatives[v], site))

    def site_of(self, eqn: Any) -> Site | None:
        for v in eqn.outvars:
            origin = self.ctx.trace.origin(v) if isinstance(v, Var) else None
            if origin is not None:
                return origin.site
        return None

    def _parameters_of(self, inner: Any, signature: Signature) -> list[str]:
        debug = getattr(getattr(inner, "debug_info", None), "arg_names", None) or ()
        params = []
        for position, shape in enumerate(signature.params):
            fallback = signature.names[position] if position < len(signature.names) else "x"
            if shape is None:
                params.append(self.scope.fresh("_" if fallback == "_" else fallback, "fallback"))
                continue
            if isinstance(shape, int):
                name = self.scope.fresh(*self._var_name(inner.invars[shape], _debug(debug, shape), fallback))
                self.env[inner.invars[shape]] = named(name)
                params.append(name)
                continue
            roots = {_root(_debug(debug, i)) for i in indices(shape)}
            root = roots.pop() if len(roots) == 1 and None not in roots else None
            whole = self.scope.fresh(root or fallback, "argument" if root else "fallback")
            params.append(whole)
            order = {index: k for k, index in enumerate(indices(shape))}
            if len(shape) == 1 and isinstance(shape[0], int):  # `(x,) = primals` reads as `x = primals[0]`
                v = inner.invars[shape[0]]
                fallback_leaf = signature.leaf_names.get(shape[0], f"{whole}_0")
                name = self.scope.fresh(*self._var_name(v, _debug(debug, shape[0]), fallback_leaf))
                self.env[v] = named(name)
                value = ast.Subscript(named(whole), ast.Constant(0), ast.Load())
                self._emit(Statement([name], value, [], None))
                continue
            fallbacks = {i: signature.leaf_names.get(i, f"{whole}_{k}") for i, k in order.items()}
            target = self._unpack(inner, shape, fallbacks, debug)
            names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
            self._emit(Statement(names, named(whole), [], None, target=target))
        return params

    def _unpack(self, inner: Any, shape: Shape, fallback: dict[int, str], debug: tuple[Any, ...]) -> ast.expr:
        """The target unpacking a tuple parameter into its leaves' names (`x, previous = state`)."""
        if isinstance(shape, int):
            v = inner.invars[shape]
            if not self.uses[v]:
                return named("_", ast.Store())
            name = self.scope.fresh(*self._var_name(v, _debug(debug, shape), fallback[shape]))
            self.env[v] = named(name)
            return named(name, ast.Store())
        if shape is None:
            return named("_", ast.Store())
        return ast.Tuple([self._unpack(inner, s, fallback, debug) for s in shape], ast.Store())

    def _var_name(self, v: Any, debug: str | None, fallback: str) -> tuple[str, naming.Source]:
        origin = self.ctx.trace.origin(v)
        if origin is not None and origin.name and origin.name.isidentifier():
            return origin.name, "local"
        if v in self.ctx.trace.gradients:
            return self._gradient_base(v, None), "gradient"
        if debug and debug.isidentifier():
            return debug, "argument"
        return fallback, "fallback"

    def _emit_inner(self, eqn: Any) -> None:
        site = self.site_of(eqn)
        self.site = site
        operands = [self.expr(v) for v in eqn.invars]
        value = self.render(eqn, clone(operands))
        outs = eqn.outvars
        if not isinstance(value, Structured) and len(outs) == 1 and self._inlinable_inner(outs[0], site,
                                                                                           value):
            self.env[outs[0]] = value
            return
        names: dict[int, str] = {}
        for i, v in enumerate(outs):
            if isinstance(v, Var) and self.uses[v]:
                names[i] = self._target_inner(v, site, eqn.primitive.name)
        self.emit_structured(outs, value, names, site, [])

    def _inlinable_inner(self, v: Any, site: Site | None, value: ast.expr) -> bool:
        if not isinstance(v, Var) or self.uses[v] != 1:
            return False
        origin = self.ctx.trace.origin(v)
        if origin is not None and origin.name:
            return False
        if self.ctx.trace.gradients.get(v) is not None:
            return False
        consumer = self.consumer.get(v)
        if site is not None and consumer not in (site, "return") and len(ast.unparse(value)) > INLINE_LIMIT:
            return False
        if consumer == "return" or site is None:
            return True
        return isinstance(consumer, Site) and site_contains(consumer, site)

    def _target_inner(self, v: Any, site: Site | None, fallback: str) -> str:
        origin = self.ctx.trace.origin(v)
        if origin is not None and origin.name and origin.name.isidentifier():
            return self.scope.fresh(origin.name, "local")
        if v in self.ctx.trace.gradients:
            return self.scope.fresh(self._gradient_base(v, site), "gradient")
        if v in self.ctx.trace.derivatives:
            return self.scope.fresh(self._derivative_base(v, site), "gradient")
        base = naming.expression_name(site.text if site else None)
        if base:
            return self.scope.fresh(base, "expression", temporary=True)
        return self.scope.fresh(fallback, "fallback")

    def emit_structured(
        self, outs: list[Any], value: ast.expr | Structured, names: dict[int, str], site: Site | None,
        eqns: list[int],
    ) -> None:
        """Assign `value` to names for the outputs in `names` (`_` for the rest), following its structure."""
        shape = value.shape if isinstance(value, Structured) else pack(range(len(outs)))
        value = value.value if isinstance(value, Structured) else value

        def target(s: Shape) -> ast.expr:
            if isinstance(s, int):
                return named(names.get(s, "_"), ast.Store())
            if s is None or s == ():
                return named("_", ast.Store())
            return ast.Tuple([target(item) for item in s], ast.Store())

        node = target(shape)
        flat = [names[i] for i in indices(shape) if i in names]
        target_node = node if not isinstance(node, ast.Name) else None
        self._emit(Statement(flat, value, eqns, site, target=target_node))
        for i, name in names.items():
            self.env[outs[i]] = named(name)

    def write_flat_def(self, name: str, jaxpr: Any) -> Function:
        inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
        params = [self.scope.fresh(p, "fallback") for p in _helper_params(len(inner.invars))]
        outs = self.inline(jaxpr, [named(p) for p in params], name.lstrip("_"))
        returns = outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())
        function = Function(name, [], params, self.body, returns, self.scope)
        function.arg_shapes = {p: tuple(v.aval.shape) for p, v in zip(params, inner.invars)}
        self.record_shapes(function)
        return function


def def_name(ctx: Context, jaxpr: Any, hint: str) -> str:
    """The user's function a sub-jaxpr was traced from (`layer`, `grad_layer` for its backward
    pass), else the function its debug info names, else `hint`."""
    inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    name = None
    for v in inner.invars:
        origin = ctx.trace.origin(v)
        if origin is not None and origin.kind == "arg":
            name = naming.function_name(origin.function)
            break
    if name is None:
        source = getattr(getattr(inner, "debug_info", None), "func_src_info", None) or ""
        candidate = source.split(" at ")[0]
        if candidate.isidentifier() and not candidate.startswith("_"):
            name = naming.identifier(candidate)
    name = name or hint
    outs = [v for v in inner.outvars if isinstance(v, Var)]
    if outs and sum(v in ctx.trace.gradients for v in outs) * 2 > len(outs) and not name.startswith("grad_"):
        name = f"grad_{name}"
    return name


def _dense(leaves: dict[int, ast.expr]) -> list[ast.expr]:
    size = max(leaves, default=-1) + 1
    return [leaves.get(i, ast.Constant(None)) for i in range(size)]


def _debug(names: tuple[Any, ...], index: int) -> str | None:
    return names[index] if index < len(names) and names[index] else None


def _root(name: str | None) -> str | None:
    if not name:
        return None
    root = name.split("[", 1)[0].split(".", 1)[0]
    return root if root.isidentifier() and root != name else None


def _arg_names(closed: Any, count: int) -> list[str]:
    names = getattr(getattr(closed.jaxpr, "debug_info", None), "arg_names", None) or ()
    result = []
    for i in range(count):
        name = names[i] if i < len(names) else ""
        result.append(name if name and name.isidentifier() else "x")
    return result


def _helper_params(count: int) -> list[str]:
    letters = ["x", "y", "z", "w"]
    return letters[:count] if count <= len(letters) else [f"x{i}" for i in range(count)]


def _is_simple(node: ast.expr) -> bool:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant))


class _NoMesh:
    axis_names = ("?",)


_NO_MESH = _NoMesh()


def _without_trivial_sharding(eqn: Any) -> Any:
    """`eqn` with a sharding over a mesh of no axes (what a backward pass sets on a single device)
    as None: it places nothing, and None is what the public functions take for it."""
    trivial = [
        k
        for k, v in eqn.params.items()
        if k in ("sharding", "out_sharding") and v is not None and not getattr(v, "mesh", _NO_MESH).axis_names
    ]
    if not trivial:
        return eqn
    return eqn.replace(params={**eqn.params, **dict.fromkeys(trivial)})
