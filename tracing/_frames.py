"""Record the calls, returns and local bindings of user code while it runs.

Pure Python on purpose (no torch, no jax): the tracer plugs in a `Probe` that says which
values are interesting, so this layer is tested on plain Python under every interpreter.

Two backends behind one `Recorder`:

- ``sys.monitoring`` (Python >= 3.12): only ``PY_START`` is a global event; a user code
  object gets ``LINE`` and ``PY_RETURN`` switched on for it alone, and every other code
  object answers ``DISABLE`` once, so the interpreter never calls back for library code.
- ``sys.settrace`` (Python 3.11): the global trace function returns ``None`` for frames
  that are not user code, so library code is never line-traced. CPython still calls it
  (and copies the frame's locals to a dict around it) for every new frame, which is most
  of the cost; a probe that knows where library code is entered (`Probe.library_calls`)
  lets the recorder switch the hook off for those calls.

Per-code-object decisions are cached by ``id(code)`` (kept alive), never by the code
object: hashing a code object rehashes its constants and names on every lookup.

Binding a local is detected without scanning every frame's locals on every line: the
bytecode of each user code object is read once for the names each line stores
(``STORE_FAST`` and its 3.13 fused forms, ``STORE_DEREF``, ``STORE_NAME``; never ``_``;
the containers of item assignments, which update a tensor in place), and when a frame
leaves a line only those names are looked up.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE, CO_GENERATOR, CO_VARARGS, CO_VARKEYWORDS
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol, cast

import bytecode

if TYPE_CHECKING:
    from _typeshed import TraceFunction  # what `sys.settrace` takes

# sys.monitoring exists from 3.12 on, and is the cheap path where it exists: events are
# enabled per code object and disabled for library code, instead of a Python call per
# frame as settrace needs. Chosen here, and only here.
DEFAULT_BACKEND = "monitoring" if sys.version_info >= (3, 12) else "settrace"

_NOT_A_CALL = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_STORE_OPS = frozenset({"STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL"})
# Python 3.13 fuses a store with its neighbour; the value is how many leading names are stored.
_FUSED_STORE_OPS = {"STORE_FAST_LOAD_FAST": 1, "STORE_FAST_STORE_FAST": 2}


class Probe(Protocol):
    """What the recorder asks of the values it sees.

    A probe may also define ``library_calls(pause, resume)``: a context manager that, while
    open, runs each call into library code between ``pause()`` and ``resume()``. Only calls
    that cannot run user code may be paused, as user calls made then are not recorded. The
    settrace backend uses it (its hook costs a Python call per frame); monitoring does not.
    """

    def key(self, value: object) -> Hashable | None:
        """A key for a value worth recording (a traced tensor), else None."""

    def leaves(self, value: object) -> list[tuple[str, Hashable]]:
        """``(path, key)`` for every recordable value inside a (possibly nested) value."""

    def watermark(self) -> int:
        """A counter of the work done so far (equations emitted), to place calls in it."""


@dataclass
class CallRecord:
    """One call of a user function: where it ran, what it bound, what it took and gave."""

    code: CodeType
    receiver: object | None
    args: list[tuple[str, Hashable]]
    start: int
    caller: tuple[CodeType, int] | None = None
    """The calling user frame's code and instruction offset, at the call."""
    end: int = -1
    bindings: list[tuple[str, int, Hashable]] = field(default_factory=list)
    numbers: list[tuple[str, int, object]] = field(default_factory=list)
    """`(local name, line, value)` each time a line bound a local to a Python number or a tuple
    of them (`kv_size = self.n_local_heads * self.head_dim`): what config numbers were named."""
    returned: list[tuple[str, Hashable]] = field(default_factory=list)
    children: list[CallRecord] = field(default_factory=list)
    lines: set[int] = field(default_factory=set)
    """Every line of the call's own code that ran (its frame's line events)."""
    raised: bool = False

    @property
    def qualname(self) -> str:
        return self.code.co_qualname

    def walk(self) -> Iterable[CallRecord]:
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class _Active:
    frame: FrameType
    record: CallRecord
    stores: dict[int, tuple[str, ...]]
    line: int = -1
    seen: dict[str, Hashable] = field(default_factory=dict)
    """The key each local had when last looked at, so a value is bound to a name once."""


