"""Row 2: the whole ``annotate --export`` command, time and peak memory, on the Llama sample and at 70B."""

from __future__ import annotations

import compileall
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import Result, judge, megabytes, seconds
from benchmarks.models import LLAMA, ROOT

ROW = "2 annotate --export"
SECONDS, MEGABYTES = 10.0, 1536.0
"""The issue's targets for the whole command: under 10 s and under 1.5 GB."""
IMPORTS = ("import torch, jax, jaxside.tracing._capture, jaxside.render.module, jaxside.annotate.cli, "
           "jaxside.annotate.export, jaxside.annotate.check")
"""The baseline: a process that only imports what the command imports."""
CASES = {
    "llama sample (tiny)": [str(LLAMA), "--export"],
    "llama 70B --abstract": [
        str(LLAMA), "--export", "--abstract", "--entry", 'build("70B")',
        "--inputs", "(torch.zeros(1, 8, dtype=torch.long), torch.arange(8))",
    ],
}


@dataclass
class Child:
    """One finished process: wall and CPU seconds, peak resident memory (KB), how it ended."""

    wall: float
    cpu: float
    max_rss: float
    code: int
    stderr: str


def child(how: str, what: str, *args: str) -> Child:
    """Run ``python -m what args`` (or ``-c``) from the project root, under `benchmarks.peak`, with
    jaxside's bytecode compiled (`compiled`)."""
    compiled()
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.peak", str(peak), how, what, *args], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert process.stderr is not None
        stderr = process.stderr.read()
        process.stderr.close()
        _, status, usage = os.wait4(process.pid, 0)  # its CPU time, its children's included
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
        wall = time.perf_counter() - start
        max_rss = float(peak.read_text()) if peak.exists() else 0.0
    return Child(wall, usage.ru_utime + usage.ru_stime, max_rss, process.returncode, stderr)


@functools.cache
def compiled() -> None:
    """jaxside's modules compiled to bytecode, as `pip install` leaves them (torch's and jax's are):
    where the environment sets ``PYTHONDONTWRITEBYTECODE``, every measured process would otherwise
    compile the hundred modules it imports from source (about 0.12 s), which no installed copy does."""
    for package in ("jaxside", "annotate", "tracing", "render"):
        compileall.compile_dir(ROOT / package, quiet=1)


def median_child(runs: int, how: str, what: str, *args: str) -> Child:
    children = [child(how, what, *args) for _ in range(runs)]
    failed = next((c for c in children if c.code != 0), None)
    if failed is not None:
        return failed
    return Child(
        statistics.median(c.wall for c in children), statistics.median(c.cpu for c in children),
        max(c.max_rss for c in children), 0, "",
    )


def failure(run: Child) -> str | None:
    if run.code == 0:
        return None
    last = (run.stderr.strip().splitlines() or [f"exit code {run.code}"])[-1]
    if "unrecognized arguments" in last:
        return f"pending: annotate does not take {last.rsplit(':', 1)[-1].strip()}"
    return f"failed: {last}"


def run(smoke: bool = False) -> list[Result]:
    runs = 1 if smoke else 3
    base = median_child(runs, "-c", IMPORTS)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            if smoke and "70B" in name:
                results.append(Result(ROW, name, "", verdict="skipped: --smoke"))
                continue
            measured = median_child(runs, "-m", "jaxside", *args, "-o", str(Path(tmp) / "out.py"))
            problem = failure(measured)
            if problem is not None:
                results.append(Result(ROW, name, "", verdict=problem))
                continue
            for label, value, baseline, limit, show in (
                ("wall", measured.wall, base.wall, SECONDS, seconds),
                ("CPU", measured.cpu, base.cpu, SECONDS, seconds),
                ("peak RSS", measured.max_rss, base.max_rss, MEGABYTES * 1024, megabytes),
            ):
                verdict = judge(value / limit, 1.0, smoke)
                if label == "wall" and verdict == "MISSED" and measured.cpu < limit:
                    verdict = "MISSED (CPU time is under: a busy machine)"
                target = f"< {SECONDS:.0f} s" if label != "peak RSS" else f"< {MEGABYTES / 1024:.1f} GB"
                results.append(Result(
                    ROW, f"{name}: {label}", show(value), show(baseline), value / baseline, target, verdict,
                ))
    return results
