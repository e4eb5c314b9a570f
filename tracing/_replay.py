"""A retrace's repeated module calls emitted again from the first one's equations, torch not run.

A retrace (`Capture(like=trace)`, traced at other sizes) runs the entry as any capture does, with
`torch.nn.Module.__call__` intercepted. The first call of a *template key* runs normally and is
recorded: its equations, which of its argument leaves and module state each outside input is, what
it returned and updated in place, and the user calls it made. A later call with the same key emits
those equations again on its own inputs (same primitives, params, source info: the sites come out
the same), updates its own state, returns the same structure, and its call records are the
template's, moved: the `Trace` is the one a full run gives, for a fraction of the time.

The key is strict; a call that is not provably equivalent runs normally. Same module class and
`forward`, arguments alike (structure, tensor types, plain values of plain types only), module
subtree alike (class, state names, shapes, dtypes, numbers by value, other objects by identity, no
hooks, no module shared outside it), and the base trace (`like`) shows both calls alike
(`tracing._repeats`). A template is kept only if its equations read nothing but its arguments and
its own state (no global tensor, no constant, no random key), have no effects, it left its
arguments and its Python attributes as they were, and every value its records name was made in it.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.utils._pytree as torch_pytree

from jaxside.tracing import _internals
from jaxside.tracing._frames import CallRecord, Probe, Recorder
from jaxside.tracing._repeats import Repeats, repeats_of
from jaxside.tracing.trace import Trace

StateOf = Callable[[torch.nn.Module], Iterable[tuple[str, torch.Tensor]]]
"""A module's plain tensor attributes by path (its params and buffers are added)."""

_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device)
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


class _Hooked:
    """A module's own `__call__`, run with the frame hook `hook` (None: there is none to turn on)."""

    def __init__(self, original: Callable[..., Any], hook: Any) -> None:
        self.original, self.hook = original, hook

    def __call__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if self.hook is None:
            return self.original(module, *args, **kwargs)
        sys.settrace(self.hook)
        try:
            return self.original(module, *args, **kwargs)
        finally:
            sys.settrace(None)


@dataclass
class _Call:
    """One intercepted call, as its key sees it."""

    module: torch.nn.Module
    leaves: list[Any]
    spec: Any
    state: list[tuple[str, torch.Tensor]]
    paths: dict[int, str]
    """`id` of each module of the subtree -> its path relative to `module`."""


@dataclass
class _Template:
    """A recorded call, to replay."""

    eqns: list[Any]
    reads: list[list[tuple[bool, Any]]]
    """Each equation's inputs: `(True, tracer)` a literal's, as it is; `(False, var)` a value's."""
    sources: dict[Any, list[tuple[str, Any]]]
    """Each outside input var -> where the call had it: `("arg", leaf index)`, `("state", name)`."""
    outputs: list[tuple[str, Any]]
    """Each leaf of the return value: `("arg", i)`, `("state", name)`, `("var", var)`, `("value", v)`."""
    spec: Any
    mutated: list[tuple[str, Any]]
    """State updated in place: its name, the var of its new value."""
    records: list[CallRecord]
    start: int
    paths: dict[int, str]
    """`id` of each module of the template's subtree -> its relative path."""
    resolved: dict[int, Any]
    """`id` of each lazy view the records name -> the var it materialized to."""
    nested: dict[str, int] = field(default_factory=dict)
    """Module calls made inside, by relative path: the occurrence counts go on as if they ran."""


