"""What every row shares: results, interleaved median timing, formatting."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Result:
    """One line of the table: a case measured against its baseline, and the verdict."""

    row: str
    case: str
    value: str
    baseline: str = ""
    ratio: float | None = None
    target: str = ""
    verdict: str = ""
    """``ok``, ``MISSED``, ``n/a`` (no target), ``pending: ...``, ``skipped: ...``, ``failed: ...``."""


def judge(ratio: float, limit: float, smoke: bool) -> str:
    """The verdict for a ratio with an upper limit; the smoke run only reports."""
    if smoke:
        return "smoke"
    return "ok" if ratio <= limit else "MISSED"


def timed(
    fn: Callable[[], object], clock: Callable[[], float] = time.process_time, collect: bool = True
) -> float:
    """Seconds one call of `fn` takes, after a collection so garbage from before is not billed.

    CPU time by default: tracing is single-threaded, and CPU time barely moves when other
    processes share the machine, where wall time doubles. Without `collect`, the caller keeps
    the collector off instead (a collection costs more than a millisecond-long run)."""
    if collect:
        gc.collect()
    start = clock()
    fn()
    return clock() - start


def medians(
    cases: dict[str, Callable[[], object]], runs: int, warmup: int = 1,
    clock: Callable[[], float] = time.process_time, collect: bool = True,
) -> dict[str, float]:
    """Median seconds per case, runs interleaved (a, b, b, a, a, b, ...): drift hits all alike,
    and no case always runs right after another."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases.items())
    enabled = gc.isenabled()
    if not collect:
        gc.collect()
        gc.disable()
    try:
        for _ in range(runs):
            for name, fn in order:
                samples[name].append(timed(fn, clock, collect))
            order.reverse()
    finally:
        if enabled:
            gc.enable()
    return {name: statistics.median(times) for name, times in samples.items()}


def seconds(value: float) -> str:
    """A duration the way the table shows it."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} us"
    if value < 1:
        return f"{value * 1e3:.1f} ms" if value < 0.1 else f"{value * 1e3:.0f} ms"
    return f"{value:.2f} s"


def megabytes(kilobytes: float) -> str:
    return f"{kilobytes / 1024:.0f} MB"


COLUMNS = (("row", 22), ("case", 34), ("value", 9), ("baseline", 9), ("ratio", 6), ("target", 10))


def header() -> str:
    head = "  ".join(name.ljust(width) for name, width in COLUMNS) + "  verdict"
    return head + "\n" + "-" * len(head)


def line(result: Result) -> str:
    ratio = f"{result.ratio:.2f}x" if result.ratio is not None else ""
    cells = (result.row, result.case, result.value, result.baseline, ratio, result.target)
    return "  ".join(cell.ljust(width) for cell, (_, width) in zip(cells, COLUMNS)) + "  " + result.verdict
