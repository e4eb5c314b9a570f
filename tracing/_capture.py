"""The entry point: how to capture (`Capture`), and one capture driven the same way for every frontend.

`Capture` picks the session for what it is given: torch code (`tracing._torch`) or a JAX function
(`tracing._jaxfn`). `record` runs any `Session` inside `jax.make_jaxpr` with the frame recorder
on, and hands what it saw to `tracing._assemble`.

(Private so that the `tracing.capture` function is not shadowed by a submodule of that name.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jaxside.tracing import _internals
from jaxside.tracing._assemble import assemble
from jaxside.tracing._files import is_library_file
from jaxside.tracing._frames import DEFAULT_BACKEND, Recorder
from jaxside.tracing._jaxfn import JaxSession, is_jax_entry
from jaxside.tracing._probe import Probe
from jaxside.tracing._progress import Progress, Reporter
from jaxside.tracing._random import drop_unused_key
from jaxside.tracing._session import Returned, Session
from jaxside.tracing._torch import TorchSession
from jaxside.tracing.errors import make_jaxpr_classified
from jaxside.tracing.trace import Trace


@dataclass
class Capture:
    """How to capture: which files count as user code, which frame backend, abstract inputs.

    `watch` adds files or directories (paths, or modules whose files count) to the user code
    that is recorded; the files defining the entry (and, for a module, its submodules'
    classes) are always watched. With `abstract`, tensors become `jax.ShapeDtypeStruct`s,
    so a model built on the ``meta`` device is traced without allocating a weight.
    `resize` traces torch inputs at other shapes: jaxpr input name (`x`, `layers.0.cache.k`) ->
    the shape it gets instead (abstract, so no value is needed).
    `like` (a retrace's: the trace at the example sizes) lets a torch capture replay a module call
    that repeats one it already ran, alike in every way the trace shows, instead of running torch
    again (`tracing._replay`); the `Trace` is the same.
    `progress` is called with a `Progress` once a capture has run `PROGRESS_AFTER` seconds,
    then at most every `PROGRESS_EVERY` seconds.
    """

    watch: Iterable[str | os.PathLike[str]] = ()
    backend: str = DEFAULT_BACKEND
    abstract: bool = False
    resize: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    progress: Callable[[Progress], None] | None = None
    like: Trace | None = None

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
        frontend = JaxSession if is_jax_entry(fn, args, kwargs) else TorchSession
        if frontend is JaxSession:
            return record(JaxSession(fn, args, kwargs, watch=self.watch, abstract=self.abstract), self)
        session = TorchSession(
            fn, args, kwargs, watch=self.watch, abstract=self.abstract, resize=self.resize, like=self.like
        )
        return record(session, self)


def capture(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Trace:
    """Trace ``fn(*args, **kwargs)`` (a function or an ``nn.Module``) with provenance."""
    return Capture()(fn, *args, **kwargs)


def record(session: Session, options: Capture) -> Trace:
    """Trace one session's entry once, user code watched, and assemble its `Trace`.

    A fresh function goes to `jax.make_jaxpr` each time, as it caches per function object."""
    probe = Probe()
    recorder = Recorder(session.entry.is_user_file, probe, options.backend, never_user=is_library_file)
    reporter = Reporter(options.progress, probe.watermark)
    runs: list[tuple[Returned, list[Any]]] = []

    def traced(*flat: Any) -> list[Any]:
        probe.frame = _internals.current_jaxpr_frame()
        returned = session.run(flat, recorder, reporter)
        runs.append((returned, _internals.emitted_outvars(probe.frame)))
        return returned.values

    # A retrace's failure is read by the sizes search alone (a refusal): no traceback to filter.
    retrace = isinstance(session, TorchSession) and session.like is not None
    closed = make_jaxpr_classified(traced, session.inputs(), session.entry.is_user_file, filtered=not retrace)
    reporter.tick("recording")
    returned, emitted = runs[-1]
    closed, entry = drop_unused_key(closed, session.entry)
    return assemble(entry, closed, recorder.roots, emitted, returned)