class Replayer:
    """The interception of module calls for one retrace."""

    def __init__(
        self, like: Trace, recorder: Recorder, probe: Probe, views: Mapping[int, tuple[object, Any]],
        root: torch.nn.Module | None, module_paths: dict[int, str], env: Any, state_of: StateOf,
    ) -> None:
        self.repeats: Repeats = repeats_of(like)
        self.recorder = recorder
        self.probe = probe
        self.views = views
        self.module_paths = module_paths
        self.env = env
        self.state_of = state_of
        self.templates: dict[Hashable, _Template | None] = {}
        self.counts: dict[int, int] = {}
        self.recording: list[dict[int, int]] = []
        self.shared = _shared_modules(root)

    def call(self, original: Callable[..., Any], module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        occurrence = self.counts.get(id(module), 0)
        self.counts[id(module)] = occurrence + 1
        if self.recording:
            nested = self.recording[-1]
            nested[id(module)] = nested.get(id(module), 0) + 1
            return original(module, *args, **kwargs)
        # The replayer's own work runs with the frame hook off: under settrace (3.11) the hook is
        # called for every frame, doubling the cost of what runs here, and none of it is the
        # user's (a full run does not run it at all). The module's own code runs with it on.
        hook = sys.gettrace()
        if hook is not None:
            sys.settrace(None)
        try:
            return self._call(_Hooked(original, hook), module, occurrence, args, kwargs)
        finally:
            if hook is not None:
                sys.settrace(hook)

    def _call(
        self, original: _Hooked, module: torch.nn.Module, occurrence: int, args: Any, kwargs: Any
    ) -> Any:
        trace = _internals.current_trace(getattr(self.probe, "frame", None))  # (`_probe.Probe`'s)
        seen = self._seen(module, occurrence, args, kwargs, trace)
        if seen is None:
            return original(module, *args, **kwargs)
        key, call = seen
        if key not in self.templates:
            return self._record(key, call, trace, original, args, kwargs)
        template = self.templates[key]
        if template is None or not _inputs_fit(template, call):
            return original(module, *args, **kwargs)
        return self._replay(template, call, trace)

    def _seen(
        self, module: torch.nn.Module, occurrence: int, args: Any, kwargs: Any, trace: Any
    ) -> tuple[Hashable, _Call] | None:
        """The template key of this call, and the call; None where it is not to be replayed."""
        path = self.module_paths.get(id(module))
        if trace is None or path is None or "forward" in vars(module):
            return None
        forward = inspect.unwrap(type(module).forward)
        code = getattr(forward, "__code__", None)
        kind = self.repeats.kind(path, occurrence, code) if code is not None else None
        if kind is None:
            return None
        leaves, spec = torch_pytree.tree_flatten((args, kwargs))
        paths = {id(sub): name for name, sub in module.named_modules(remove_duplicate=False)}
        if any(id(sub) in self.shared for sub in module.modules()) or _hooked(module):
            return None
        state = self._state(module)
        described = [_describe(leaf, trace) for leaf in leaves]
        tensors = [_describe(tensor, trace) for _, tensor in state]
        if None in described or None in tensors:
            return None
        ties = [next(i for i, (_, t) in enumerate(state) if t is tensor) for _, tensor in state]
        key = (kind, type(module), code, repr(spec), tuple(described), tuple(n for n, _ in state),
               tuple(tensors), tuple(ties), _attributes(module))
        return key, _Call(module, leaves, spec, state, paths)

    def _record(
        self, key: Hashable, call: _Call, trace: Any, original: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        probe = self.probe
        siblings = self.recorder.siblings()
        before = (len(siblings), probe.watermark(), _attributes(call.module), _internals.random_key(self.env))
        arg_vars = [_internals.var_of(leaf) for leaf in call.leaves]
        state_vars = [_internals.var_of(tensor) for _, tensor in call.state]
        self.recording.append({})
        try:
            out = original(call.module, *args, **kwargs)
        finally:
            nested = self.recording.pop()
        template = None
        leaves, spec = torch_pytree.tree_flatten((args, kwargs))  # a list argument appended to?
        state = self._state(call.module)  # a tensor attribute set anew?
        unchanged = (
            repr(spec) == repr(call.spec) and len(leaves) == len(call.leaves)
            and all(a is b for a, b in zip(leaves, call.leaves))
            and [_internals.var_of(leaf) for leaf in call.leaves] == arg_vars
            and _attributes(call.module) == before[2] and _internals.random_key(self.env) is before[3]
            and len(state) == len(call.state) and all(a is b for (_, a), (_, b) in zip(call.state, state))
        )
        if unchanged and siblings is self.recorder.siblings():
            template = self._template(call, trace, out, before[1], siblings[before[0]:], state_vars)
        if template is not None:
            template.nested = {call.paths[i]: n for i, n in nested.items() if i in call.paths}
        self.templates[key] = template
        return out

    def _state(self, module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
        return [
            *module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False),
            *self.state_of(module),
        ]

    def _template(
        self, call: _Call, trace: Any, out: Any, start: int, records: list[CallRecord], state_vars: list[Any]
    ) -> _Template | None:
        """What the call just run did, if it can be replayed; else None."""
        frame = trace.frame
        eqns = _internals.recorded_equations(frame, start, _internals.equation_count(frame))
        if eqns is None or not all(_internals.replayable_equation(frame, eqn) for eqn in eqns):
            return None
        sources: dict[Any, list[tuple[str, Any]]] = {}
        for i, leaf in enumerate(call.leaves):
            if isinstance(leaf, _internals.TorchaxTensor):
                sources.setdefault(_internals.var_of(leaf), []).append(("arg", i))
        for (name, _), var in zip(call.state, state_vars):
            sources.setdefault(var, []).append(("state", name))
        made = {var for eqn in eqns for var in eqn.outvars}
        known = made | set(sources)
        for eqn in eqns:
            for tracer in _internals.equation_inputs(eqn):
                if not _internals.is_literal_tracer(tracer) and tracer.val not in known:
                    return None  # reads a value that is neither an argument nor its own state
        outputs = _outputs(out, call, known)
        mutated = [(name, _internals.var_of(tensor)) for (name, tensor), var in zip(call.state, state_vars)
                   if _internals.var_of(tensor) is not var]
        resolved = _resolved(records, self.views, known)
        if outputs is None or resolved is None or any(var not in known for _, var in mutated):
            return None
        if any(r.raised or not _receivers_in(r, call.paths) for r in records):
            return None
        _, spec = torch_pytree.tree_flatten(out)
        reads = [
            [(True, t) if _internals.is_literal_tracer(t) else (False, t.val) for t in inputs]
            for inputs in map(_internals.equation_inputs, eqns)
        ]
        return _Template(
            eqns, reads, sources, outputs, spec, mutated, list(records), start, call.paths, resolved
        )

    def _replay(self, template: _Template, call: _Call, trace: Any) -> Any:
        """The template's equations emitted on this call's inputs; its state updated; its value."""
        env = _inputs(template, call)
        start = self.probe.watermark()
        emit_like = _internals.emit_like
        for eqn, reads in zip(template.eqns, template.reads):
            inputs = [read if literal else env[read] for literal, read in reads]
            env.update(zip(eqn.outvars, emit_like(trace, eqn, inputs)))
        state = dict(call.state)
        for name, var in template.mutated:
            _internals.set_jax_value(state[name], env[var])
        leaves = []
        for kind, where in template.outputs:
            if kind == "arg":
                leaves.append(call.leaves[where])
            elif kind == "state":
                leaves.append(state[where])
            elif kind == "var":
                leaves.append(_internals.wrap(env[where], self.env))
            else:
                leaves.append(where)
        new_vars = {old: tracer.val for old, tracer in env.items()}
        for key, var in template.resolved.items():
            new_vars[key] = new_vars[var]
        here = {path: sub for path, sub in call.module.named_modules(remove_duplicate=False)}
        modules = {i: here[path] for i, path in template.paths.items()}
        shift = start - template.start
        self.recorder.adopt([_moved(r, shift, new_vars, modules) for r in template.records])
        for path, n in template.nested.items():
            self.counts[id(here[path])] = self.counts.get(id(here[path]), 0) + n
        return torch_pytree.tree_unflatten(leaves, template.spec)


def _describe(value: object, trace: Any) -> Hashable | None:
    """A leaf as the key compares it: a traced tensor by its type, a plain value as it is."""
    if isinstance(value, _internals.TorchaxTensor):
        inner = _internals.jax_value(value)
        if type(value) is not _internals.TorchaxTensor or not _internals.traced_here(inner, trace):
            return None
        return ("tensor", getattr(inner, "aval", None))
    if isinstance(value, _PLAIN):
        return ("value", type(value), value)
    return None


def _attributes(module: torch.nn.Module) -> tuple[Hashable, ...]:
    """What the modules of a subtree hold besides tensors and modules: plain values by value,
    tuples and lists of them too, other objects by identity; each module's class."""
    held: list[Hashable] = []
    for path, sub in module.named_modules(remove_duplicate=False):
        held.append((path, type(sub)))
        for name, value in vars(sub).items():
            internal = name in _MODULE_INTERNALS and name != "training"
            if internal or isinstance(value, (torch.Tensor, torch.nn.Module)):
                continue
            held.append((path, name, _held(value)))
    return tuple(held)


def _held(value: object, depth: int = 0) -> Hashable:
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, (tuple, list)) and len(value) <= 64 and depth < 4:
        return (type(value), tuple(_held(item, depth + 1) for item in value))
    return ("object", id(value))


def _hooked(module: torch.nn.Module) -> bool:
    return any(getattr(sub, name, None) for sub in module.modules() for name in _HOOKS)


def _shared_modules(root: torch.nn.Module | None) -> set[int]:
    """Modules reachable by more than one path: calls through one path would count for another."""
    if root is None:
        return set()
    seen: set[int] = set()
    shared: set[int] = set()
    for _, sub in root.named_modules(remove_duplicate=False):
        (shared if id(sub) in seen else seen).add(id(sub))
    return shared


def _outputs(out: Any, call: _Call, known: set[Any]) -> list[tuple[str, Any]] | None:
    """How to rebuild each leaf of the return value on replay; None if one cannot be."""
    by_object: dict[int, tuple[str, Any]] = {
        id(leaf): ("arg", i) for i, leaf in enumerate(call.leaves) if isinstance(leaf, torch.Tensor)
    }
    by_object.update({id(tensor): ("state", name) for name, tensor in call.state})
    outputs: list[tuple[str, Any]] = []
    for leaf in torch_pytree.tree_leaves(out):
        if id(leaf) in by_object:
            outputs.append(by_object[id(leaf)])
        elif type(leaf) is _internals.TorchaxTensor and _internals.var_of(leaf) in known:
            outputs.append(("var", _internals.var_of(leaf)))
        elif isinstance(leaf, _PLAIN):
            outputs.append(("value", leaf))
        else:
            return None
    return outputs


def _resolved(
    records: list[CallRecord], views: Mapping[int, tuple[object, Any]], known: set[Any]
) -> dict[int, Any] | None:
    """The var each lazy view the records name materialized to; None if a name is of a value
    made outside the call, or of a view not materialized inside it."""
    resolved: dict[int, Any] = {}
    for record in records:
        for each in record.walk():
            keys = [key for _, key in each.args] + [key for _, _, key in each.bindings]
            keys += [key for _, key in each.returned]
            for key in keys:
                if isinstance(key, _internals.TorchaxView):
                    var = views.get(id(key), (None, None))[1]
                    if var not in known:
                        return None
                    resolved[id(key)] = var
                elif key not in known:
                    return None
    return resolved


def _receivers_in(record: CallRecord, paths: dict[int, str]) -> bool:
    return all(
        each.receiver is None or (isinstance(each.receiver, torch.nn.Module) and id(each.receiver) in paths)
        for each in record.walk()
    )


def _inputs_fit(template: _Template, call: _Call) -> bool:
    """Whether the outside values the template read are, in this call, one traced value each."""
    state = dict(call.state)
    for where in template.sources.values():
        values = {id(_value(kind, at, call, state)) for kind, at in where}
        if len(values) != 1:
            return False
    return True


def _value(kind: str, where: Any, call: _Call, state: dict[str, torch.Tensor]) -> Any:
    tensor = call.leaves[where] if kind == "arg" else state[where]
    return _internals.jax_value(tensor)


def _inputs(template: _Template, call: _Call) -> dict[Any, Any]:
    state = dict(call.state)
    return {var: _value(*where[0], call, state) for var, where in template.sources.items()}


def _moved(
    record: CallRecord, shift: int, new_vars: dict[Any, Any], modules: dict[int, torch.nn.Module]
) -> CallRecord:
    """A template's call record as the replayed call's: its equations `shift` later, its values and
    modules (`modules`: `id` of the template's -> the replayed call's) the replayed call's."""

    def new(key: Any) -> Any:
        return new_vars[id(key)] if isinstance(key, _internals.TorchaxView) else new_vars[key]

    return replace(
        record,
        receiver=None if record.receiver is None else modules[id(record.receiver)],
        args=[(name, new(key)) for name, key in record.args],
        start=record.start + shift, end=record.end + shift,
        bindings=[(name, line, new(key)) for name, line, key in record.bindings],
        numbers=list(record.numbers),
        returned=[(name, new(key)) for name, key in record.returned],
        children=[_moved(child, shift, new_vars, modules) for child in record.children],
        lines=set(record.lines),
    )


@contextlib.contextmanager
def replaying(
    like: Trace, recorder: Recorder, probe: Probe, views: Mapping[int, tuple[object, Any]],
    root: torch.nn.Module | None, module_paths: dict[int, str], env: Any, state_of: StateOf,
) -> Iterator[Replayer | None]:
    """While open, module calls are intercepted for replay (none where a global module hook is set:
    a replayed call would not run it)."""
    hooks = torch.nn.modules.module
    if any(getattr(hooks, name, None) for name in _GLOBAL_HOOKS):
        yield None
        return
    replayer = Replayer(like, recorder, probe, views, root, module_paths, env, state_of)
    original = torch.nn.Module.__call__

    def intercepted(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return replayer.call(original, module, args, kwargs)

    setattr(torch.nn.Module, "__call__", intercepted)  # noqa: B010  (mypy refuses assigning a method)
    try:
        yield replayer
    finally:
        setattr(torch.nn.Module, "__call__", original)  # noqa: B010
