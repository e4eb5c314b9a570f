"""What every def of a lowering reads: the cleaned equations, who uses each value, the module's names.

`Context(trace)` is what the def writers share, passed around as `ctx`: `ctx.flow` (`Dataflow`)
drops repeated equations (torchax re-slices a view each time it is read) and dead ones and counts
uses; `ctx.roles` (`Roles`) maps each input to its role (argument, parameter, state buffer);
`ctx.module` (`ModuleLevel`) collects the module-level things defs add as they are written:
constants, helper defs, names, fallbacks.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from jax.extend.core import Literal, Var

from jaxside.render import names as naming
from jaxside.render.ir import Function, named
from jaxside.render.lower.comparable import Comparable
from jaxside.render.lower.paths import Tree
from jaxside.render.names import Scope
from jaxside.render.rules import fuse
from jaxside.tracing.trace import Input, Trace

CALL_LIKE = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "remat2", "checkpoint", "custom_jvp_call", "custom_vjp_call",
     "custom_vjp_call_jaxpr", "custom_lin"}
)
"""Primitives that call their body once: when no rule can write one, its body inline computes the same."""
MODULE_NAMES = frozenset(
    {"jax", "jnp", "lax", "np", "torch", "load_params", "_lists", "_is_state", "STATE_BUFFERS"}
    | {"params", "state"}
)
INLINE_LIMIT = 60
"""A sub-expression of another torch expression is written inside it when at most this long."""


class LoweringError(Exception):
    """The trace has a shape this lowering cannot express; the message says where."""


class Context:
    """What every def writer of one lowering shares: the trace, its cleaned equations (`flow`), the
    role of each input (`roles`), and the module-level things the defs add as they are written
    (`module`)."""

    def __init__(self, trace: Trace, progress: Callable[[str], None] = lambda step: None) -> None:
        self.trace = trace
        self.flow = Dataflow(trace, progress)
        self.roles = Roles(trace, self.flow)
        self.module = ModuleLevel(self.roles.reserved)


class Dataflow:
    """The trace's equations cleaned up: repeats aliased to their first, runs fused, dead ones
    dropped, and who uses each value."""

    def __init__(self, trace: Trace, progress: Callable[[str], None] = lambda step: None) -> None:
        self.jaxpr = trace.jaxpr.jaxpr
        self.keys = Comparable()
        """Each equation's parameters, types and literals as keys, made once (`comparable`)."""
        progress("repeated equations")
        self.alias = common_subexpressions(trace, self.keys)
        self.eqns = _resolved(self.jaxpr.eqns, self.alias)
        outvars = [self.resolve(v) for v in self.jaxpr.outvars]
        # Runs of equations one `jnp` expression stages (`x[i]`, `x.at[i].set(v)`), within one call;
        # the results of one with several (`q, k, v = jnp.split(...)`) from one torch expression.
        self.consts = dict(zip(self.jaxpr.constvars, trace.jaxpr.consts))
        progress("jnp idioms")
        self.eqns = fuse(self.eqns, outvars, site=lambda i: trace.eqn_sites[i], consts=self.consts,
                         calls=trace.eqn_calls)
        self.live = live_eqns(self.eqns, outvars, self.alias)
        self.uses: dict[Any, list[int]] = {}
        for i in sorted(self.live):
            for v in self.eqns[i].invars:
                if isinstance(v, Var):
                    self.uses.setdefault(v, []).append(i)
        self.program_outs = {v for v in outvars if isinstance(v, Var)}
        self.available = {v for i in self.live for v in self.eqns[i].outvars}
        self.available.update(self.jaxpr.invars, self.jaxpr.constvars)
        gradients = trace.gradients.keys()
        self.backward_eqns = {
            i for i, eqn in enumerate(self.eqns) if gradients and not gradients.isdisjoint(eqn.outvars)
        }
        self.outputs = [(p, self.resolve(v)) for p, v in trace.outputs]

    def resolve(self, v: Any) -> Any:
        """The value an equation computed first, for a repeat of the same equation."""
        return self.alias.get(v, v) if isinstance(v, Var) else v


class Roles:
    """What each input is (argument, parameter, state buffer) and the trees `params` and `state`."""

    def __init__(self, trace: Trace, flow: Dataflow) -> None:
        self.input_of: dict[Any, Input] = {i.var: i for i in trace.inputs}
        self.state_in = {s.input.var: s.input.name for s in trace.state}
        self.state_final = {s.input.name: flow.resolve(s.var) for s in trace.state}
        stored = [i.name for i in trace.inputs if i.kind in ("param", "buffer")]
        self.param_tree = Tree([p for p in stored if p not in self.state_final])
        self.state_tree = Tree(list(self.state_final))
        self.module_entry = any(i.kind != "arg" for i in trace.inputs) or trace.root.module_path is not None
        # `params` and `state` name the trees of a module's tensors; a function's arguments may take them.
        self.reserved = MODULE_NAMES if self.module_entry else MODULE_NAMES - {"params", "state"}


