"""Sub-jaxprs (a scan's body, a cond's branches, a checkpointed function) as defs named from the JAX code.

A `Signature` says how the def is called: its Python parameters as invar indices, tuples of
them (`def step(state): x, previous = state`) or None, the structure of what it returns,
and the invars it reads from the enclosing def instead (a loop's constants, closed over as
the code that built the loop did; JAX lifts them back out, so the loop re-traces the same).
Values inside are named like the top level: the local the JAX code bound, the gradient of a
named value, the expression that made it.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jax.extend.core import ClosedJaxpr, Literal, Var

from render import names as naming
from render._signature import STRUCTURE, Shape, Signature, indices, pack, shape_expr
from render.names import Scope
from render.ops import atom_expr, dotted
from render.program import (
    INLINE_LIMIT,
    Function,
    LoweringError,
    Statement,
    _Builder,
    _contains,
    _is_simple,
    _name,
)
from tracing.trace import Site

if TYPE_CHECKING:
    from render.program import _Lowering

class BodyBuilder(_Builder):
    """Renders one sub-jaxpr as a def; the `Emitter` its own equations' rules talk to."""

    def __init__(self, lowering: _Lowering, closed_over: set[str] = frozenset()) -> None:
        super().__init__(lowering, None)
        # The def's own names may shadow the enclosing def's, except the ones it reads from there
        # and the names of the defs around it.
        self.closed_over = set(closed_over)
        self.scope = Scope(reserved=set(lowering.reserved) | self.closed_over, outer=lowering.module)

    def build(self, name: str, jaxpr: Any, signature: Signature) -> Function:
        closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else None
        inner = closed.jaxpr if closed is not None else jaxpr
        if closed is not None:
            for v, c in zip(inner.constvars, closed.consts):
                self.env[v] = self.low.constant(c, name)
        for index, expr in signature.closure.items():
            self.env[inner.invars[index]] = expr
        eqns = [e for i, e in enumerate(inner.eqns) if i not in signature.skip]
        returned = [inner.outvars[i] for i in indices(signature.returns)]
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
        return Function(name, [], params, self.body, returns, self.scope, doc=signature.doc)

    # -- Emitter -----------------------------------------------------------------------------------

    def nested(self, jaxpr: Any, hint: str, signature: Signature) -> ast.expr:
        return nested(self, jaxpr, hint, signature)

    def expr(self, v: Any) -> ast.expr:
        if isinstance(v, Literal):
            return atom_expr(v, self)
        if v in self.env:
            return copy.deepcopy(self.env[v])
        raise LoweringError(f"no value for {v} in a nested function")

    # -- naming ------------------------------------------------------------------------------------

    def site_of(self, eqn: Any) -> Site | None:
        for v in eqn.outvars:
            origin = self.low.trace.origin(v) if isinstance(v, Var) else None
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
                self.env[inner.invars[shape]] = _name(name)
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
                self.env[v] = _name(name)
                value = ast.Subscript(_name(whole), ast.Constant(0), ast.Load())
                self._emit(Statement([name], value, [], None))
                continue
            fallbacks = {i: signature.leaf_names.get(i, f"{whole}_{k}") for i, k in order.items()}
            target = self._unpack(inner, shape, fallbacks, debug)
            names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
            self._emit(Statement(names, _name(whole), [], None, target=target))
        return params

    def _unpack(self, inner: Any, shape: Shape, fallback: dict[int, str], debug: tuple) -> ast.expr:
        """The target unpacking a tuple parameter into its leaves' names (`x, previous = state`)."""
        if isinstance(shape, int):
            v = inner.invars[shape]
            if not self.uses[v]:
                return _name("_", ast.Store())
            name = self.scope.fresh(*self._var_name(v, _debug(debug, shape), fallback[shape]))
            self.env[v] = _name(name)
            return _name(name, ast.Store())
        if shape is None:
            return _name("_", ast.Store())
        return ast.Tuple([self._unpack(inner, s, fallback, debug) for s in shape], ast.Store())

    def _var_name(self, v: Any, debug: str | None, fallback: str) -> tuple[str, naming.Source]:
        origin = self.low.trace.origin(v)
        if origin is not None and origin.name and origin.name.isidentifier():
            return origin.name, "local"
        if v in self.low.gradients:
            return self._gradient_base(v, None), "gradient"
        if debug and debug.isidentifier():
            return debug, "argument"
        return fallback, "fallback"

    def _emit_inner(self, eqn: Any) -> None:
        site = self.site_of(eqn)
        self.site = site
        operands = [self.expr(v) for v in eqn.invars]
        value = self.render(eqn, copy.deepcopy(operands))
        outs = eqn.outvars
        structure = getattr(value, STRUCTURE, None)
        if structure is None and len(outs) == 1 and self._inlinable_inner(outs[0], site, value):
            self.env[outs[0]] = value
            return
        names: dict[int, str] = {}
        for i, v in enumerate(outs):
            if isinstance(v, Var) and self.uses[v]:
                names[i] = self._target_inner(v, site, eqn.primitive.name)
        emit_structured(self, outs, value, names, site, [])

    def _inlinable_inner(self, v: Any, site: Site | None, value: ast.expr) -> bool:
        if not isinstance(v, Var) or self.uses[v] != 1:
            return False
        origin = self.low.trace.origin(v)
        if origin is not None and origin.name:
            return False
        if self.low.gradients.get(v) is not None:
            return False
        consumer = self.consumer.get(v)
        if site is not None and consumer not in (site, "return") and len(ast.unparse(value)) > INLINE_LIMIT:
            return False
        if consumer == "return" or site is None:
            return True
        return isinstance(consumer, Site) and _contains(consumer, site)

    def _target_inner(self, v: Any, site: Site | None, fallback: str) -> str:
        origin = self.low.trace.origin(v)
        if origin is not None and origin.name and origin.name.isidentifier():
            return self.scope.fresh(origin.name, "local")
        if v in self.low.gradients:
            return self.scope.fresh(self._gradient_base(v, site), "gradient")
        if v in self.low.trace.derivatives:
            return self.scope.fresh(self._derivative_base(v, site), "gradient")
        base = naming.expression_name(site.text if site else None)
        if base:
            return self.scope.fresh(base, "expression", temporary=True)
        return self.scope.fresh(fallback, "fallback")


