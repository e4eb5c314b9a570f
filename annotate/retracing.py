"""The capture again at other sizes (shape-generic exports), each retrace a phase of its own.

A generic export traces the torch code again with some inputs resized (`render.lower.merge.
input_sizes` decides which, a handful of times); at 70B each retrace and its lowering take
seconds, so each says what it does on stderr: ``sizes: trace 3 at idx [2, 8], input_pos [8]``,
then ``sizes: lowering trace 3 (13,463 equations)`` with the lowering's own steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Resize = dict[str, tuple[int, ...]]

_SHOWN = 3
"""Inputs named in a retrace's phase line (a model's caches are dozens of buffers)."""


def announced(retrace: Callable[[Resize], Any], status: Any, first: Any) -> Callable[[Resize], Any]:
    """`retrace`, each call announced as a phase of `status` (an `annotate.status.Status`), the
    entry's arguments named before the state of `first` (the trace at the example sizes)."""
    count = 0
    arguments = [i.name for i in first.inputs if i.kind == "arg"]

    def again(resize: Resize) -> Any:
        nonlocal count
        count += 1
        status.phase(f"sizes: trace {count} at {describe(resize, arguments)}")
        trace = retrace(resize)
        status.phase(f"sizes: lowering trace {count} ({len(trace.jaxpr.jaxpr.eqns):,} equations)")
        return trace

    return again


def describe(resize: Resize, arguments: list[str]) -> str:
    """``idx [2, 8], input_pos [16] and 4 more``: the `arguments` first, then the state."""
    names = sorted(resize, key=lambda name: (name not in arguments, name))
    shown = ", ".join(f"{name} {list(resize[name])}" for name in names[:_SHOWN])
    more = len(names) - _SHOWN
    return shown + (f" and {more} more" if more > 0 else "")