class Recorder:
    """Records every call of user code between `start()` and `stop()` as a tree."""

    def __init__(
        self,
        is_user_file: Callable[[str], bool],
        probe: Probe,
        backend: str = DEFAULT_BACKEND,
        never_user: Callable[[str], bool] | None = None,
    ) -> None:
        """`never_user`, if given, says which files no recording ever takes for user code (the
        libraries): code of theirs switched off stays off, and later recordings skip them."""
        if backend not in _BACKENDS:
            raise ValueError(f"`backend` must be one of {sorted(_BACKENDS)}, not {backend!r}")
        self.is_user_file = is_user_file
        self.probe = probe
        self.roots: list[CallRecord] = []
        self._stack: list[_Active] = []
        self._user: dict[int, dict[int, tuple[str, ...]] | None] = {}
        self._codes: list[CodeType] = []  # keeps the ids in `_user` from being reused
        self.library_files: set[str] = set()
        """Files of functions judged library code (not user files), as they were met."""
        self.never_user = never_user
        self._backend = _BACKENDS[backend](self)
        self._open: contextlib.ExitStack | None = None
        """What `__exit__` closes: the backend, and the probe's library zone if any."""

    def __enter__(self) -> Recorder:
        library_calls = getattr(self.probe, "library_calls", None)
        with contextlib.ExitStack() as stack:
            self._backend.start()
            stack.callback(self._backend.stop)
            if library_calls is not None and self._backend.pause is not None:
                stack.enter_context(library_calls(self._backend.pause, self._backend.resume))
            self._open = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open is not None:
            self._open.close()  # the library zone first, then the backend
            self._open = None
        # Frames still open (the user's code raised through them) end where we stopped.
        for active in self._stack:
            active.record.raised = True
            active.record.end = self.probe.watermark()
        self._stack.clear()

    # -- decisions, cached per code object ------------------------------------------

    def stores_of(self, code: CodeType) -> dict[int, tuple[str, ...]] | None:
        """Names stored per line if `code` is user code that forms a call, else None."""
        try:
            return self._user[id(code)]
        except KeyError:
            pass
        stores = None
        if not code.co_flags & _NOT_A_CALL and not code.co_name.startswith("<"):
            if self.is_user_file(code.co_filename):
                stores = _stores_by_line(code)
            else:
                self.library_files.add(code.co_filename)
        self._user[id(code)] = stores
        self._codes.append(code)
        return stores

    # -- calls made without a frame (replayed, `tracing._replay`) -------------------

    def siblings(self) -> list[CallRecord]:
        """Where the record of a call starting now goes: the running user call's children, or the roots."""
        return self._stack[-1].record.children if self._stack else self.roots

    def adopt(self, records: list[CallRecord]) -> None:
        """Add records of calls made now that no frame ran (a replayed call's), called from the
        running user call's current instruction, as `on_call` would have recorded them."""
        caller = None
        if self._stack:
            frame = self._stack[-1].frame
            caller = (frame.f_code, frame.f_lasti)
        for record in records:
            record.caller = caller
        self.siblings().extend(records)

    # -- events ---------------------------------------------------------------------

    def on_call(self, frame: FrameType, stores: dict[int, tuple[str, ...]]) -> None:
        code = frame.f_code
        f_locals = frame.f_locals
        nargs = code.co_argcount + code.co_kwonlyargcount
        nargs += bool(code.co_flags & CO_VARARGS) + bool(code.co_flags & CO_VARKEYWORDS)
        names = code.co_varnames[:nargs]
        receiver = f_locals.get(names[0]) if names and names[0] == "self" else None
        args: list[tuple[str, Hashable]] = []
        seen: dict[str, Hashable] = {}
        for name in names:
            for path, key in self.probe.leaves(f_locals.get(name)):
                args.append((name + path, key))
                if not path:
                    seen[name] = key
        record = CallRecord(code, receiver, args, start=self.probe.watermark())
        if self._stack:
            parent = self._stack[-1]
            record.caller = (parent.frame.f_code, parent.frame.f_lasti)
            parent.record.children.append(record)
        else:
            self.roots.append(record)
        self._stack.append(_Active(frame, record, stores, seen=seen))

    def on_line(self, frame: FrameType, line: int) -> None:
        if not self._stack or self._stack[-1].frame is not frame:
            return
        active = self._stack[-1]
        if active.line in active.stores:
            self._bind(active)
        active.line = line
        active.record.lines.add(line)

    def on_return(self, frame: FrameType, value: object, raised: bool = False) -> None:
        if not self._stack or self._stack[-1].frame is not frame:
            return
        active = self._stack.pop()
        if active.line in active.stores:
            self._bind(active)
        record = active.record
        record.end = self.probe.watermark()
        record.raised = raised
        if not raised:
            record.returned = self.probe.leaves(value)

    def _bind(self, active: _Active) -> None:
        f_locals = active.frame.f_locals
        key_of = self.probe.key
        seen = active.seen
        for name in active.stores[active.line]:
            value = f_locals.get(name)
            key = key_of(value)
            if key is not None and seen.get(name) is not key:
                seen[name] = key
                active.record.bindings.append((name, active.line, key))
            elif key is None and is_number(value):
                active.record.numbers.append((name, active.line, value))


