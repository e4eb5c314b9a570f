"""From what a capture recorded (the jaxpr, the call records, the returned value) to a complete `Trace`.

Everything the `Trace` holds is computed here, once: each equation's source site and call, the
call tree with each call's data flow, every value's origin, and for JAX programs the origins
inside sub-jaxprs and the backward pass's gradients. The `Trace` is built last and never
changed afterwards.
"""

from __future__ import annotations

import bisect
import collections
import functools
import keyword
from collections.abc import Callable, Mapping
from typing import Any

import torch

from jaxside.tracing import _internals
from jaxside.tracing._frames import CallRecord, is_number
from jaxside.tracing._gradients import custom_jvp_rules, gradients
from jaxside.tracing._jaxprs import is_backward, walk
from jaxside.tracing._session import Entry, Returned
from jaxside.tracing._source import SourceIndex
from jaxside.tracing.trace import Call, Input, Origin, Seen, Site, StateUpdate, Trace


def assemble(
    entry: Entry, closed: Any, records: list[CallRecord], emitted: list[Any], returned: Returned
) -> Trace:
    """The `Trace` of one capture: `closed` the ClosedJaxpr, `records` the recorder's root calls,
    `emitted` the output vars of each equation in emission order."""
    jaxpr = closed.jaxpr
    sources = SourceIndex()
    positions, sites = _places(jaxpr, emitted, entry.is_user_file, sources)
    module_paths = returned.module_paths
    views = returned.views

    def to_call(record: CallRecord) -> Call:
        receiver = record.receiver
        is_module = isinstance(receiver, torch.nn.Module)
        return Call(
            function=record.qualname,
            file=record.code.co_filename,
            line=record.code.co_firstlineno,
            module_path=module_paths.get(id(receiver)) if is_module else None,
            module_type=type(receiver).__name__ if is_module else None,
            args=list(record.args),
            returned=list(record.returned),
            seen=_seen(record, views),
            children=[to_call(child) for child in record.children],
            call_site=sources.site(*record.caller) if record.caller else None,
            raised=record.raised,
        )

    spans: dict[Any, Any] = {}
    if len(records) == 1 and records[0].code is entry.code:
        root = to_call(records[0])
        pairs = [(root, records[0])]
    else:
        root = Call(
            function=entry.name, file=entry.file, line=entry.line, children=[to_call(r) for r in records]
        )
        pairs = list(zip(root.children, records))
    _spans(pairs, spans)

    eqn_calls = _innermost_calls(root, positions, spans)

    inputs = [Input(var, kind, name) for var, (kind, name) in zip(jaxpr.invars, entry.inputs)]
    n_out = len(returned.paths)
    outputs = list(zip(returned.paths, jaxpr.outvars[:n_out]))
    state = [StateUpdate(inputs[i], var) for i, var in zip(returned.mutated, jaxpr.outvars[n_out:])]
    _dataflow(root, jaxpr, eqn_calls)
    origins = _origins(root, jaxpr, inputs, sites, eqn_calls, entry.name)
    jax_parts: dict[str, Any] = {}
    if entry.frontend == "jax":  # what a JAX program adds: its own sub-jaxprs, its gradients
        _inner_origins(origins, jaxpr, eqn_calls, records, entry.is_user_file, sources)
        grads, derivatives = gradients(jaxpr, sites, eqn_calls, origins)
        jax_parts = dict(gradients=grads, derivatives=derivatives, custom_jvp_rules=custom_jvp_rules(jaxpr))
    return Trace(
        jaxpr=closed, inputs=inputs, outputs=outputs, out_tree=returned.spec,
        static_outputs=returned.static, state=state, root=root, origins=origins,
        eqn_sites=sites, eqn_calls=eqn_calls, entry=entry.name, frontend=entry.frontend, **jax_parts,
    )


def _places(
    jaxpr: Any, emitted: list[Any], is_user_file: Callable[[str], bool], sources: SourceIndex
) -> tuple[list[int], list[Site | None]]:
    """Each equation's place in emission order, and its innermost user-code expression."""
    emitted_index: dict[Any, int] = {}
    for index, outvars in enumerate(emitted):
        for var in outvars or ():
            emitted_index[var] = index
    positions: list[int] = []
    sites: list[Site | None] = []
    user_code: dict[int, bool] = {}  # by id: hashing a code object is slow; the jaxpr keeps them alive
    by_traceback: dict[int, Site | None] = {}  # equations a retrace replayed share their template's
    position = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:  # the first the capture saw emitted; else the place of the one before
            if (found := emitted_index.get(var)) is not None:
                position = found
                break
        positions.append(position)
        traceback = id(_internals.traceback_of(eqn))
        if traceback not in by_traceback:
            by_traceback[traceback] = _innermost_user_site(eqn, is_user_file, user_code, sources)
        sites.append(by_traceback[traceback])
    return positions, sites


