"""Run torch code under torchax inside `jax.make_jaxpr`, recording where every value came from."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

import jax
import torch
import torch.utils._pytree as torch_pytree

from tracing import _internals
from tracing._frames import DEFAULT_BACKEND, CallRecord, Recorder
from tracing._source import SourceIndex
from tracing.trace import Call, Input, Origin, Site, StateUpdate, Trace

# Never user code, even when asked for: the engines under the user's code, and ourselves.
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (
        os.path.dirname(os.__file__),  # the standard library
        os.path.dirname(torch.__file__),
        os.path.dirname(jax.__file__),
        os.path.dirname(_internals.torchax.__file__),
        *(os.path.join(os.path.dirname(os.path.dirname(__file__)), package)  # jaxside itself
          for package in ("annotate", "tracing", "render")),
    )
)


class CaptureError(Exception):
    """The entry could not be traced; the message says why."""


@dataclass
class Capture:
    """How to capture: which files count as user code, which frame backend, abstract inputs.

    `watch` adds files or directories (paths, or modules whose files count) to the user code
    that is recorded; the files defining the entry (and, for a module, its submodules'
    classes) are always watched. With `abstract`, tensors become `jax.ShapeDtypeStruct`s,
    so a model built on the ``meta`` device is traced without allocating a weight.
    """

    watch: Iterable[str | os.PathLike[str]] = ()
    backend: str = DEFAULT_BACKEND
    abstract: bool = False

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
        return _Session(self, fn, args, kwargs).run()


def capture(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
    """Trace ``fn(*args, **kwargs)`` (a function or an ``nn.Module``) with provenance."""
    return Capture()(fn, *args, **kwargs)


class _Probe:
    """Tells the frame recorder which values are traced tensors, and how far tracing got."""

    def __init__(self) -> None:
        self.frame: Any = None

    def key(self, value: object) -> Hashable | None:
        return _internals.var_of(value)

    def leaves(self, value: object, path: str = "", depth: int = 0) -> list[tuple[str, Hashable]]:
        var = _internals.var_of(value)
        if var is not None:
            return [(path, var)]
        if depth > 3:
            return []
        if isinstance(value, (tuple, list)):
            return [
                leaf for i, item in enumerate(value) for leaf in self.leaves(item, f"{path}[{i}]", depth + 1)
            ]
        if isinstance(value, dict):
            return [
                leaf for k, item in value.items() for leaf in self.leaves(item, f"{path}[{k!r}]", depth + 1)
            ]
        return []

    def watermark(self) -> int:
        return _internals.equation_count(self.frame) if self.frame is not None else 0


@dataclass
class _InputSlot:
    kind: str
    name: str
    tensor: torch.Tensor


class _Session:
    """One capture: inputs gathered, traced once, turned into a `Trace`."""

    def __init__(self, options: Capture, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.options = options
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        if self.module is None and inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
            self.module = fn.__self__
        self.entry_name = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(
            fn, "__qualname__", repr(fn)
        )
        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        self.bound = _bind(target, args, kwargs)
        self.user_file = _user_files(fn, self.module, options.watch)
        self.slots: list[_InputSlot] = []
        self.arg_leaves: dict[str, tuple[list[Any], Any]] = {}
        self.aliases: dict[str, list[str]] = {}
        self._collect_inputs()

    # -- inputs -------------------------------------------------------------------------

    def _collect_inputs(self) -> None:
        if self.module is not None:
            seen: dict[int, str] = {}
            for kind, named in (
                ("param", self.module.named_parameters(remove_duplicate=False)),
                ("buffer", self.module.named_buffers(remove_duplicate=False)),
                ("buffer", _tensor_attributes(self.module)),
            ):
                for name, tensor in named:
                    if id(tensor) in seen:  # tied weights: one input, every alias swapped
                        self.aliases[seen[id(tensor)]].append(name)
                        continue
                    seen[id(tensor)] = name
                    self.aliases[name] = [name]
                    self.slots.append(_InputSlot(kind, name, tensor))
        for name, value in self.bound.arguments.items():
            leaves, spec = torch_pytree.tree_flatten_with_path(value)
            self.arg_leaves[name] = ([leaf for _, leaf in leaves], spec)
            for path, leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    self.slots.append(_InputSlot("arg", name + torch_pytree.keystr(path), leaf))

    def _jax_inputs(self) -> list[Any]:
        values = []
        for slot in self.slots:
            tensor = slot.tensor
            if self.options.abstract or tensor.device.type == "meta":
                dtype = _internals.to_jax_dtype(tensor.dtype)
                values.append(jax.ShapeDtypeStruct(tuple(tensor.shape), dtype))
            else:
                values.append(_internals.to_jax_array(tensor))
        return values

    # -- tracing ------------------------------------------------------------------------

    def run(self) -> Trace:
        env = _internals.torchax.default_env()
        probe = _Probe()
        recorder = Recorder(self.user_file, probe, self.options.backend)
        result: dict[str, Any] = {}

        def traced(*flat: Any) -> list[Any]:
            probe.frame = _internals.current_jaxpr_frame()
            tensors = [_internals.wrap(value, env) for value in flat]
            args, kwargs = self._rebuild_arguments(tensors)
            with contextlib.ExitStack() as stack:
                stack.enter_context(self._swapped_state(tensors))
                stack.enter_context(env)
                stack.enter_context(torch.device("jax"))
                stack.enter_context(recorder)
                out = self.fn(*args, **kwargs)
            result["emitted"] = _internals.emitted_outvars(probe.frame)
            leaves, spec = torch_pytree.tree_flatten_with_path(out)
            outputs, static = [], {}
            for i, (path, leaf) in enumerate(leaves):
                if _internals.var_of(leaf) is not None or isinstance(leaf, _internals.TorchaxTensor):
                    outputs.append((torch_pytree.keystr(path), _internals.jax_value(leaf)))
                else:
                    static[i] = leaf
            mutated = [i for i, (t, v) in enumerate(zip(tensors, flat)) if _internals.jax_value(t) is not v]
            result.update(out_paths=[p for p, _ in outputs], spec=spec, static=static, mutated=mutated)
            return [v for _, v in outputs] + [_internals.jax_value(tensors[i]) for i in mutated]

        closed = jax.make_jaxpr(traced)(*self._jax_inputs())
        return _build_trace(self, closed, recorder, result)

    def _rebuild_arguments(self, tensors: list[Any]) -> tuple[tuple, dict]:
        arg_tensors = iter(t for slot, t in zip(self.slots, tensors) if slot.kind == "arg")
        arguments = {}
        for name, (leaves, spec) in self.arg_leaves.items():
            leaves = [next(arg_tensors) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
            arguments[name] = torch_pytree.tree_unflatten(leaves, spec)
        bound = inspect.BoundArguments(self.bound.signature, arguments)
        return bound.args, bound.kwargs

    @contextlib.contextmanager
    def _swapped_state(self, tensors: list[Any]) -> Iterator[None]:
        """Put the traced tensors where the module keeps its params, buffers and tensor attributes."""
        saved = []
        try:
            for slot, tensor in zip(self.slots, tensors):
                for name in self.aliases.get(slot.name, ()):
                    owner_path, _, attr = name.rpartition(".")
                    owner = self.module.get_submodule(owner_path)
                    for store in (owner._parameters, owner._buffers, owner.__dict__):
                        if attr in store:
                            saved.append((store, attr, store[attr]))
                            store[attr] = tensor
                            break
            yield
        finally:
            for store, attr, value in reversed(saved):
                store[attr] = value


def _bind(target: Callable[..., Any], args: tuple, kwargs: dict) -> inspect.BoundArguments:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        signature = inspect.Signature(
            [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
             inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
        )
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as error:
        name = getattr(target, "__qualname__", repr(target))
        raise CaptureError(f"the inputs do not fit {name}{signature}: {error}") from None


def _tensor_attributes(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Plain tensor attributes (not params or buffers) such as a precomputed RoPE table."""
    for path, sub in module.named_modules(remove_duplicate=False):
        for attr, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                yield (f"{path}.{attr}" if path else attr), value


