"""Run torch code under torchax inside `jax.make_jaxpr`, recording where every value came from."""

from __future__ import annotations

import ast
import bisect
import contextlib
import dataclasses
import inspect
import os
import re
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType, TracebackType
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
        os.path.dirname(torch.__file__),
        os.path.dirname(jax.__file__),
        os.path.dirname(_internals.torchax.__file__),
        *(os.path.join(os.path.dirname(os.path.dirname(__file__)), package)  # jaxside itself
          for package in ("annotate", "tracing", "render")),
    )
)
# The standard library, but not the site-packages inside it (a system Python's): a modeling file
# of an installed package is user code when asked for.
_STDLIB_DIR = str(Path(os.path.dirname(os.__file__)).resolve()) + os.sep
_SITE_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


class CaptureError(Exception):
    """The entry could not be traced; the message says why.

    `site` is the user expression that was running (when known), `file` and `line` where it is.
    Other exceptions the user's code raises while traced propagate unchanged.
    """

    def __init__(
        self, message: str, *, site: Site | None = None, file: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.site = site
        self.file = file if file is not None else site.file if site else None
        self.line = line if line is not None else site.line if site else None


class InputsError(CaptureError):
    """The inputs do not fit the entry's signature (`file`/`line`: its ``def``)."""


class ValueDependentError(CaptureError):
    """User code needed a traced tensor's value in Python: an ``if`` on it, ``.item()``, a mask index.

    Tracing knows shapes and dtypes only, so Python cannot decide it."""


class UnsupportedOpError(CaptureError):
    """torchax has no JAX lowering for an op the user's code called (`op`, e.g. ``aten::foo``)."""

    def __init__(self, message: str, *, op: str | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.op = op


class MixedDeviceError(CaptureError):
    """A plain (CPU) torch tensor met a traced one; `names` are the user's names for it, if found."""

    def __init__(self, message: str, *, names: tuple[str, ...] = (), **where: Any) -> None:
        super().__init__(message, **where)
        self.names = names


class OutputError(CaptureError):
    """The entry returned traced tensors inside an object torch's pytree cannot flatten."""


@dataclass(frozen=True)
class Progress:
    """How far a long capture has got, for a progress line."""

    phase: str
    """``"tracing"`` (running the code) or ``"recording"`` (building the `Trace`)."""
    seconds: float
    equations: int
    module_path: str | None = None
    """The module being called (``layers.37.attention``; ``""`` for the root), when tracing."""
    module_type: str | None = None


PROGRESS_AFTER = 2.0
"""Seconds before the first progress report: short captures report nothing."""
PROGRESS_EVERY = 1.0
"""Seconds between progress reports."""


@dataclass
class Capture:
    """How to capture: which files count as user code, which frame backend, abstract inputs.

    `watch` adds files or directories (paths, or modules whose files count) to the user code
    that is recorded; the files defining the entry (and, for a module, its submodules'
    classes) are always watched. With `abstract`, tensors become `jax.ShapeDtypeStruct`s,
    so a model built on the ``meta`` device is traced without allocating a weight.
    `progress` is called with a `Progress` once a capture has run `PROGRESS_AFTER` seconds,
    then at most every `PROGRESS_EVERY` seconds.
    """

    watch: Iterable[str | os.PathLike[str]] = ()
    backend: str = DEFAULT_BACKEND
    abstract: bool = False
    progress: Callable[[Progress], None] | None = None

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
        from tracing import _jaxfn  # it builds on this module

        if _jaxfn.is_jax_entry(fn, args, kwargs):
            return _jaxfn.JaxSession(self, fn, args, kwargs).run()
        return _Session(self, fn, args, kwargs).run()


def capture(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
    """Trace ``fn(*args, **kwargs)`` (a function or an ``nn.Module``) with provenance."""
    return Capture()(fn, *args, **kwargs)


class _Probe:
    """Tells the frame recorder which values are traced tensors, and how far tracing got."""

    def __init__(self) -> None:
        self.frame: Any = None

    def key(self, value: object) -> Hashable | None:
        """The var of a traced tensor; a lazy torchax view stands for the value it will
        produce (resolved when the Trace is built)."""
        var = _internals.var_of(value)
        return value if var is None and isinstance(value, _internals.TorchaxView) else var

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

    def library_calls(self, pause: Callable[[], object], resume: Callable[[], object]) -> _LibraryCalls:
        return _LibraryCalls(pause, resume)


# Tensor types whose torch functions are all library code; a user subclass may call back.
_LIBRARY_TENSORS = frozenset(
    {torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, _internals.TorchaxTensor, _internals.TorchaxView}
)


class _LibraryCalls(torch.overrides.TorchFunctionMode):
    """Runs each torch function with the frame hook paused: under settrace, the torchax and
    JAX frames of an op are most of the hook's cost, and they never call user code back
    unless handed a callable (``torch.cond``, hooks) or a user tensor subclass."""

    def __init__(self, pause: Callable[[], object], resume: Callable[[], object]) -> None:
        super().__init__()
        self.pause, self.resume = pause, resume

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not _LIBRARY_TENSORS.issuperset(types) or _passes_callable(args, kwargs):
            return func(*args, **kwargs)
        self.pause()
        try:
            return func(*args, **kwargs)
        finally:
            self.resume()


def _passes_callable(args: tuple, kwargs: dict) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, (tuple, list)):
            if any(callable(item) for item in value):
                return True
        elif callable(value):
            return True
    return False


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
        self.module_paths: dict[int, str] = {}
        if self.module is not None:
            self.module_paths = {id(m): p for p, m in self.module.named_modules(remove_duplicate=False)}
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
            leaves, spec = _flatten_with_path(value)
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
        reporter = _Reporter(self.options.progress, probe)
        result: dict[str, Any] = {}

        def traced(*flat: Any) -> list[Any]:
            probe.frame = _internals.current_jaxpr_frame()
            tensors = [_internals.wrap(value, env) for value in flat]
            args, kwargs = self._rebuild_arguments(tensors)
            with contextlib.ExitStack() as stack:
                stack.enter_context(self._swapped_state(tensors))
                stack.enter_context(env)
                # Random ops split torchax's key; on a copy, so no tracer outlives the trace.
                stack.enter_context(env.override_property(prng=env.param.prng))
                stack.enter_context(torch.device("jax"))
                stack.enter_context(reporter.watching(self.module_paths))
                result["views"] = stack.enter_context(_internals.view_values())
                stack.enter_context(recorder)
                out = self.fn(*args, **kwargs)
            result["emitted"] = _internals.emitted_outvars(probe.frame)
            leaves, spec = _flatten_with_path(out)
            outputs, static = [], {}
            for i, (path, leaf) in enumerate(leaves):
                if _internals.var_of(leaf) is not None or isinstance(leaf, _internals.TorchaxTensor):
                    outputs.append((torch_pytree.keystr(path), _internals.jax_value(leaf)))
                elif _holds_tensor(leaf):
                    raise OutputError(
                        f"{self.entry_name} returned a {type(leaf).__qualname__} holding traced tensors, "
                        "which torch's pytree cannot flatten",
                        file=self.entry_file, line=self.entry_line,
                    )
                else:
                    static[i] = leaf
            mutated = [i for i, (t, v) in enumerate(zip(tensors, flat)) if _internals.jax_value(t) is not v]
            result.update(out_paths=[p for p, _ in outputs], spec=spec, static=static, mutated=mutated)
            return [v for _, v in outputs] + [_internals.jax_value(tensors[i]) for i in mutated]

        closed = make_jaxpr_classified(traced, self._jax_inputs(), self.user_file)
        reporter.tick("recording")
        return _build_trace(self, closed, recorder, result)

    @property
    def entry_code(self) -> CodeType | None:
        """The code object whose call is the root of the call tree (None: a synthesized root)."""
        return _entry_code(self.fn)

    @property
    def entry_file(self) -> str | None:
        code = _entry_code(self.fn)
        return code.co_filename if code else None

    @property
    def entry_line(self) -> int | None:
        code = _entry_code(self.fn)
        return code.co_firstlineno if code else None

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


def make_jaxpr_classified(
    traced: Callable[..., Any], inputs: list[Any], is_user_file: Callable[[str], bool]
) -> Any:
    """`jax.make_jaxpr(traced)(*inputs)`, failures tracing can explain raised as `CaptureError`s."""
    try:
        return jax.make_jaxpr(traced)(*inputs)
    except CaptureError:
        raise
    except Exception as error:
        classified = _classify(error, is_user_file)
        if classified is None:
            raise
        raise classified from error


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
        code = _entry_code(target)
        raise InputsError(
            f"the inputs do not fit {name}{signature}: {error}",
            file=code.co_filename if code else None, line=code.co_firstlineno if code else None,
        ) from None


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
        answer = not _is_library_path(path) and (
            filename in files or path in resolved or path.startswith(tuple(dirs))
        )
        decided[filename] = answer
        return answer

    return is_user_file


def user_code(fn: Any, watch: Iterable[Any] = ()) -> Callable[[str], bool]:
    """The predicate 'is this file user code' that a capture of `fn` uses (for error reports)."""
    module = fn if isinstance(fn, torch.nn.Module) else None
    if module is None and inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        module = fn.__self__
    return _user_files(fn, module, watch)


def is_library_file(filename: str) -> bool:
    """Whether a file belongs to Python (frozen modules included), torch, jax, torchax or jaxside."""
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    return _is_library_path(str(Path(filename).resolve()))


def _is_library_path(path: str) -> bool:
    if path.startswith(_LIBRARY_DIRS):
        return True
    inside = path[len(_STDLIB_DIR) - 1 :]
    return path.startswith(_STDLIB_DIR) and not any(part in inside for part in _SITE_PARTS)


class _Reporter:
    """Calls the progress callback, at most every `PROGRESS_EVERY` s once `PROGRESS_AFTER` s have gone."""

    def __init__(self, callback: Callable[[Progress], None] | None, probe: _Probe) -> None:
        self.callback = callback
        self.probe = probe
        self.start = time.monotonic()
        self.due = self.start + PROGRESS_AFTER

    def tick(self, phase: str, module_path: str | None = None, module_type: str | None = None) -> None:
        now = time.monotonic()
        if self.callback is None or now < self.due:
            return
        self.due = now + PROGRESS_EVERY
        self.callback(Progress(phase, now - self.start, self.probe.watermark(), module_path, module_type))

    @contextlib.contextmanager
    def watching(self, module_paths: dict[int, str]) -> Iterator[None]:
        """While tracing, a tick at every module call (a global hook, only when someone listens)."""
        if self.callback is None:
            yield
            return

        def before_forward(module: torch.nn.Module, args: Any) -> None:
            self.tick("tracing", module_paths.get(id(module)), type(module).__name__)

        handle = torch.nn.modules.module.register_module_forward_pre_hook(before_forward)
        try:
            yield
        finally:
            handle.remove()


def _flatten_with_path(value: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """torch's pytree flatten, after registering the dataclasses holding tensors found among the
    leaves (model outputs such as ``Output(logits, hidden)``), so their tensors are leaves too."""
    tried: set[type] = set()
    while True:
        leaves, spec = torch_pytree.tree_flatten_with_path(value)
        fresh = {
            type(leaf) for _, leaf in leaves
            if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type) and type(leaf) not in tried
            and _holds_tensor(leaf)
        }
        if not fresh:
            return leaves, spec
        for cls in fresh:
            tried.add(cls)
            with contextlib.suppress(ValueError):  # registered meanwhile, or not registrable
                torch_pytree.register_dataclass(cls)


def _holds_tensor(value: Any, depth: int = 0) -> bool:
    """Whether a tensor hides in an object's attributes (a few levels down)."""
    if isinstance(value, torch.Tensor):
        return True
    if depth > 3 or isinstance(value, (str, bytes, int, float, bool, type, torch.nn.Module)) or value is None:
        return False
    if isinstance(value, dict):
        items: Iterable[Any] = value.values()
    elif isinstance(value, (list, tuple, set)):
        items = value
    else:
        items = getattr(value, "__dict__", {}).values()
    return any(_holds_tensor(item, depth + 1) for item in items)


_VALUE_NEEDED = (
    jax.errors.ConcretizationTypeError,  # bool(), .item(), int() of a tracer
    jax.errors.NonConcreteBooleanIndexError,  # x[mask]
    jax.errors.TracerArrayConversionError,  # .numpy(), np.asarray
    jax.errors.TracerIntegerConversionError,  # range(t), list index
)


def _classify(error: Exception, is_user_file: Callable[[str], bool]) -> CaptureError | None:
    """The `CaptureError` for a failure tracing explains, located at the innermost user frame;
    None for anything else (the user's own exceptions go through unchanged)."""
    frame, lasti = _innermost_user_frame(error.__traceback__, is_user_file)
    site = SourceIndex().site(frame.f_code, lasti) if frame is not None else None
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    if isinstance(error, _VALUE_NEEDED):
        return ValueDependentError(first, site=site)
    if isinstance(error, _internals.torchax.tensor.OperatorNotFound):
        match = re.search(r"name (\S+) has no lowering", text)
        return UnsupportedOpError(first, op=match.group(1) if match else None, site=site)
    if isinstance(error, AssertionError) and "mixed math" in text:  # torchax's check in t2j_iso
        return MixedDeviceError(first, names=_plain_tensor_names(frame, site), site=site)
    return None


def _innermost_user_frame(
    tb: TracebackType | None, is_user_file: Callable[[str], bool]
) -> tuple[FrameType | None, int]:
    found: tuple[FrameType | None, int] = (None, -1)
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found = (tb.tb_frame, tb.tb_lasti)
        tb = tb.tb_next
    return found


def _plain_tensor_names(frame: FrameType | None, site: Site | None) -> tuple[str, ...]:
    """Names in the failing expression that hold a plain torch tensor (not a traced one)."""
    if frame is None or site is None or not site.text:
        return ()
    try:
        tree = ast.parse(site.text.strip(), mode="eval")
    except SyntaxError:
        return ()
    names: dict[str, None] = {}
    for node in ast.walk(tree):
        value: Any = None
        if isinstance(node, ast.Name):
            value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = frame.f_locals.get(node.value.id, frame.f_globals.get(node.value.id))
            value = getattr(owner, "__dict__", {}).get(node.attr)  # no property runs
        if (
            isinstance(value, torch.Tensor) and not isinstance(value, _internals.TorchaxTensor)
            and value.device.type != "jax"
        ):
            names.setdefault(ast.unparse(node))
    return tuple(names)


# -- from recorded events to a Trace ---------------------------------------------------------


def _build_trace(session: _Session, closed: Any, recorder: Recorder, result: dict[str, Any]) -> Trace:
    jaxpr = closed.jaxpr
    sources = SourceIndex()
    views = result.get("views", {})
    emitted_index: dict[Any, int] = {}
    for index, outvars in enumerate(result["emitted"]):
        for var in outvars or ():
            emitted_index[var] = index

    # Each equation's place in emission order, and its innermost user-code expression.
    positions: list[int] = []
    sites: list[Site | None] = []
    user_code: dict[int, bool] = {}  # by id: hashing a code object is slow; the jaxpr keeps them alive
    for eqn in jaxpr.eqns:
        previous = positions[-1] if positions else 0
        positions.append(next((emitted_index[v] for v in eqn.outvars if v in emitted_index), previous))
        sites.append(_innermost_user_site(eqn, session.user_file, user_code, sources))

    module_paths = session.module_paths

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
            bindings=_resolved(record.bindings, views),
            children=[to_call(child) for child in record.children],
            call_site=sources.site(*record.caller) if record.caller else None,
            raised=record.raised,
        )

    entry_code = session.entry_code
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
        while (inner := _child_holding(call, position, spans)) is not None:
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


def _resolved(
    bindings: list[tuple[str, int, Any]], views: dict[int, tuple[object, Any]]
) -> list[tuple[str, int, Any]]:
    """Bindings with each torchax view replaced by the var it materialized to (dropped if unused)."""
    out = []
    for name, line, key in bindings:
        if isinstance(key, _internals.TorchaxView):
            key = views.get(id(key), (None, None))[1]
        if key is not None:
            out.append((name, line, key))
    return out


def _entry_code(fn: Any) -> CodeType | None:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    return getattr(inspect.unwrap(getattr(target, "__func__", target)), "__code__", None)


def _spans(pairs: list[tuple[Call, CallRecord]], spans: dict[int, tuple[int, int]]) -> None:
    for call, record in pairs:
        spans[id(call)] = (record.start, record.end)
        _spans(list(zip(call.children, record.children)), spans)


def _child_holding(call: Call, position: int, spans: dict[int, Any]) -> Call | None:
    """The child of `call` whose span holds `position`: a bisection, as siblings run one after another."""
    layout = spans.get(("children", id(call)))
    if layout is None:
        starts = [spans[id(c)][0] for c in call.children]
        ends = [spans[id(c)][1] for c in call.children]
        ordered = all(ends[i] <= starts[i + 1] for i in range(len(starts) - 1))
        layout = spans[("children", id(call))] = (starts, ends, ordered)
    starts, ends, ordered = layout
    if not ordered:  # never seen; kept exact all the same
        return next((c for c, s, e in zip(call.children, starts, ends) if s <= position < e), None)
    i = bisect.bisect_right(starts, position) - 1
    return call.children[i] if i >= 0 and position < ends[i] else None


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


def _dataflow(root: Call, jaxpr: Any) -> None:
    """Fill each call's `inputs` (read, made outside) and `outputs` (made inside, used after)."""
    uses: dict[Any, list[int]] = {}
    for index, eqn in enumerate(jaxpr.eqns):
        for var in eqn.invars:
            if isinstance(var, _internals.Var):
                uses.setdefault(var, []).append(index)
    program_outputs = {v for v in jaxpr.outvars if isinstance(v, _internals.Var)}
    eqns = jaxpr.eqns
    var_type = _internals.Var
    for call in root.walk():
        own = call.all_eqns()
        own_set = set(own)
        defined: dict[Any, None] = {}
        read: dict[Any, None] = {}
        for index in own:
            eqn = eqns[index]
            for var in eqn.invars:
                if isinstance(var, var_type) and var not in defined:
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
    bound = {var for _, var in names}  # most vars were never bound to a local: skip the walk up
    for index, eqn in enumerate(jaxpr.eqns):
        call = eqn_calls[index]
        for var in eqn.outvars:
            name, scope = None, call
            while var in bound and scope is not None and name is None:
                name = names.get((id(scope), var))
                scope = parents[id(scope)]
            origins[var] = Origin("op", call.function, call.module_path, name, sites[index])
    return origins