def _seen(record: CallRecord, views: Mapping[int, tuple[object, Any]]) -> Seen:
    """What the frame hook saw in the call `record` is: its bindings (views resolved to the vars
    they materialized to), its numbers, the numbers a module's `self` held, and the lines it ran."""
    receiver = record.receiver
    attributes = _attributes(receiver) if isinstance(receiver, torch.nn.Module) else {}
    return Seen(_resolved(record.bindings, views), list(record.numbers), attributes, frozenset(record.lines))


def _resolved(
    bindings: list[tuple[str, int, Any]], views: Mapping[int, tuple[object, Any]]
) -> list[tuple[str, int, Any]]:
    """Bindings with each torchax view replaced by the var it materialized to (dropped if unused)."""
    out = []
    for name, line, key in bindings:
        if isinstance(key, _internals.TorchaxView):
            key = views.get(id(key), (None, None))[1]
        if key is not None:
            out.append((name, line, key))
    return out


def _attributes(receiver: torch.nn.Module) -> dict[str, Any]:
    """The module's numbers by attribute path: its own (`n_head`, `eps`, `split_sizes`), those of
    a plain object it keeps (`config.num_attention_heads`), of its children (`ln_1.eps`) and of
    the children of torch's containers among them (`downsample.1.eps`); never tensors or bools."""
    found: dict[str, Any] = {}
    for name, value in vars(receiver).items():
        if type(value) in _NO_NUMBERS:
            continue
        if is_number(value):
            found[name] = value
        elif not isinstance(value, (torch.nn.Module, torch.Tensor, type)):
            try:
                inner = dict(vars(value))
            except Exception:  # no `__dict__` (or an odd `__getattr__`): nothing of it is read by path
                continue
            found.update({f"{name}.{k}": v for k, v in inner.items() if is_number(v)})
    for name, child in receiver._modules.items():  # a child's, which library code may read (`ln_1.eps`)
        if child is not None:
            found.update(_numbers_below(name, child, depth=2))
    # Only paths code can name (`setattr(self, "a-b", 3)` makes a key no source reads as `self.a-b`).
    return {path: v for path, v in found.items() if _nameable(path)}


_NO_NUMBERS = frozenset({bool, str, type(None), dict, collections.OrderedDict, set, frozenset})
"""Types whose values are no number and keep none by attribute (a module's own `_parameters`,
`_forward_hooks`, `training`, ...): passed over without asking."""


def _numbers_below(path: str, module: torch.nn.Module, depth: int) -> dict[str, Any]:
    """A child's numbers (`ln_1.eps`) and, where it is torch's own module, its children's, which
    its code reads out of sight (`downsample.1.eps` of a `Sequential(conv, norm)`), `depth` deep."""
    found = {f"{path}.{k}": v for k, v in vars(module).items() if is_number(v)}
    if depth and type(module).__module__.startswith("torch.nn."):
        for name, child in module._modules.items():
            if child is not None:
                found.update(_numbers_below(f"{path}.{name}", child, depth - 1))
    return found


@functools.lru_cache(maxsize=4096)  # the same attribute paths in every layer
def _nameable(path: str) -> bool:
    """Attribute names, and ASCII positions of numbered children before the last (`0.eps`)."""
    *parents, last = path.split(".")
    positions = all(_attribute(part) or (part.isascii() and part.isdecimal()) for part in parents)
    return positions and _attribute(last)


