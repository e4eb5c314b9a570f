"""What the run is doing, on stderr: a live line on a terminal, plain lines otherwise.

On a terminal one line is redrawn in place several times a second: the phase, how far it has
got (``module 370 of 885``, equations so far) and the time since the start; it is cleared before
anything else is printed (the user's own prints included) and when the run ends. Elsewhere
(a pipe, a log file, a CI job) each phase is one plain line as it starts, and long traces add a
line a second. `-q` prints nothing but errors; `-v` prints every phase as a plain line, with its
time, even on a terminal.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["Status"]

_REDRAW_EVERY = 0.2
"""Seconds between redraws of the live line."""
_STEP_AFTER, _STEP_EVERY = 2.0, 1.0
"""A phase's steps (`Status.step`) get a line of their own once it has run this long, then at most
this often (the same as a capture's progress: `tracing.PROGRESS_AFTER`, `PROGRESS_EVERY`)."""


class Status:
    """The status display of one run."""

    def __init__(self, stream: TextIO | None = None, *, verbosity: int = 0, live: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.verbosity = verbosity
        if live is None:
            live = verbosity == 0 and _is_terminal(self.stream)
        self.live = live and verbosity >= 0
        self.started = time.monotonic()
        self._phase = ""
        self._detail = ""
        self._phase_started = self.started
        self._last_line = self.started
        self._shown = 0  # characters of the live line on screen
        self._mid_line = False  # text without its newline yet went to the screen: do not draw over it
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.modules: dict[str, int] = {}
        """Module paths of the entry in definition order, for ``module k of n`` while tracing."""

    # -- what the run reports ---------------------------------------------------------------

    def phase(self, text: str) -> None:
        """A new phase begins (``loading model.py``, ``tracing Net``)."""
        with self._lock:
            self._phase, self._detail = text, ""
            self._phase_started = time.monotonic()
            if self.live:
                self._start_ticker()
                self._draw()
            elif self.verbosity > 0:
                self._line(f"annotate: {text} ({self.elapsed():.1f} s)")
            elif self.verbosity == 0:
                self._line(f"annotate: {text}")

    def progress(self, progress: Any) -> None:
        """A progress report from `tracing.Capture` (a long trace)."""
        where, counts = "", f"{progress.equations:,} equations"
        if progress.module_path is not None:
            where = " " + (progress.module_path or "the root module")
            if progress.module_type:
                where += f" ({progress.module_type})"
            position = self.modules.get(progress.module_path)
            if position is not None and len(self.modules) > 1:
                counts += f", module {position + 1} of {len(self.modules)}"
        with self._lock:
            self._detail = f"{progress.phase}{where}: {counts}"
            if self.live:
                self._draw()
            elif self.verbosity >= 0:  # the run's clock, as the phases' (not the capture's own)
                self._line(f"annotate: {progress.phase}{where}: {counts}, {self.elapsed():.1f} s")

    def step(self, text: str) -> None:
        """How far a long phase has got (``def 12 of 30``): the live line shows it at once; as a
        line of its own it comes once the phase has run `_STEP_AFTER` s, at most every `_STEP_EVERY` s."""
        now = time.monotonic()
        with self._lock:
            self._detail = f"{self._phase}: {text}"
            if self.live:
                self._draw()
            elif self.verbosity >= 0 and now - self._phase_started >= _STEP_AFTER and (
                now - self._last_line >= _STEP_EVERY
            ):
                self._line(f"annotate: {self._detail}, {self.elapsed():.1f} s")

    def say(self, text: str) -> None:
        """A line that stays (``wrote out.py``); not with ``-q``."""
        if self.verbosity >= 0:
            self._line(f"annotate: {text}")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def close(self) -> None:
        """Stop redrawing and clear the live line."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            self._clear()

    # -- a stream for everything else printed meanwhile -------------------------------------

    def writer(self) -> _ClearingWriter:
        """A stream that clears the live line before text goes to stderr (for the user's prints)."""
        return _ClearingWriter(self)

    # -- drawing ------------------------------------------------------------------------------

    def _line(self, text: str) -> None:
        with self._lock:
            self._last_line = time.monotonic()
            self._clear()
            self.stream.write(text + "\n")
            self.stream.flush()
            if self.live and self._phase and not self._stop.is_set():
                self._draw()

    def _draw(self) -> None:
        if self._mid_line:
            return
        text = f"annotate: {self._detail or self._phase}  {self.elapsed():.1f} s"
        width = _terminal_width(self.stream) - 1
        if len(text) > width:
            text = text[: max(width - 3, 0)] + "..."
        self.stream.write("\r" + text + " " * max(self._shown - len(text), 0) + "\r")
        self.stream.flush()
        self._shown = len(text)

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    def _start_ticker(self) -> None:
        if self._ticker is not None:
            return

        def tick() -> None:
            while not self._stop.wait(_REDRAW_EVERY):
                with self._lock:
                    if self._phase:
                        self._draw()

        self._ticker = threading.Thread(target=tick, name="annotate-status", daemon=True)
        self._ticker.start()


class _ClearingWriter:
    """stderr, clearing the live status line first; the line is redrawn at the next tick."""

    def __init__(self, status: Status) -> None:
        self._status = status

    def write(self, text: str) -> int:
        with self._status._lock:
            self._status._clear()
            if text:
                self._status._mid_line = not text.endswith("\n")
            return self._status.stream.write(text)

    def flush(self) -> None:
        self._status.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._status.stream, name)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
