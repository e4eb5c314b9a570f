"""A fuzzed program end to end: torch eager, `capture`, render every equation, run, compare.

`roundtrip(program)` checks three things and says which failed:

- the rendered function re-traces to the captured jaxpr (structure, see `harness`; equations in
  dataflow order, as an idiom stages its run together), unless it took a rewrite (`REWRITES`);
- it computes the captured jaxpr's bits (each compiled on its own, see `harness.numbers_difference`);
- it agrees with torch eager: float32 to rtol 1e-5, float16 to 1e-3, bfloat16 to 1.6e-2 (atol
  the same times the output's largest magnitude, at least 1), integers and booleans exactly.
  A program that computes anything in a narrower float type is held to that type's tolerance
  (a float32 result of bfloat16 math is as good as bfloat16).

The first two failing are jaxside's (`Mismatch`; `Crash` when rendering raises).  Once they
hold, the rendering *is* the captured program, so a difference from torch is torchax lowering
an op differently from torch (`TorchaxDivergence`).  A failed capture is torchax's
(`TorchaxError`) only when it failed inside the program, somewhere other than jaxside's own
code (see `capture_failure`); an exception raised by tracing itself, or after the program
returned, is a `Crash`.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch
from jax.extend.core import ClosedJaxpr, Jaxpr

from fuzzing.harness import program_difference, render_function, struct
from fuzzing.programs import Program
from fuzzing.structure import jaxpr_difference
from jaxside.tracing import CaptureError, capture
from jaxside.tracing._internals import to_jax_array, to_jax_dtype, torchax

PROGRAM_FILE = "<fuzzed program>"
ROOT = Path(__file__).resolve().parents[2]
JAXSIDE = tuple(str(ROOT / package) for package in ("tracing", "render", "annotate"))
TOLERANCES = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}


class Mismatch(AssertionError):
    """The rendered program computes something else."""


class Crash(AssertionError):
    """Rendering, or running what was rendered, raised."""


class TorchaxError(AssertionError):
    """torchax could not trace the program (not jaxside's rendering)."""


class TorchaxDivergence(TorchaxError):
    """The captured program (and so its exact rendering) differs from torch eager."""


@dataclass
class Outcome:
    source: str
    """The rendered JAX source."""
    equations: int
    primitives: frozenset[str]
    """Every primitive the captured program binds, in sub-jaxprs too."""


def roundtrip(program: Program) -> Outcome:
    """Run `program` through capture and the op renderer; raise `Mismatch`, `Crash` or `TorchaxError`."""
    fn = program.function()
    inputs = program.make_inputs()
    expected = fn(*inputs)
    torchax.default_env().manual_seed(0)  # a fresh key: torchax keeps the last one it split
    try:
        trace = capture(fn, *inputs)
    except Exception as error:
        raise capture_failure(error, program.source) from error
    closed = trace.jaxpr
    try:
        rendered = render_function(closed, "program", consts_as_params=True)
        variables = [*closed.jaxpr.constvars, *closed.jaxpr.invars]
        retraced = jax.make_jaxpr(rendered.fn)(*[struct(v.aval) for v in variables])
        outputs, numbers = program_difference(closed, rendered.fn, [to_jax_array(t) for t in inputs])
    except Exception as error:
        raise Crash(f"{type(error).__name__}: {error}\n{program.source}") from error
    context = f"{program.source}\n--- rendered:\n{rendered.source}"
    # A rewrite (`render.rules.REWRITES`) is held to the bits alone; anything else to the structure too.
    values = tuple(dict(zip(j.jaxpr.constvars, j.consts)) for j in (closed, retraced))
    problem = None
    if not rendered.rewrites:
        problem = jaxpr_difference(closed.jaxpr, retraced.jaxpr, elide=True, values=values)
    if problem:
        raise Mismatch(f"re-traces differently: {problem}\n{context}")
    if numbers:
        raise Mismatch(f"{numbers} (against the captured jaxpr)\n{context}")
    tolerance = max(TOLERANCES[dtype] for dtype in _float_dtypes(closed.jaxpr) | {torch.float32})
    for i, (want, got) in enumerate(zip(expected, outputs)):
        problem = torch_difference(want, got, tolerance)
        if problem:
            raise TorchaxDivergence(f"output {i} differs from torch: {problem}\n{context}")
    return Outcome(rendered.source, len(closed.jaxpr.eqns), primitives(closed.jaxpr))


def primitives(jaxpr: Any) -> frozenset[str]:
    """The primitives `jaxpr` binds, and those of the jaxprs in its equations' params."""
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        pending = list(eqn.params.values())
        while pending:
            value = pending.pop()
            if isinstance(value, (tuple, list)):
                pending += value
            elif isinstance(value, (ClosedJaxpr, Jaxpr)):
                names |= primitives(getattr(value, "jaxpr", value))
    return frozenset(names)


def capture_failure(error: Exception, source: str) -> AssertionError:
    """`TorchaxError` for a capture that failed in torchax (or JAX under it) while the program ran,
    `Crash` for one that failed in jaxside: raised in a jaxside file, or outside the program."""
    if isinstance(error, CaptureError):
        # tracing's own explanation (an op torchax cannot lower, ...): what it wraps decides.
        error = error.__cause__ if isinstance(error.__cause__, Exception) else error
    frames = traceback.extract_tb(error.__traceback__)
    in_program = any(frame.filename == PROGRAM_FILE for frame in frames)
    ours = bool(frames) and frames[-1].filename.startswith(JAXSIDE)
    if in_program and not ours:
        return TorchaxError(f"capture failed: {type(error).__name__}: {error}\n{source}")
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return Crash(f"jaxside raised during capture ({where}): {type(error).__name__}: {error}\n{source}")


def _float_dtypes(jaxpr: Any) -> set[torch.dtype]:
    names = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    avals = [v.aval for e in jaxpr.eqns for v in [*e.invars, *e.outvars]]
    return {names[str(a.dtype)] for a in avals if str(getattr(a, "dtype", "")) in names}


def torch_difference(want: torch.Tensor, got: Any, tolerance: float | None = None) -> str | None:
    """None if the JAX value `got` matches the torch tensor `want` to tolerance (the dtype's by default)."""
    got = np.asarray(got)
    if tuple(want.shape) != got.shape or jax.dtypes.canonicalize_dtype(to_jax_dtype(want.dtype)) != got.dtype:
        return f"{got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype == torch.bool or not want.dtype.is_floating_point:
        expected = want.numpy().astype(np.int64)
        if not np.array_equal(expected, got.astype(np.int64)):
            return f"values differ:\n{got}\nexpected\n{expected}"
        return None
    tolerance = max(tolerance or 0.0, TOLERANCES[want.dtype])
    expected = want.float().numpy()
    actual = got.astype(np.float32)
    scale = max(1.0, float(np.nanmax(np.abs(expected), initial=0.0)))
    try:
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance * scale, equal_nan=True)
    except AssertionError as error:
        return str(error)
    return None