def _attribute(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _spans(pairs: list[tuple[Call, CallRecord]], spans: dict[Any, Any]) -> None:
    for call, record in pairs:
        spans[id(call)] = (record.start, record.end)
        _spans(list(zip(call.children, record.children)), spans)


def _child_holding(call: Call, position: int, spans: dict[Any, Any]) -> Call | None:
    """The child of `call` whose span holds `position`: a bisection, as siblings run one after another."""
    starts, ends, ordered = _layout(call, spans)
    if not ordered:  # never seen; kept exact all the same
        return next((c for c, s, e in zip(call.children, starts, ends) if s <= position < e), None)
    i = bisect.bisect_right(starts, position) - 1
    return call.children[i] if i >= 0 and position < ends[i] else None


def _layout(call: Call, spans: dict[Any, Any]) -> tuple[list[int], list[int], bool]:
    """Where `call`'s children start and end, and whether each ends before the next starts."""
    layout: tuple[list[int], list[int], bool] | None = spans.get(("children", id(call)))
    if layout is None:
        starts = [spans[id(c)][0] for c in call.children]
        ends = [spans[id(c)][1] for c in call.children]
        ordered = all(ends[i] <= starts[i + 1] for i in range(len(starts) - 1))
        layout = spans[("children", id(call))] = (starts, ends, ordered)
    return layout


def _holds(call: Call, spans: dict[Any, Any]) -> bool:
    """Whether `call`'s span holds each of its children's (the root made up for a function has none)."""
    if id(call) not in spans:
        return True
    start, end = spans[id(call)]
    starts, ends, _ = _layout(call, spans)
    return bool(start <= min(starts) and max(ends) <= end)


def _innermost_calls(root: Call, positions: list[int], spans: dict[Any, Any]) -> list[Call]:
    """Each equation's call: the innermost whose span holds its position (the root if none does).

    Equations come in program order, mostly in the call of the one before: the search starts from
    the calls that held the last one and still hold this one, not from the root each time (where
    siblings overlap or a call outlasts its caller, never seen, from the root all the same)."""
    ordered = all(_layout(call, spans)[2] and _holds(call, spans) for call in root.walk() if call.children)
    eqn_calls: list[Call] = []
    path = [root]
    for index, position in enumerate(positions):
        if not ordered:
            del path[1:]
        while len(path) > 1:
            start, end = spans[id(path[-1])]
            if start <= position < end:
                break
            path.pop()
        call = path[-1]
        while call.children and (inner := _child_holding(call, position, spans)) is not None:
            call = inner
            path.append(call)
        call.eqns.append(index)
        eqn_calls.append(call)
    return eqn_calls


def _innermost_user_site(
    eqn: Any, is_user_file: Callable[[str], bool], user_code: dict[int, bool], sources: SourceIndex
) -> Site | None:
    codes, lastis = _internals.raw_frames(eqn)
    # Dozens of library frames sit above the user frame: decide them in C, not a Python loop.
    ids = list(map(id, codes))
    flags = list(map(user_code.get, ids))
    if None in flags:
        for code, key, flag in zip(codes, ids, flags):
            if flag is None:
                user_code[key] = is_user_file(code.co_filename)
        flags = list(map(user_code.get, ids))
    try:
        i = flags.index(True)
    except ValueError:
        return None
    return sources.site(codes[i], lastis[i])


def _dataflow(root: Call, jaxpr: Any, eqn_calls: list[Call]) -> None:
    """Fill each call's `inputs` (read, made outside) and `outputs` (made inside, used after).

    A value crosses only the calls between the one that made it and the one that read it, below
    the innermost call holding both; most are read where they were made, and cross none. Each
    call's inputs come in the order it first read them, its outputs in the order it made them."""
    parents: dict[int, Call | None] = {id(root): None}
    depths: dict[int, int] = {id(root): 0}
    calls = list(root.walk())
    for call in calls:
        for child in call.children:
            parents[id(child)], depths[id(child)] = call, depths[id(call)] + 1
    read: dict[int, dict[Any, None]] = {id(call): {} for call in calls}
    maker: dict[Any, Call] = {}
    above: dict[Any, int] = {}  # a value's shallowest reader outside its maker: that common call's depth
    var_type = _internals.Var
    for index, eqn in enumerate(jaxpr.eqns):
        call = eqn_calls[index]
        for var in eqn.invars:
            made = maker.get(var) if isinstance(var, var_type) else call
            if made is call:
                continue
            common = _common(made, call, parents, depths)
            scope: Call | None = call
            while scope is not common and scope is not None:
                read[id(scope)].setdefault(var)
                scope = parents[id(scope)]
            if made is not None and common is not None:
                above[var] = min(above.get(var, depths[id(common)]), depths[id(common)])
        for var in eqn.outvars:
            maker[var] = call
    for var in jaxpr.outvars:
        if isinstance(var, var_type):
            above[var] = -1  # a program output leaves every call that made it
    made_here: dict[int, list[Any]] = {id(call): [] for call in calls}
    for index, eqn in enumerate(jaxpr.eqns):
        for var in eqn.outvars:
            depth = above.get(var, len(depths))  # (read nowhere outside the call that made it)
            scope = eqn_calls[index]
            while scope is not None and depths[id(scope)] > depth:
                made_here[id(scope)].append(var)
                scope = parents[id(scope)]
    for call in calls:
        call.inputs = list(read[id(call)])
        call.outputs = made_here[id(call)]


def _common(
    a: Call | None, b: Call, parents: dict[int, Call | None], depths: dict[int, int]
) -> Call | None:
    """The innermost call holding both `a` and `b` (None: `a` is None, made outside every call)."""
    x: Call | None = a
    y: Call | None = b
    while x is not None and y is not None and x is not y:
        if depths[id(x)] >= depths[id(y)]:
            x = parents[id(x)]
        else:
            y = parents[id(y)]
    return x if x is y else None


def _origins(
    root: Call, jaxpr: Any, inputs: list[Input], sites: list[Site | None], eqn_calls: list[Call],
    entry: str,
) -> dict[Any, Origin]:
    parents: dict[int, Call | None] = {id(root): None}
    names: dict[tuple[int, Any], str] = {}
    for call in root.walk():
        for child in call.children:
            parents[id(child)] = call
        for name, _line, var in call.seen.bindings:
            names.setdefault((id(call), var), name)
    origins: dict[Any, Origin] = {}
    for item in inputs:
        origins[item.var] = Origin(item.kind, entry, None, item.name, None)
    for var in jaxpr.constvars:
        origins[var] = Origin("const", entry)
    bound = {var for _, var in names}  # most vars were never bound to a local: skip the walk up
    for index, eqn in enumerate(jaxpr.eqns):
        call = eqn_calls[index]
        for var in eqn.outvars:
            local: str | None = None
            scope: Call | None = call
            while var in bound and scope is not None and local is None:
                local = names.get((id(scope), var))
                scope = parents[id(scope)]
            origins[var] = Origin("op", call.function, call.module_path, local, sites[index])
    return origins


def _inner_origins(
    origins: dict[Any, Origin], jaxpr: Any, eqn_calls: list[Call], records: list[CallRecord],
    is_user_file: Callable[[str], bool], sources: SourceIndex,
) -> None:
    """Add origins for the values of sub-jaxprs: the local they were bound to in the body function
    (a scan's `layer(x, params)`); in a body JAX rewrote (differentiated, partially evaluated),
    the local bound on the same line to a value of the same type."""
    bound: dict[Any, tuple[str, str]] = {}
    by_line: dict[tuple[str, int, tuple[Any, ...], Any], str] = {}
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
    user_code: dict[int, bool] = {}
    scopes: dict[int, list[tuple[Any, Site | None, str, bool]]] = {}
    named_scopes: set[int] = set()
    for index, outer in enumerate(jaxpr.eqns):
        function = eqn_calls[index].function
        for inner in _internals.sub_jaxprs(outer):
            for var in inner.invars:
                if var in bound:
                    name, where = bound[var]
                    origins[var] = Origin("arg", where, None, name, None)
                    named_scopes.add(id(inner))
            for eqn, scope, stack in walk(inner, _internals.name_stack(outer)):
                site = _innermost_user_site(eqn, is_user_file, user_code, sources)
                for var in eqn.outvars:
                    where = bound[var][1] if var in bound else function
                    named_scopes.update([id(scope)] if var in bound else [])
                    scopes.setdefault(id(scope), []).append((var, site, where, is_backward(stack)))
                for sub in _internals.sub_jaxprs(eqn):
                    for var in sub.invars:
                        if var in bound:
                            name, where = bound[var]
                            origins.setdefault(var, Origin("arg", where, None, name, None))
                            named_scopes.add(id(sub))
    for scope, values in scopes.items():
        for var, site, function, backward in values:
            local = bound[var][0] if var in bound else None
            if local is None and scope not in named_scopes and not backward and site is not None:
                aval = var.aval
                local = by_line.get((site.file, site.line, aval.shape, aval.dtype)) or by_line.get(
                    (site.file, site.end_line, aval.shape, aval.dtype)
                )
            origins.setdefault(var, Origin("op", function, None, local, site))
