"""Row 1: `tracing.capture` against bare torchax tracing of the Llama sample, as depth grows.

Also under each other interpreter with torch that `JAXSIDE_BENCH_TORCH_PYTHONS` names
(``:``-separated; by default the ``.venv-3.12`` that ``make test`` builds, if there is one): the
row on Python 3.12 with real torch, where `sys.monitoring` is the frame hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from benchmarks import models
from benchmarks._common import Result, judge, medians, seconds

ROW = "1 capture vs bare"
LIMIT = 1.3 if sys.version_info < (3, 12) else 1.1
"""Issue 6's targets for the hook: <= 1.3x with sys.settrace (3.11), <= 1.1x with sys.monitoring."""
CAPTURE_LIMIT = 1.3
"""Issue 37's target for a whole capture, on every interpreter: <= 1.3x."""


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


def run(smoke: bool = False, here_only: bool = False) -> list[Result]:
    results = []
    for layers in (1, 2) if smoke else (2, 8, 32):
        results += measure(layers, smoke)
    return results if here_only else results + elsewhere(smoke)


def torch_pythons(smoke: bool = False) -> list[str]:
    """Other interpreters with torch to run the row under (not this one); the smoke run only
    those named."""
    named = os.environ.get("JAXSIDE_BENCH_TORCH_PYTHONS")
    if smoke and not named:
        return []
    found = named.split(os.pathsep) if named else [str(models.ROOT / ".venv-3.12" / "bin" / "python")]
    here = os.path.realpath(sys.executable)
    return [p for p in found if p and os.path.exists(p) and os.path.realpath(p) != here]


def elsewhere(smoke: bool) -> list[Result]:
    """The row under each of `torch_pythons()`, in a process of its own."""
    script = ("import json; from dataclasses import asdict; from benchmarks.capture_overhead import run; "
              f"print(json.dumps([asdict(r) for r in run(smoke={smoke}, here_only=True)]))")
    results = []
    for python in torch_pythons(smoke):
        done = subprocess.run([python, "-c", script], capture_output=True, text=True, cwd=models.ROOT,
                              env={**os.environ, "PYTHONPATH": str(models.ROOT)})
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            results.append(Result(ROW, f"under {python}", "", verdict=f"failed: {last}"))
            continue
        results += [Result(**fields) for fields in json.loads(done.stdout.strip().splitlines()[-1])]
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
    size = f"{layers}L" + (" (tiny)" if smoke else "")
    size += f", {sys.version_info[0]}.{sys.version_info[1]}"
    results = []
    for name, label in (("capture", "capture"), ("hook", "hook only")):
        ratio = times[name] / times["bare"]
        limit = CAPTURE_LIMIT if name == "capture" else LIMIT
        results.append(Result(
            ROW, f"{label}, {size} {DEFAULT_BACKEND}", seconds(times[name]), seconds(times["bare"]),
            ratio, f"<= {limit:.2f}x", judge(ratio, limit, smoke),
        ))
    return results