def is_number(value: object) -> bool:
    """A Python int or float (not a bool), or a short non-empty tuple or list of ints: a number a
    config may hold (`n_head`, `eps`, `split_sizes`)."""
    kind = type(value)
    if kind is int or kind is float:
        return True
    if kind is tuple or kind is list:
        items = cast("tuple[object, ...] | list[object]", value)  # exactly a tuple or a list
        return 0 < len(items) <= 8 and all(type(v) is int for v in items)
    return False


@functools.lru_cache(maxsize=4096)  # reading bytecode costs ~0.3 ms a code object; captures repeat
def _stores_by_line(code: CodeType) -> dict[int, tuple[str, ...]]:
    """Per line, the locals to look up after it ran: the names it stores, and for an
    item assignment (`cache[:, pos] = k`, an in-place update) the locals it reads.

    Cached for the process (code objects are immutable): callers must not change the result."""
    stores: dict[int, list[str]] = {}
    loads: dict[int, list[str]] = {}
    subscript_lines = set()
    for instr in bytecode.Bytecode.from_code(code):
        if not isinstance(instr, bytecode.Instr) or instr.lineno is None:
            continue  # (an instruction of no line: no line ran it)
        arg: Any = instr.arg  # a name, a cell or free variable, a pair of names
        if instr.name in _STORE_OPS:
            targets = [arg if isinstance(arg, str) else arg.name]
        elif instr.name in _FUSED_STORE_OPS:  # 3.13 superinstructions, arg is a name pair
            targets = list(arg[: _FUSED_STORE_OPS[instr.name]])
        elif instr.name == "STORE_SUBSCR":
            subscript_lines.add(instr.lineno)
            continue
        elif instr.name.startswith("LOAD_FAST"):
            loads.setdefault(instr.lineno, []).extend(
                arg if isinstance(arg, tuple) else [arg]
            )
            continue
        else:
            continue
        stores.setdefault(instr.lineno, []).extend(targets)
    for line in subscript_lines:
        stores.setdefault(line, []).extend(loads.get(line, ()))
    return {
        line: tuple(dict.fromkeys(n for n in names if n != "_")) for line, names in stores.items()
    }


