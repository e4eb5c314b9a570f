"""Garbage collection for one run of the command, and its exit without tearing the heap down.

A run keeps a few large graphs for all its length: torch and jax once imported, the trace, its
program, and (shape-generic exports) the programs traced again at other sizes. CPython's full
collections walk every object each time the heap grows by a quarter: in the 70B export (about
ten million objects) 22 of them took 11 of its 50 seconds of CPU (issue 37). So, for the run:

- what a phase built is frozen (`gc.freeze`) when the next one begins (`settle`): later
  collections skip it, as its objects live on (a value a frozen cycle holds is freed only at
  exit, which is soon);
- the youngest generation is collected every `YOUNG` allocations, not every 700;
- at the end the heap is not freed object by object (3 s more at 70B): `leave` flushes, runs the
  `atexit` handlers and ends the process (`os._exit`), unless a thread of the user's code is
  still running (Python waits for those).

In-process callers (tests, the API, which collects the same way) get their settings back, and
no command but `python -m jaxside` and the `annotate` script (`cli.command`) ends the process.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator

YOUNG = 10_000
"""Allocations between collections of the youngest generation during a run (Python's: 700)."""

FROZEN_BEFORE = gc.get_freeze_count()
"""Objects frozen before this module was imported: Python 3.12 starts with some of its own (375),
other versions with none. A run freezes only when no more than these are frozen (a caller's own
frozen objects are left as they are), and its `gc.unfreeze` at the end unfreezes these too."""

_runs: list[bool] = []
"""Per `collection` open (the command run in process, maybe within another run): whether it may
freeze (nothing beyond `FROZEN_BEFORE` was frozen before it)."""


@contextlib.contextmanager
def collection() -> Iterator[None]:
    """The run's collection settings; what `settle` froze is unfrozen and the thresholds put
    back after it."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(YOUNG, thresholds[0]), *thresholds[1:])
    _runs.append(gc.get_freeze_count() <= FROZEN_BEFORE if not _runs else _runs[-1])
    try:
        yield
    finally:
        mine = _runs.pop()
        if mine and not _runs:
            gc.unfreeze()
        gc.set_threshold(*thresholds)


def settle() -> None:
    """A phase is over: its short-lived cycles collected, what it keeps frozen (within a
    `collection`; a no-op after one, so never frozen for an in-process caller's later work)."""
    if _runs and _runs[-1] and gc.isenabled():
        gc.collect(1)
        gc.freeze()


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