class ModuleLevel:
    """What the defs add to the module as they are written: constants, helper defs, their names
    (`scope`, which every def's own scope sits in), and the equations written as fallbacks."""

    def __init__(self, reserved: frozenset[str]) -> None:
        self.scope = Scope(reserved=set(reserved))
        self.constants: list[tuple[str, ast.expr]] = []
        self.constant_names: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        self.helpers: list[Function] = []
        self.helper_names: dict[Any, str] = {}
        self.custom_names: dict[Any, str] = {}
        self.fallbacks: Counter[str] = Counter()

    def constant(self, value: Any, hint: str) -> ast.expr:
        array = np.asarray(value)
        key = (array.dtype.str, array.shape, array.tobytes())
        name = self.constant_names.get(key)
        if name is None:
            name = self.scope.fresh(naming.identifier(hint, "const").upper(), "local")
            self.constant_names[key] = name
            self.constants.append((name, array_literal(array)))
        return named(name)


def common_subexpressions(trace: Trace, keys: Comparable | None = None) -> dict[Any, Any]:
    """Repeats of an equation within one call, mapped to the first one's outputs.

    torchax re-slices a view each time it is read (`x_re * cos` slices `pairs` again); the
    first slice is the one bound to `x_re`.  The same pure operation on the same operands
    gives the same bits, so each value is computed once, under its torch name.
    """
    eqns = trace.jaxpr.jaxpr.eqns
    keys = keys or Comparable()
    params_key, type_key, literal_key = keys.params, keys.type, keys.literal
    alias: dict[Any, Any] = {}
    resolve = alias.get
    for call in trace.root.walk():
        # By primitive, operands and outputs first: the parameters made comparable (`canonical`,
        # most of the cost) only for equations that agree on those, and once each.
        seen: dict[Any, list[list[Any]]] = {}
        for i in call.eqns:
            eqn = eqns[i]
            if eqn.effects:
                continue
            operands = tuple(
                [literal_key(v) if type(v) is Literal else resolve(v, v) for v in eqn.invars]  # (final)
            )
            key = (eqn.primitive.name, operands, tuple([type_key(v.aval) for v in eqn.outvars]))
            earlier = seen.get(key)
            if earlier is None:
                seen[key] = [[None, eqn]]
                continue
            params = params_key(eqn.params)
            first = None
            for entry in earlier:  # in order: the first equal equation is the one kept
                if entry[0] is None:
                    entry[0] = params_key(entry[1].params)
                if entry[0] == params:
                    first = entry[1]
                    break
            if first is None:
                earlier.append([params, eqn])
                continue
            for mine, theirs in zip(eqn.outvars, first.outvars):
                alias[mine] = theirs
    return alias


def _resolved(eqns: list[Any], alias: dict[Any, Any]) -> list[Any]:
    """`eqns`, each reading a repeat's value reading the first one's instead."""
    resolved = []
    for eqn in eqns:
        for v in eqn.invars:
            if isinstance(v, Var) and v in alias:
                eqn = eqn.replace(invars=[alias.get(v, v) if isinstance(v, Var) else v for v in eqn.invars])
                break
        resolved.append(eqn)
    return resolved


def live_eqns(eqns: list[Any], outvars: list[Any], alias: dict[Any, Any]) -> set[int]:
    needed = {v for v in outvars if isinstance(v, Var)}
    live: set[int] = set()
    repeats = alias.keys()
    for i in range(len(eqns) - 1, -1, -1):
        eqn = eqns[i]
        if not repeats.isdisjoint(eqn.outvars):
            continue  # a repeat: its first occurrence computes it
        if eqn.effects or not needed.isdisjoint(eqn.outvars):
            live.add(i)
            needed.update([v for v in eqn.invars if isinstance(v, Var)])
    return live


def array_literal(array: np.ndarray) -> ast.expr:
    dtype = ast.Attribute(named("np"), array.dtype.name, ast.Load())
    flat = array.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        value = ast.parse(repr(flat[0].item()), mode="eval").body
        return ast.Call(
            ast.Attribute(named("np"), "full", ast.Load()),
            [ast.Constant(cast(Any, array.shape)), value],  # a tuple of ints: `ast.unparse` writes it
            [ast.keyword("dtype", dtype)],
        )
    if array.ndim == 1 and array.size > 1 and np.issubdtype(array.dtype, np.integer):
        step = int(array[1] - array[0])
        if step and (np.diff(array) == step).all():
            args: list[ast.expr] = [
                ast.Constant(int(array[0])), ast.Constant(int(array[-1]) + step), ast.Constant(step)
            ]
            return ast.Call(
                ast.Attribute(named("np"), "arange", ast.Load()), args, [ast.keyword("dtype", dtype)]
            )
    value = ast.parse(repr(array.tolist()), mode="eval").body
    return ast.Call(ast.Attribute(named("np"), "array", ast.Load()), [value], [ast.keyword("dtype", dtype)])