class _Settrace:
    """Python 3.11: a global trace function that declines every non-user frame."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._previous: TraceFunction | None = None
        self._raising: FrameType | None = None
        self._global = self._make_global()
        # C callables, so a paused library call adds no Python frame of its own.
        self.pause: Callable[[], object] | None = functools.partial(sys.settrace, None)
        self.resume: Callable[[], object] | None = functools.partial(sys.settrace, self._global)

    def start(self) -> None:
        self._previous = sys.gettrace()
        sys.settrace(self._global)

    def stop(self) -> None:
        sys.settrace(self._previous)

    def _make_global(self) -> TraceFunction:
        # Called for every new frame, library ones included: a closure over locals and one
        # dict lookup by id before declining, since this is the whole per-frame cost.
        decided = self.recorder._user
        stores_of = self.recorder.stores_of
        on_call = self.recorder.on_call
        local = self._local

        def trace_call(frame: FrameType, event: str, arg: object) -> TraceFunction | None:
            code = frame.f_code
            try:
                stores = decided[id(code)]
            except KeyError:
                stores = stores_of(code)
            if stores is None:
                return None
            on_call(frame, stores)
            return local

        return trace_call

    def _local(self, frame: FrameType, event: str, arg: object) -> TraceFunction:
        if event == "line":
            if self._raising is frame:
                self._raising = None  # the exception was handled inside this frame
            self.recorder.on_line(frame, frame.f_lineno)
        elif event == "return":
            # settrace reports a return after an exception too, with `arg` None.
            self.recorder.on_return(frame, arg, raised=frame is self._raising)
        elif event == "exception":
            self._raising = frame
        return self._local


# Per tool id, the files of functions a recording DISABLEd as library code. DISABLE outlives
# the recording (until `restart_events()`), so a later one restarts events only if one of
# these files is user code to it: a restart re-instruments every code object run afterwards,
# about 0.7 us each, milliseconds for a torch model. Files a recorder's `never_user` names are
# left out: after one capture of a torch model they are hundreds, each asked about again.
_DISABLED_FILES: dict[int, set[str]] = {}


class _Monitoring:
    """Python >= 3.12: events only for user code objects; library code is DISABLEd."""

    # Library code costs one PY_START per code object, then never again: nothing to pause.
    pause: Callable[[], object] | None = None
    resume: Callable[[], object] | None = None

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.tool: int | None = None
        self._local_codes: dict[int, CodeType] = {}

    def start(self) -> None:
        mon = sys.monitoring
        for tool in (3, 4, mon.PROFILER_ID, 5):
            try:
                mon.use_tool_id(tool, "jaxside")
            except ValueError:
                continue
            self.tool = tool
            break
        else:
            raise RuntimeError("every sys.monitoring tool id is taken; jaxside needs one")
        events = mon.events
        getframe = sys._getframe
        on_line, on_return = self.recorder.on_line, self.recorder.on_return

        # Closures over locals: these run for every line and return of user code.
        def line(code: CodeType, line: int) -> None:
            on_line(getframe(1), line)

        def returned(code: CodeType, offset: int, value: object) -> None:
            on_return(getframe(1), value)

        mon.register_callback(self.tool, events.PY_START, self._start)
        mon.register_callback(self.tool, events.LINE, line)
        mon.register_callback(self.tool, events.PY_RETURN, returned)
        mon.register_callback(self.tool, events.PY_UNWIND, self._unwind)
        disabled = _DISABLED_FILES.get(self.tool, ())
        if any(self.recorder.is_user_file(file) for file in disabled):
            mon.restart_events()
            for files in _DISABLED_FILES.values():  # a restart re-enables every tool's
                files.clear()
        mon.set_events(self.tool, events.PY_START | events.PY_UNWIND)

    def stop(self) -> None:
        mon, tool = sys.monitoring, self.tool
        if tool is None:
            return  # never started
        mon.set_events(tool, 0)
        files = self.recorder.library_files
        never_user = self.recorder.never_user
        if never_user is not None:
            files = {file for file in files if not never_user(file)}
        _DISABLED_FILES.setdefault(tool, set()).update(files)
        for code in self._local_codes.values():
            mon.set_local_events(tool, code, 0)
        for event in (mon.events.PY_START, mon.events.LINE, mon.events.PY_RETURN,
                      mon.events.PY_UNWIND):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)

    def _start(self, code: CodeType, offset: int) -> object:
        try:
            stores = self.recorder._user[id(code)]
        except KeyError:
            stores = self.recorder.stores_of(code)
        if stores is None:
            return sys.monitoring.DISABLE
        if id(code) not in self._local_codes:
            assert self.tool is not None  # events come only once `start` took a tool id
            events = sys.monitoring.events
            sys.monitoring.set_local_events(self.tool, code, events.LINE | events.PY_RETURN)
            self._local_codes[id(code)] = code
        self.recorder.on_call(sys._getframe(1), stores)
        return None

    def _unwind(self, code: CodeType, offset: int, exception: BaseException) -> None:
        self.recorder.on_return(sys._getframe(1), None, raised=True)


_BACKENDS: dict[str, type] = {"settrace": _Settrace}
if sys.version_info >= (3, 12):
    _BACKENDS["monitoring"] = _Monitoring
