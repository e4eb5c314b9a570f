"""Garbage collection for one run of the command, and its exit without tearing the heap down.

A run keeps a few large graphs for all its length: torch and jax once imported, the trace, its
program, and (shape-generic exports) the programs traced again at other sizes. CPython's
collections walk every object they find in a generation: full ones each time the heap grows by
a quarter (in the 70B export, about ten million objects, 22 of them took 11 of its 50 seconds
of CPU, issue 37), young ones every object that lived past 700 allocations, once in each young
generation (about 0.6 s of the 70B export's 6, after the full ones were gone). So, for the run:

- what a phase built is frozen (`gc.freeze`, which walks nothing) when the next one begins
  (`settle`): no collection walks it again;
- no generation is collected before `YOUNG` tracked objects were made since the last collection
  or freeze: the 70B export's phases never get there, so nothing is walked at all. The cycles a
  phase dropped (the traces at other sizes that the fit refused, about 80 MB at 70B) are frozen
  with it and freed at exit, which is soon; the limit is a safety net for a phase that makes
  garbage cycles by the million;
- at the end the heap is not freed object by object (3 s more at 70B): `leave` flushes, runs the
  `atexit` handlers and ends the process (`os._exit`), unless a thread of the user's code is
  still running (Python waits for those).

In-process callers (tests, the API, which collects the same way) get their settings back, what
was frozen unfrozen (Python's next collections free the cycles then), and no command but
`python -m jaxside` and the `annotate` script (`cli.command`) ends the process.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator

YOUNG = 1_000_000
"""Tracked objects made (less those freed) since the last collection or `settle` before the youngest
generation is collected during a run (Python's: 700); the older ones are then never collected."""

NEVER = 1 << 30
"""A threshold no count reaches: the older generations' during a run."""

FROZEN_BEFORE = gc.get_freeze_count()
"""Objects frozen before this module was imported: Python 3.12 starts with some of its own (375),
other versions with none. A run freezes only when no more than these are frozen (a caller's own
frozen objects are left as they are), and its `gc.unfreeze` at the end unfreezes these too."""

_failed: list[bool] = []
"""Not empty when the phase before the next `settle` raised (`attempt`)."""

_runs: list[bool] = []
"""Per `collection` open (the command run in process, maybe within another run): whether it may
freeze (nothing beyond `FROZEN_BEFORE` was frozen before it)."""

_callers: list[tuple[int, int, int]] = []
"""Per `collection` open: the thresholds before it, put back after it and within `ordinary`."""


@contextlib.contextmanager
def collection() -> Iterator[None]:
    """The run's collection settings (when it may freeze: nothing frozen beyond `FROZEN_BEFORE`);
    what `settle` froze is unfrozen and the thresholds put back after it."""
    thresholds = gc.get_threshold()
    _runs.append(gc.get_freeze_count() <= FROZEN_BEFORE if not _runs else _runs[-1])
    if _runs[-1]:  # else nothing is frozen, and collections run as the caller has them
        gc.set_threshold(max(YOUNG, thresholds[0]), NEVER, NEVER)
    _callers.append(thresholds)
    try:
        yield
    finally:
        mine = _runs.pop()
        _callers.pop()
        if mine and not _runs:
            gc.unfreeze()
        gc.set_threshold(*thresholds)


@contextlib.contextmanager
def ordinary() -> Iterator[None]:
    """Within a run, collection as outside it, for work on real numbers (``--check`` runs torch and
    the module, where a cycle can hold an array's memory); what the run made since the last
    `settle` is collected first."""
    if not _callers:
        yield
        return
    during = gc.get_threshold()
    _failed.clear()
    if gc.isenabled():
        gc.collect(1)
    gc.set_threshold(*_callers[-1])
    try:
        yield
    finally:
        gc.set_threshold(*during)


def settle() -> None:
    """A phase is over: what it made frozen, its dropped cycles too, without walking any of it
    (within a `collection`; a no-op after one, so never frozen for an in-process caller's later
    work). After a phase that raised (`attempt`), what it made is collected first."""
    failed = bool(_failed)
    _failed.clear()
    if _runs and _runs[-1] and gc.isenabled():
        if failed:
            gc.collect(1)  # only what the failed phase made: nothing older is in these generations
        gc.freeze()


@contextlib.contextmanager
def attempt() -> Iterator[None]:
    """A phase that may fail (a retrace at sizes the torch code refuses): if it raises, the next
    `settle` collects what it made before freezing the rest. Its exception's frames are cycles
    holding the inputs it traced, the weights' values unless the capture is abstract: frozen, each
    failed retrace would keep a copy of them to the end of the run."""
    try:
        yield
    except BaseException:
        _failed.append(True)
        raise


def leave(code: int) -> None:
    """End the process with `code`, its output flushed and its `atexit` handlers run, without
    freeing the heap (or as Python does, when a non-daemon thread still runs)."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)

