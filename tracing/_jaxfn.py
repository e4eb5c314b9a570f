"""Capture JAX functions (and `jax.grad`, `jax.jit`, `jax.vmap` of them) with the provenance torch code gets.

The same frame recorder watches the JAX code: its locals hold tracers (under `jax.grad`,
linearize tracers whose primal is the traced value), so values are named after them and
the user's functions become calls. What a JAX program adds to a torch one is read here:
values inside sub-jaxprs (a scan's body, a cond's branches) get origins too, and the
backward pass of a gradient is told apart from the forward pass, each backward value
linked to the forward value it is the gradient of (`Trace.gradients`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType
from typing import Any

import jax
import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from tracing import _internals
from tracing._capture import (
    Capture,
    OutputError,
    _bind,
    _build_trace,
    _innermost_user_site,
    _Probe,
    _Reporter,
    _user_files,
    make_jaxpr_classified,
)
from tracing._frames import CallRecord, Recorder
from tracing._source import SourceIndex
from tracing.trace import Origin, Site, Trace

# What `jax.grad` and friends say their wrapper is, first words of its docstring -> the name prefix.
_TRANSFORMS = (
    ("Value and gradient of", "value_and_grad"),
    ("Gradient of", "grad"),
    ("Vectorized version of", "vmap"),
    ("Jacobian of", "jacobian"),
    ("Hessian of", "hessian"),
)
_BACKWARD = "transpose"
"""The name-stack transform of a backward pass: `jax.grad`'s is ``transpose(jvp())``."""
_RECOMPUTED = "rematted_computation"
"""The scope of forward values `jax.checkpoint` recomputes inside a backward pass."""


def is_jax_entry(fn: Any, args: tuple, kwargs: dict) -> bool:
    """Whether to capture `fn` as JAX code: no torch module (or its method), no torch tensor in the inputs."""
    if isinstance(fn, torch.nn.Module):
        return False
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        return False
    return not any(isinstance(leaf, torch.Tensor) for leaf in jax.tree_util.tree_leaves((args, kwargs)))


def is_traced_leaf(value: Any) -> bool:
    """Inputs that become jaxpr inputs: arrays and Python floats, as `jax.jit` would trace them.

    Python ints and bools stay constants (they are lengths, axes and flags far more often than data).
    """
    return isinstance(value, (jax.Array, np.ndarray, np.generic, float, complex, jax.ShapeDtypeStruct))


@dataclass
class _Slot:
    kind: str
    name: str
    value: Any


