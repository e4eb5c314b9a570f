"""Ctrl-C that always ends the run: exit 130, nothing written.

Python raises `KeyboardInterrupt` in whatever code runs when SIGINT arrives. When that is a
garbage-collector callback (jax registers one, and imports collect often), Python prints
"Exception ignored in ..." and carries on, so the interrupt is lost. Here SIGINT sets a flag
as well as raising: `check()` raises again wherever the run reaches a checkpoint (before every
write), and an interrupt that lands in a gc callback is re-delivered once the callback is over.
Within `deferred()` (torch's and jax's imports: an import of theirs broken off halfway can
crash the interpreter) SIGINT only sets the flag, raised when the block ends.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["check", "deferred", "handling", "interrupted"]

_flag = threading.Event()
_deferring = threading.Event()
_pending: list[threading.Timer] = []
_REDELIVER_AFTER = 0.05
"""Seconds before an interrupt that landed in a gc callback is raised again."""


def interrupted() -> bool:
    """Whether SIGINT arrived since `handling` began."""
    return _flag.is_set()


def check() -> None:
    """Raise `KeyboardInterrupt` if SIGINT arrived, even if its first raise was swallowed."""
    if _flag.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Handle SIGINT as above for the duration (in the main thread; elsewhere, leave it be)."""
    _flag.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        while _pending:
            _pending.pop().cancel()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """SIGINT during the block is raised when it ends (if `handling` is on)."""
    _deferring.set()
    try:
        yield
    finally:
        _deferring.clear()
    check()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _flag.set()
    if _deferring.is_set():
        return
    if _in_gc_callback(frame):
        timer = threading.Timer(_REDELIVER_AFTER, _thread.interrupt_main)
        _pending.append(timer)
        timer.start()
        return
    raise KeyboardInterrupt


def _in_gc_callback(frame: FrameType | None) -> bool:
    codes = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False

