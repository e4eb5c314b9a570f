"""Row 3: the exported JAX module under `jax.jit` against the torch model under torchax `jax.jit`."""

from __future__ import annotations

import re
import time
from typing import Any

from benchmarks import models
from benchmarks._common import Result, judge, medians, seconds

ROW = "3 export runtime"
LIMIT = 1.05
"""The issue's target: the export runs in 1.00-1.05x the time of the original."""
CLOCK = time.perf_counter
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s=\s", re.MULTILINE)


def hlo_ops(text: str) -> int:
    """Instructions in an HLO module's text, over all its computations (fusions included)."""
    return len(_INSTRUCTION.findall(text))


def pending() -> str | None:
    """What the row needs that is not there yet, if anything."""
    try:
        from jaxside.annotate.check import entry_inputs, load_module  # noqa: F401
        from jaxside.render.lower import lower  # noqa: F401
        from jaxside.render.module import render_program  # noqa: F401
    except ImportError as error:
        return f"pending: {error}"
    return None


def run(smoke: bool = False) -> list[Result]:
    missing = pending()
    if missing is not None:
        return [Result(ROW, "", "", verdict=missing)]
    return measure(1 if smoke else 8, smoke)


def measure(layers: int, smoke: bool) -> list[Result]:
    import jax
    import numpy as np

    from jaxside.annotate.check import entry_inputs, load_module
    from jaxside.render.lower import lower
    from jaxside.render.module import render_program
    from jaxside.tracing import capture

    model, inputs = models.llama(layers, smoke=smoke)
    size = f"{layers} layer{'s' if layers > 1 else ''}" + (" (tiny)" if smoke else "")
    program = lower(capture(model, *inputs))
    module = load_module(render_program(program, source="benchmarks"))
    entry = getattr(module, program.entry.name)
    exported_args = entry_inputs(module, program, model, inputs, {})
    original_args = models.jax_inputs(model, inputs)
    # The same program called with its arguments flattened: what jit's handling of the nested
    # `params` tree costs per call, apart from the program itself.
    leaves, tree = jax.tree_util.tree_flatten(exported_args)
    cases = {
        "original": (models.bare_function(model), original_args),
        "exported": (entry, exported_args),
        "flat": (lambda *leaves: entry(*jax.tree_util.tree_unflatten(tree, leaves)), leaves),
    }
    lowered = {name: jax.jit(fn).lower(*args) for name, (fn, args) in cases.items()}
    compiled = {name: stage.compile() for name, stage in lowered.items()}

    got = compiled["exported"](*exported_args)
    got = got[0] if program.takes_state else got
    want = compiled["original"](*original_args)[0]
    error = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    if not np.allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5):
        return [Result(ROW, size, "", verdict=f"failed: outputs differ by {error:.2e}")]

    def call(name: str) -> Any:
        fn, args = compiled[name], cases[name][1]
        return lambda: jax.block_until_ready(fn(*args))

    times = medians(  # wall time: XLA runs the program on several threads
        {name: call(name) for name in cases}, runs=3 if smoke else 200, warmup=5, clock=CLOCK,
        collect=False,
    )
    results = []
    for name, label in (("exported", f"jit run, err {error:.0e}"), ("flat", "same, args flattened")):
        ratio = times[name] / times["original"]
        results.append(Result(
            ROW, f"{size}: {label}", seconds(times[name]), seconds(times["original"]), ratio,
            f"<= {LIMIT:.2f}x", judge(ratio, LIMIT, smoke),
        ))
    for stage in ("lowered", "compiled"):
        counts = [
            hlo_ops(lowered[name].as_text(dialect="hlo") if stage == "lowered" else compiled[name].as_text())
            for name in ("exported", "original")
        ]
        # What runs is the compiled program; before XLA's passes the counts may differ.
        if counts[0] == counts[1]:
            verdict = "smoke" if smoke else "ok"
        else:
            verdict = "n/a: fewer" if counts[0] < counts[1] else "n/a: more"
            verdict = "MISSED" if stage == "compiled" else verdict
        results.append(Result(
            ROW, f"{size}: HLO ops {stage}", str(counts[0]), str(counts[1]), counts[0] / counts[1],
            "same", verdict,
        ))
    return results