def emit_structured(
    builder: _Builder, outs: list[Any], value: ast.expr, names: dict[int, str], site: Site | None,
    eqns: list[int],
) -> None:
    """Assign `value` to names for the outputs in `names` (`_` for the rest), following its structure."""
    shape = getattr(value, STRUCTURE, None)
    if shape is None:
        shape = pack(range(len(outs)))

    def target(s: Shape) -> ast.expr:
        if isinstance(s, int):
            return _name(names.get(s, "_"), ast.Store())
        if s is None or s == ():
            return _name("_", ast.Store())
        return ast.Tuple([target(item) for item in s], ast.Store())

    node = target(shape)
    flat = [names[i] for i in indices(shape) if i in names]
    builder._emit(Statement(flat, value, eqns, site, target=node if not isinstance(node, ast.Name) else None))
    for i, name in names.items():
        builder.env[outs[i]] = _name(name)


@dataclass
class Define(Statement):
    """A def nested in the one being written (a loop body): the statements after it call it."""

    function: Function | None = None

    def node(self) -> ast.stmt:
        assert self.function is not None
        return self.function.node()


def nested(builder: _Builder, jaxpr: Any, hint: str, signature: Signature) -> ast.expr:
    """Write `jaxpr` as a def nested in `builder`'s body; return the expression naming it."""
    closure = {}
    for index, expr in signature.closure.items():
        if not _is_simple(expr):  # computed once, outside the loop, as it was
            name = builder.scope.fresh(naming.expression_name(ast.unparse(expr)) or "const", "expression")
            builder._emit(Statement([name], expr, builder._take_pending(), builder.site))
            expr = _name(name)
        closure[index] = expr
    signature = dataclasses.replace(signature, closure=closure)
    name = builder.scope.fresh(def_name(builder.low, jaxpr, hint), "local")
    read = {n.id for expr in closure.values() for n in ast.walk(expr) if isinstance(n, ast.Name)}
    body = BodyBuilder(builder.low, read | getattr(builder, "closed_over", set()) | {name})
    function = body.build(name, jaxpr, signature)
    builder._emit(Define([], ast.Constant(None), [], builder.site, function=function))
    return _name(name)