def _user_files(fn: Any, module: torch.nn.Module | None, watch: Iterable[Any]) -> Callable[[str], bool]:
    """The predicate 'is this file user code': the entry's files plus `watch`, never a library."""
    files: set[str] = set()
    dirs: list[str] = []
    code = getattr(inspect.unwrap(fn), "__code__", None) if not isinstance(fn, torch.nn.Module) else None
    if code is not None:
        files.add(code.co_filename)
    if module is not None:
        for sub in module.modules():
            with contextlib.suppress(TypeError, OSError):
                files.add(inspect.getfile(type(sub)))
    for item in watch:
        module_obj = sys.modules.get(str(item))
        path = Path(module_obj.__file__ if module_obj is not None and module_obj.__file__ else item)
        if path.is_dir():
            dirs.append(str(path.resolve()) + os.sep)
        else:
            files.add(str(path))
    resolved = {str(Path(f).resolve()) for f in files}
    decided: dict[str, bool] = {}

    def is_user_file(filename: str) -> bool:
        try:
            return decided[filename]
        except KeyError:
            pass
        path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
        answer = not path.startswith(_LIBRARY_DIRS) and (
            filename in files or path in resolved or path.startswith(tuple(dirs))
        )
        decided[filename] = answer
        return answer

    return is_user_file


# -- from recorded events to a Trace ---------------------------------------------------------