class JaxSession:
    """One capture of a JAX function: the inputs flattened, traced once, turned into a `Trace`."""

    def __init__(self, options: Capture, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.options = options
        self.fn = fn
        self.target = _unjit(fn)
        self.module = None
        self.entry_name = _entry_name(self.target)
        self.bound = _bind(self.target, args, kwargs)
        self.user_file = _user_files(self.target, None, options.watch)
        self.module_paths: dict[int, str] = {}
        code = _code(self.target)
        self.entry_code: CodeType | None = code if code is not None and not _is_wrapper(self.target) else None
        self.defined_at = _code(inspect.unwrap(self.target))
        self.slots: list[_Slot] = []
        self.arg_trees: dict[str, tuple[list[Any], Any]] = {}
        for name, value in self.bound.arguments.items():
            leaves, treedef = jax.tree_util.tree_flatten_with_path(value)
            self.arg_trees[name] = ([leaf for _, leaf in leaves], treedef)
            for path, leaf in leaves:
                if is_traced_leaf(leaf):
                    self.slots.append(_Slot("arg", name + jax.tree_util.keystr(path), leaf))

    def run(self) -> Trace:
        probe = _Probe()
        recorder = Recorder(self.user_file, probe, self.options.backend)
        reporter = _Reporter(self.options.progress, probe)
        result: dict[str, Any] = {}

        def traced(*flat: Any) -> list[Any]:
            probe.frame = _internals.current_jaxpr_frame()
            args, kwargs = self._rebuild_arguments(flat)
            with recorder:
                out = self.target(*args, **kwargs)
            result["emitted"] = _internals.emitted_outvars(probe.frame)
            paths, values, spec, static = self._flatten_output(out)
            result.update(out_paths=paths, spec=spec, static=static, mutated=[])
            return values

        closed = make_jaxpr_classified(traced, self._jax_inputs(), self.user_file)
        reporter.tick("recording")
        self.module_paths = _module_paths(recorder.roots)
        trace = _build_trace(self, closed, recorder, result)
        if self.entry_code is None and self.defined_at is not None:
            # A transformation's root (`jax.grad(f)`) has no def of its own: the file of `f`, line 0.
            trace.root.file, trace.root.line = self.defined_at.co_filename, 0
        _inner_origins(trace, recorder.roots, self.user_file)
        trace.frontend = "jax"
        trace.gradients, trace.derivatives = _gradients(trace)
        trace.custom_jvp_rules = _custom_jvp_rules(trace.jaxpr.jaxpr)
        return trace

    def _jax_inputs(self) -> list[Any]:
        values = []
        for slot in self.slots:
            value = slot.value
            if self.options.abstract and not isinstance(value, (float, complex)):
                value = jax.ShapeDtypeStruct(np.shape(value), jax.numpy.result_type(value))
            values.append(value)
        return values

    def _rebuild_arguments(self, flat: tuple) -> tuple[tuple, dict]:
        traced = iter(flat)
        arguments = {}
        for name, (leaves, treedef) in self.arg_trees.items():
            leaves = [next(traced) if is_traced_leaf(leaf) else leaf for leaf in leaves]
            arguments[name] = jax.tree_util.tree_unflatten(treedef, leaves)
        bound = inspect.BoundArguments(self.bound.signature, arguments)
        return bound.args, bound.kwargs

    def _flatten_output(self, out: Any) -> tuple[list[str], list[Any], Any, dict[int, Any]]:
        """The return value's traced leaves by path, its torch pytree spec and its constant leaves.

        torch's pytree keeps the structure the renderers rebuild (dicts, lists, tuples); a JAX
        pytree it cannot see into (a registered class) is returned as the tuple of its leaves.
        """
        leaves, spec = torch_pytree.tree_flatten_with_path(out)
        if any(_hides_array(leaf) for _, leaf in leaves):
            flat = jax.tree_util.tree_leaves(out)
            leaves, spec = torch_pytree.tree_flatten_with_path(tuple(flat))
        paths, values, static = [], [], {}
        for i, (path, leaf) in enumerate(leaves):
            if isinstance(leaf, (jax.Array, np.ndarray)) or _internals.var_of(leaf) is not None:
                paths.append(torch_pytree.keystr(path))
                values.append(leaf)
            elif isinstance(leaf, jax.core.Tracer):
                raise OutputError(f"{self.entry_name} returned a {type(leaf).__name__} of another trace")
            else:
                static[i] = leaf
        return paths, values, spec, static


def _hides_array(leaf: Any) -> bool:
    if isinstance(leaf, (jax.Array, np.ndarray)) or leaf is None:
        return False
    return any(isinstance(x, (jax.Array, np.ndarray)) for x in jax.tree_util.tree_leaves(leaf))


def _unjit(fn: Any) -> Any:
    """The Python function under `jax.jit(...)`: traced directly, its body is the program."""
    while hasattr(fn, "lower") and hasattr(fn, "trace") and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _code(fn: Any) -> CodeType | None:
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


def _is_wrapper(fn: Any) -> bool:
    """A transformation's wrapper (`jax.grad(f)`): its own code is library code, `f` is user code."""
    return getattr(fn, "__wrapped__", None) is not None and any(
        (fn.__doc__ or "").startswith(words) for words, _ in _TRANSFORMS
    )


def _entry_name(fn: Any) -> str:
    """`f`, `grad_f` for `jax.grad(f)`, `value_and_grad_loss` ...; `fn` for a lambda."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    if "<lambda>" in name:
        name = name.replace("<lambda>", "fn")
    prefix = ""
    wrapped = fn
    while _is_wrapper(wrapped):
        prefix += next(p for words, p in _TRANSFORMS if wrapped.__doc__.startswith(words)) + "_"
        wrapped = wrapped.__wrapped__
    outer, dot, last = name.rpartition(".")
    return outer + dot + prefix + last


def _module_paths(records: list[CallRecord]) -> dict[int, str]:
    """Paths of the torch modules the JAX code ran (through torchax), from the outermost one called."""
    paths: dict[int, str] = {}

    def visit(record: CallRecord, inside: bool) -> None:
        receiver = record.receiver
        is_module = isinstance(receiver, torch.nn.Module)
        if is_module and not inside and id(receiver) not in paths:
            for path, module in receiver.named_modules(remove_duplicate=False):
                paths.setdefault(id(module), path)
        for child in record.children:
            visit(child, inside or is_module)

    for record in records:
        visit(record, False)
    return paths


# -- values inside sub-jaxprs ----------------------------------------------------------------------


def _walk(jaxpr: Any, stack: str = "") -> Iterator[tuple[Any, Any, str]]:
    """Every equation of `jaxpr` and of the jaxprs inside it: `(eqn, the jaxpr holding it, name stack)`."""
    for eqn in jaxpr.eqns:
        name = _join(stack, _internals.name_stack(eqn))
        yield eqn, jaxpr, name
        for inner in _internals.sub_jaxprs(eqn):
            yield from _walk(inner, name)


def _join(outer: str, inner: str) -> str:
    return f"{outer}/{inner}" if outer and inner else outer or inner


def _inner_origins(trace: Trace, records: list[CallRecord], is_user_file: Callable[[str], bool]) -> None:
    """Origins for the values of sub-jaxprs: the local they were bound to in the body function (a
    scan's `layer(x, params)`); in a body JAX rewrote (differentiated, partially evaluated), the
    local bound on the same line to a value of the same type."""
    bound: dict[Any, tuple[str, str]] = {}
    by_line: dict[tuple[str, int, tuple, Any], str] = {}
    for record in records:
        for call in record.walk():
            for name, var in call.args:
                if "[" not in name and "." not in name:
                    bound.setdefault(var, (name, call.qualname))
            for name, line, var in call.bindings:
                bound.setdefault(var, (name, call.qualname))
                aval = getattr(var, "aval", None)
                if aval is not None:
                    by_line.setdefault((call.code.co_filename, line, aval.shape, aval.dtype), name)
    sources = SourceIndex()
    user_code: dict[int, bool] = {}
    scopes: dict[int, list[tuple[Any, Site | None, str, bool]]] = {}
    named_scopes: set[int] = set()
    for index, outer in enumerate(trace.jaxpr.jaxpr.eqns):
        function = trace.eqn_calls[index].function
        for inner in _internals.sub_jaxprs(outer):
            for var in inner.invars:
                if var in bound:
                    name, where = bound[var]
                    trace.origins[var] = Origin("arg", where, None, name, None)
                    named_scopes.add(id(inner))
            for eqn, scope, stack in _walk(inner, _internals.name_stack(outer)):
                site = _innermost_user_site(eqn, is_user_file, user_code, sources)
                for var in eqn.outvars:
                    where = bound[var][1] if var in bound else function
                    named_scopes.update([id(scope)] if var in bound else [])
                    scopes.setdefault(id(scope), []).append((var, site, where, _is_backward(stack)))
                for sub in _internals.sub_jaxprs(eqn):
                    for var in sub.invars:
                        if var in bound:
                            name, where = bound[var]
                            trace.origins.setdefault(var, Origin("arg", where, None, name, None))
                            named_scopes.add(id(sub))
    for scope, values in scopes.items():
        for var, site, function, backward in values:
            name = bound[var][0] if var in bound else None
            if name is None and scope not in named_scopes and not backward and site is not None:
                aval = var.aval
                name = by_line.get((site.file, site.line, aval.shape, aval.dtype)) or by_line.get(
                    (site.file, site.end_line, aval.shape, aval.dtype)
                )
            trace.origins.setdefault(var, Origin("op", function, None, name, site))


# -- the backward pass -----------------------------------------------------------------------------


def _gradients(trace: Trace) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Each value a backward pass made -> the forward value it is the gradient of (None if unsure);
    and each forward value only the backward pass reads -> the value its expression computes.

    JAX keeps each equation's source through transposition: the backward of ``jnp.sin(x)``
    points at ``jnp.sin(x)`` still, and what it computes is the gradient of one of that
    expression's operands: the one of its type that the backward equation does not itself
    read (``d(a * b)/da`` reads ``b``). A step the backward of an expression takes on the way
    (read only by more of that expression's backward) is the gradient of nothing named: None.
    """
    top = trace.jaxpr.jaxpr
    forward: dict[Site, list[tuple[int, Any]]] = {}
    scopes: dict[int, tuple[Any, list[tuple[Any, Site | None, bool]]]] = {id(top): (top, [])}
    instance: dict[int, int] = {}  # equation -> the call (or sub-jaxpr) it ran in
    for index, eqn in enumerate(top.eqns):
        stack = _internals.name_stack(eqn)
        scopes[id(top)][1].append((eqn, trace.eqn_sites[index], _is_backward(stack)))
        instance[id(eqn)] = id(trace.eqn_calls[index])
        inner_eqns = (item for sub in _internals.sub_jaxprs(eqn) for item in _walk(sub, stack))
        for inner_eqn, scope, inner_stack in inner_eqns:
            origin = next((trace.origins[v] for v in inner_eqn.outvars if v in trace.origins), None)
            entry = (inner_eqn, origin.site if origin is not None else None, _is_backward(inner_stack))
            scopes.setdefault(id(scope), (scope, []))[1].append(entry)
            instance[id(inner_eqn)] = id(scope)
    for _jaxpr, entries in scopes.values():
        for eqn, site, backward in entries:
            if not backward and site is not None:
                forward.setdefault(site, []).append((instance[id(eqn)], eqn))
    result: dict[Any, Any] = {}
    factors: dict[Any, Any] = {}
    for jaxpr, entries in scopes.values():
        readers: dict[Any, list[tuple[Site | None, bool]]] = {}
        for eqn, site, backward in entries:
            for v in eqn.invars:
                if isinstance(v, _internals.Var):
                    readers.setdefault(v, []).append((site, backward))
        for v in jaxpr.outvars:
            if isinstance(v, _internals.Var):
                readers.setdefault(v, []).append((None, False))
        made_by = {v: (eqn, site, backward) for eqn, site, backward in entries for v in eqn.outvars}
        for eqn, site, backward in entries:
            if backward:
                reads = _reads(eqn, site, made_by)
                near = _forward_values(eqn, made_by)
                candidates = forward.get(site, []) if site is not None else []
                at_site = _forward_instance(candidates, near, made_by, instance)
                _name_cotangents(eqn, site, at_site, readers, reads, result)
        _derivative_factors(entries, readers, factors)
    return result, factors


def _derivative_factors(entries: list, readers: dict[Any, list], factors: dict[Any, Any]) -> None:
    """Forward values of an expression that only its backward reads (`jax.grad` computes `2.0 * x`
    beside `x ** 2`) -> the value the expression itself computes (the one the forward reads on)."""
    by_site: dict[Site, list[Any]] = {}
    for eqn, site, backward in entries:
        if not backward and site is not None and not _internals.sub_jaxprs(eqn):  # a loop's are its residuals
            by_site.setdefault(site, []).extend(v for v in eqn.outvars if type(v) is _internals.Var)
    for values in by_site.values():
        primal = [v for v in values if any(not backward for _, backward in readers.get(v, []))]
        if not primal:
            continue
        for v in values:
            uses = readers.get(v, [])
            if uses and all(backward for _, backward in uses):
                factors[v] = primal[-1]


def _is_backward(stack: str) -> bool:
    return _BACKWARD in stack and _RECOMPUTED not in stack


def _reads(eqn: Any, site: Site | None, made_by: dict[Any, tuple[Any, Site | None, bool]]) -> set[Any]:
    """What a backward equation reads, and what the earlier backward steps of its expression read."""
    reads: set[Any] = set()
    stack = [v for v in eqn.invars if isinstance(v, _internals.Var)]
    while stack:
        v = stack.pop()
        if v in reads:
            continue
        reads.add(v)
        producer = made_by.get(v)
        if producer is not None and producer[2] and producer[1] == site:
            stack.extend(u for u in producer[0].invars if isinstance(u, _internals.Var))
    return reads


def _forward_values(eqn: Any, made_by: dict[Any, tuple[Any, Site | None, bool]], limit: int = 64) -> list:
    """The forward values a backward equation depends on, nearest first (through earlier backward steps)."""
    found: list[Any] = []
    seen: set[Any] = set()
    queue = [v for v in eqn.invars if isinstance(v, _internals.Var)]
    while queue and len(seen) < limit:
        v = queue.pop(0)
        if v in seen:
            continue
        seen.add(v)
        producer = made_by.get(v)
        if producer is None or not producer[2]:
            found.append(v)
        else:
            queue.extend(u for u in producer[0].invars if isinstance(u, _internals.Var))
    return found


def _name_cotangents(
    eqn: Any, site: Site | None, at_site: list[Any], readers: dict[Any, list], reads: set[Any],
    result: dict[Any, Any],
) -> None:
    outside, inside = _operands(at_site)
    taken: set[Any] = set()
    for var in eqn.outvars:
        if type(var) is not _internals.Var:
            continue  # a dropped output
        uses = readers.get(var, [])
        if site is not None and uses and all(s == site and backward for s, backward in uses):
            result[var] = None  # a step on the way to the expression's operands' gradients
            continue
        # The expression's operands first; a step inside it only when none fits.
        same = [v for v in outside if _same_type(v, var)] or [v for v in inside if _same_type(v, var)]
        if len(same) > 1:
            same = [v for v in same if v not in reads] or same
        # Several gradients out of one equation (a loop's) follow its operands' order.
        fresh = [v for v in same if v not in taken] or same
        result[var] = fresh[0] if fresh else None
        taken.add(result[var])


def _forward_instance(
    eqns: list[tuple[int, Any]], near: list[Any], made_by: dict[Any, tuple], instance: dict[int, int]
) -> list[Any]:
    """The forward equations of an expression in the call a backward equation differentiates: the
    expression ran once per call (a block per layer), and the backward depends on that call's
    values (`near`, nearest first): ones the expression read (`x` of `x @ w`), else ones made
    in the same call (a bias's gradient depends on nothing the expression itself read)."""
    calls: dict[int, list[Any]] = {}
    for call, eqn in eqns:
        calls.setdefault(call, []).append(eqn)
    if len(calls) < 2:
        return [eqn for _, eqn in eqns]
    read = {
        call: {v for e in members for v in e.invars if isinstance(v, _internals.Var)}
        for call, members in calls.items()
    }
    for v in near:
        for call, values in read.items():
            if v in values:
                return calls[call]
    for v in near:
        call = instance.get(id(made_by[v][0])) if v in made_by else None
        if call in calls:
            return calls[call]
    return [eqn for _, eqn in eqns]


def _operands(eqns: list[Any]) -> tuple[list[Any], list[Any]]:
    """What an expression's equations read that they did not make (in order), and what they made
    and read again themselves (its intermediate steps)."""
    made = {v for eqn in eqns for v in eqn.outvars}
    outside: dict[Any, None] = {}
    inside: dict[Any, None] = {}
    for eqn in eqns:
        for v in eqn.invars:
            if isinstance(v, _internals.Var):
                (inside if v in made else outside).setdefault(v)
    return list(outside), list(inside)


def _same_type(a: Any, b: Any) -> bool:
    return a.aval.shape == b.aval.shape and a.aval.dtype == b.aval.dtype


def _custom_jvp_rules(jaxpr: Any) -> dict[int, Any]:
    """The JVP rule of every `jax.custom_jvp` function called, by its equation's rule param."""
    rules = {}
    for eqn, _scope, _stack in _walk(jaxpr):
        if eqn.primitive.name == "custom_jvp_call":
            rule = _internals.custom_jvp_rule(eqn)
            if rule is not None:
                rules[id(eqn.params["jvp_jaxpr_fun"])] = rule
    return rules
