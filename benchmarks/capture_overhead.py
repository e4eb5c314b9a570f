"""Row 1: `tracing.capture` against bare torchax tracing of the Llama sample, as depth grows."""

from __future__ import annotations

import sys
from typing import Any

from benchmarks import models
from benchmarks._common import Result, judge, medians, seconds

ROW = "1 capture vs bare"
LIMIT = 1.3 if sys.version_info < (3, 12) else 1.1
"""The issue's targets: <= 1.3x with sys.settrace (3.11), <= 1.1x with sys.monitoring."""


def hook_only(model: Any, inputs: tuple[Any, ...]) -> Any:
    """Bare tracing with the frame recorder on and nothing else of a capture: the hook's own cost."""
    import jax

    from jaxside.tracing import _internals
    from jaxside.tracing._frames import Recorder
    from jaxside.tracing._probe import Probe

    probe = Probe()

    def recorder() -> Recorder:
        probe.frame = _internals.current_jaxpr_frame()
        return Recorder(lambda filename: filename == str(models.LLAMA), probe)

    f = models.bare_function(model, inner=recorder)
    return jax.make_jaxpr(f)(*models.jax_inputs(model, inputs))


def run(smoke: bool = False) -> list[Result]:
    results = []
    for layers in (1, 2) if smoke else (2, 8, 32):
        results += measure(layers, smoke)
    return results


def measure(layers: int, smoke: bool) -> list[Result]:
    from jaxside.tracing import capture
    from jaxside.tracing._frames import DEFAULT_BACKEND

    model, inputs = models.llama(layers, smoke=smoke)
    times = medians(
        {
            "bare": lambda: models.bare_make_jaxpr(model, inputs),
            "hook": lambda: hook_only(model, inputs),
            "capture": lambda: capture(model, *inputs),
        },
        runs=1 if smoke else 11,
    )
    size = f"{layers} layer{'s' if layers > 1 else ''}" + (" (tiny)" if smoke else "")
    results = []
    for name, label in (("capture", "capture"), ("hook", "hook only")):
        ratio = times[name] / times["bare"]
        results.append(Result(
            ROW, f"{label}, {size}, {DEFAULT_BACKEND}", seconds(times[name]), seconds(times["bare"]),
            ratio, f"<= {LIMIT:.2f}x", judge(ratio, LIMIT, smoke),
        ))
    return results