def _build_trace(session: _Session, closed: Any, recorder: Recorder, result: dict[str, Any]) -> Trace:
    jaxpr = closed.jaxpr
    sources = SourceIndex()
    emitted_index: dict[Any, int] = {}
    for index, outvars in enumerate(result["emitted"]):
        for var in outvars or ():
            emitted_index[var] = index

    # Each equation's place in emission order, and its innermost user-code expression.
    positions: list[int] = []
    sites: list[Site | None] = []
    user_code: dict[CodeType, bool] = {}
    for eqn in jaxpr.eqns:
        previous = positions[-1] if positions else 0
        positions.append(next((emitted_index[v] for v in eqn.outvars if v in emitted_index), previous))
        sites.append(_innermost_user_site(eqn, session.user_file, user_code, sources))

    module_paths = {}
    if session.module is not None:
        module_paths = {id(m): p for p, m in session.module.named_modules(remove_duplicate=False)}

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
            bindings=list(record.bindings),
            children=[to_call(child) for child in record.children],
            call_site=sources.site(*record.caller) if record.caller else None,
            raised=record.raised,
        )

    entry_code = _entry_code(session.fn)
    records = recorder.roots
    spans = {}
    if len(records) == 1 and records[0].code is entry_code:
        root = to_call(records[0])
        spans[id(root)] = (records[0].start, records[0].end)
        pairs = [(root, records[0])]
    else:
        root = Call(function=session.entry_name, file=entry_code.co_filename if entry_code else "",
                    line=entry_code.co_firstlineno if entry_code else 0,
                    children=[to_call(r) for r in records])
        pairs = list(zip(root.children, records))
    _spans(pairs, spans)

    # Each equation goes to the innermost call whose span holds it; the rest to the root.
    eqn_calls: list[Call] = []
    for index, position in enumerate(positions):
        call = root
        while True:
            inner = next((c for c in call.children if spans[id(c)][0] <= position < spans[id(c)][1]), None)
            if inner is None:
                break
            call = inner
        call.eqns.append(index)
        eqn_calls.append(call)

    inputs = [Input(var, slot.kind, slot.name) for var, slot in zip(jaxpr.invars, session.slots)]
    n_out = len(result["out_paths"])
    outputs = list(zip(result["out_paths"], jaxpr.outvars[:n_out]))
    state = [StateUpdate(inputs[i], var) for i, var in zip(result["mutated"], jaxpr.outvars[n_out:])]
    _dataflow(root, jaxpr)
    origins = _origins(root, jaxpr, inputs, sites, eqn_calls, session.entry_name)
    return Trace(
        jaxpr=closed, inputs=inputs, outputs=outputs, out_tree=result["spec"],
        static_outputs=result["static"], state=state, root=root, origins=origins,
        eqn_sites=sites, eqn_calls=eqn_calls, entry=session.entry_name,
    )


def _entry_code(fn: Any) -> CodeType | None:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    return getattr(inspect.unwrap(getattr(target, "__func__", target)), "__code__", None)


def _spans(pairs: list[tuple[Call, CallRecord]], spans: dict[int, tuple[int, int]]) -> None:
    for call, record in pairs:
        spans[id(call)] = (record.start, record.end)
        _spans(list(zip(call.children, record.children)), spans)


def _innermost_user_site(
    eqn: Any, is_user_file: Callable[[str], bool], user_code: dict[CodeType, bool], sources: SourceIndex
) -> Site | None:
    codes, lastis = _internals.raw_frames(eqn)
    for code, lasti in zip(codes, lastis):
        is_user = user_code.get(code)
        if is_user is None:
            is_user = user_code[code] = is_user_file(code.co_filename)
        if is_user:
            return sources.site(code, lasti)
    return None


def _dataflow(root: Call, jaxpr: Any) -> None:
    """Fill each call's `inputs` (read, made outside) and `outputs` (made inside, used after)."""
    uses: dict[Any, list[int]] = {}
    for index, eqn in enumerate(jaxpr.eqns):
        for var in eqn.invars:
            if isinstance(var, _internals.Var):
                uses.setdefault(var, []).append(index)
    program_outputs = {v for v in jaxpr.outvars if isinstance(v, _internals.Var)}
    for call in root.walk():
        own = call.all_eqns()
        own_set = set(own)
        defined: dict[Any, None] = {}
        read: dict[Any, None] = {}
        for index in own:
            eqn = jaxpr.eqns[index]
            for var in eqn.invars:
                if isinstance(var, _internals.Var) and var not in defined:
                    read.setdefault(var)
            for var in eqn.outvars:
                defined.setdefault(var)
        call.inputs = list(read)
        call.outputs = [
            v for v in defined
            if v in program_outputs or any(i not in own_set for i in uses.get(v, ()))
        ]


def _origins(
    root: Call, jaxpr: Any, inputs: list[Input], sites: list[Site | None], eqn_calls: list[Call],
    entry: str,
) -> dict[Any, Origin]:
    parents: dict[int, Call | None] = {id(root): None}
    names: dict[tuple[int, Any], str] = {}
    for call in root.walk():
        for child in call.children:
            parents[id(child)] = call
        for name, _line, var in call.bindings:
            names.setdefault((id(call), var), name)
    origins: dict[Any, Origin] = {}
    for item in inputs:
        origins[item.var] = Origin(item.kind, entry, None, item.name, None)
    for var in jaxpr.constvars:
        origins[var] = Origin("const", entry)
    for index, eqn in enumerate(jaxpr.eqns):
        call = eqn_calls[index]
        for var in eqn.outvars:
            name, scope = None, call
            while scope is not None and name is None:
                name = names.get((id(scope), var))
                scope = parents[id(scope)]
            origins[var] = Origin("op", call.function, call.module_path, name, sites[index])
    return origins