def def_name(low: _Lowering, jaxpr: Any, hint: str) -> str:
    """The user's function a sub-jaxpr was traced from (`layer`, `grad_layer` for its backward
    pass), else the function its debug info names, else `hint`."""
    inner = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    name = None
    for v in inner.invars:
        origin = low.trace.origin(v)
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
    if outs and sum(v in low.gradients for v in outs) * 2 > len(outs) and not name.startswith("grad_"):
        name = f"grad_{name}"
    return name


def _dense(leaves: dict[int, ast.expr]) -> list[ast.expr]:
    size = max(leaves, default=-1) + 1
    return [leaves.get(i, ast.Constant(None)) for i in range(size)]


def _debug(names: tuple, index: int) -> str | None:
    return names[index] if index < len(names) and names[index] else None


def _root(name: str | None) -> str | None:
    if not name:
        return None
    root = name.split("[", 1)[0].split(".", 1)[0]
    return root if root.isidentifier() and root != name else None


def define_custom_jvp(low: _Lowering, eqn: Any) -> ast.expr | None:
    """A module-level `@jax.custom_jvp` def for the function a `custom_jvp_call` calls, and its
    `@f.defjvp` rule from the trace; None when the trace has no rule for it."""
    body = eqn.params["call_jaxpr"]
    key = (_function_source(body), str(body))
    if key in low.custom_names:
        return _name(low.custom_names[key])
    rule = low.trace.custom_jvp_rules.get(id(eqn.params.get("jvp_jaxpr_fun")))
    if rule is None:
        return None
    n_in, n_out = len(body.jaxpr.invars), len(body.jaxpr.outvars)
    name = low.module.fresh(def_name(low, body, "custom_jvp"), "local")
    low.custom_names[key] = name  # its rule calls it again
    function = BodyBuilder(low).build(
        name, body, Signature(list(range(n_in)), pack(range(n_out)), names=_arg_names(body, n_in))
    )
    function.decorators = [dotted("jax.custom_jvp")]
    low.helpers.append(function)
    leaves = {i: p for i, p in enumerate(function.params)}
    leaves.update({n_in + i: f"{p}_dot" for i, p in enumerate(function.params)})
    signature = Signature(
        [tuple(range(n_in)), tuple(range(n_in, 2 * n_in))],
        (pack(range(n_out)), pack(range(n_out, 2 * n_out))),
        names=["primals", "tangents"],
        leaf_names=leaves,
    )
    jvp = BodyBuilder(low, {name}).build(low.module.fresh(f"{name}_jvp", "local"), rule, signature)
    jvp.decorators = [ast.Attribute(_name(name), "defjvp", ast.Load())]
    low.helpers.append(jvp)
    return _name(name)


def _function_source(closed: Any) -> str | None:
    return getattr(getattr(closed.jaxpr, "debug_info", None), "func_src_info", None)


def _arg_names(closed: Any, count: int) -> list[str]:
    names = getattr(getattr(closed.jaxpr, "debug_info", None), "arg_names", None) or ()
    result = []
    for i in range(count):
        name = names[i] if i < len(names) else ""
        result.append(name if name and name.isidentifier() else "x")
    return result
