"""Progress reports for long captures: how far tracing has got, at most once a second."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

PROGRESS_AFTER = 2.0
"""Seconds before the first progress report: short captures report nothing."""
PROGRESS_EVERY = 1.0
"""Seconds between progress reports."""


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


class Reporter:
    """Calls the progress callback, at most every `PROGRESS_EVERY` s once `PROGRESS_AFTER` s have gone."""

    def __init__(self, callback: Callable[[Progress], None] | None, equations: Callable[[], int]) -> None:
        self.callback = callback
        self.equations = equations
        self.start = time.monotonic()
        self.due = self.start + PROGRESS_AFTER

    def tick(self, phase: str, module_path: str | None = None, module_type: str | None = None) -> None:
        now = time.monotonic()
        if self.callback is None or now < self.due:
            return
        self.due = now + PROGRESS_EVERY
        self.callback(Progress(phase, now - self.start, self.equations(), module_path, module_type))

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
