"""Row 5: whole commands against bare torchax tracing of the same thing (issue 37), in one run.

- the 70B command (``--abstract --export``, Llama sample at the 70B config) shape-generic (the
  default) and with ``--static-shapes``, against `benchmarks.bare_trace` (import torch, jax and
  torchax, build the config on the meta device, one `jax.make_jaxpr`): <= 1.3x and <= 1.15x,
  peak RSS < 1.5 GB;
- a toy model's plain annotate (``samples/mlp.py``, its comments: the time to first output)
  against the floor (import torch, jax and torchax, one bare `make_jaxpr`): <= 1.3x;
- a bad ``--entry`` reported: under 1 s;
- with no target, the 70B default against a lean bare trace (``bare_trace --lean``: no collector,
  no teardown, as jaxside runs itself): how much of the margin is Python's collector and teardown.

Processes run interleaved (a, b, c, a, b, c, ...) and each case's fastest is compared: CPU time
(the process's and its children's), which other jobs on the machine move little; wall time
beside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks._common import Result, judge, megabytes, seconds
from benchmarks.annotate_cli import CASES, Child, child
from benchmarks.models import ROOT

ROW = "5 against bare"
FLOOR = "import torch, jax, torchax; jax.make_jaxpr(lambda x: x + 1)(jax.numpy.ones(2))"
MLP = str(ROOT / "samples" / "mlp.py")
LIMITS = {"70B default": 1.3, "70B --static-shapes": 1.15, "toy annotate": 1.3}
MEGABYTES = 1536.0


def run(smoke: bool = False) -> list[Result]:
    runs = 1 if smoke else 2
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.py")
        big = [*CASES["llama 70B --abstract"], "-o", out]
        cases: dict[str, tuple[str, ...]] = {"bad --entry": ("-m", "jaxside", MLP, "--entry", "Net(")}
        if not smoke:  # the smoke run (the test suite's) only checks the row runs: the cheap case
            cases |= {
                "floor": ("-c", FLOOR),
                "toy annotate": ("-m", "jaxside", MLP, "-o", out, "--force"),
                "70B bare": ("-m", "benchmarks.bare_trace", "70B"),
                "70B bare, lean": ("-m", "benchmarks.bare_trace", "70B", "--lean"),
                "70B --static-shapes": ("-m", "jaxside", *big, "--static-shapes", "--force"),
                "70B default": ("-m", "jaxside", *big, "--force"),
            }
        done: dict[str, list[Child]] = {name: [] for name in cases}
        for _ in range(runs):
            for name, command in cases.items():
                done[name].append(child(*command))
    results = []
    best = {name: min(children, key=lambda c: c.cpu) for name, children in done.items()}
    pairs = (("toy annotate", "floor"), ("70B --static-shapes", "70B bare"), ("70B default", "70B bare"))
    for name, base in pairs:
        if name not in best:
            results.append(Result(ROW, name, "", verdict="skipped: --smoke"))
            continue
        measured, baseline = best[name], best[base]
        if measured.code != 0:
            results.append(Result(ROW, name, "", verdict=f"failed: exit {measured.code}"))
            continue
        ratio = measured.cpu / baseline.cpu
        limit = LIMITS[name]
        results.append(Result(ROW, f"{name}: CPU", seconds(measured.cpu), seconds(baseline.cpu), ratio,
                              f"<= {limit:.2f}x", judge(ratio, limit, smoke)))
        wall = min(c.wall for c in done[name]) / min(c.wall for c in done[base])
        results.append(Result(ROW, f"{name}: wall", seconds(min(c.wall for c in done[name])),
                              seconds(min(c.wall for c in done[base])), wall, "", "n/a"))
        if name.startswith("70B"):
            rss = max(c.max_rss for c in done[name])
            verdict = judge(rss / (MEGABYTES * 1024), 1.0, smoke)
            results.append(Result(ROW, f"{name}: peak RSS", megabytes(rss), megabytes(best[base].max_rss),
                                  rss / best[base].max_rss, "< 1.5 GB", verdict))
    if "70B bare, lean" in best and best["70B default"].code == 0:  # no target: what the collector hides
        measured, lean = best["70B default"], best["70B bare, lean"]
        results.append(Result(ROW, "70B default vs lean bare: CPU", seconds(measured.cpu), seconds(lean.cpu),
                              measured.cpu / lean.cpu, "", "n/a"))
    bad = min(c.wall for c in done["bad --entry"])
    results.append(Result(ROW, "bad --entry reported: wall", seconds(bad), "", None, "< 1 s",
                          judge(bad, 1.0, smoke)))
    return results
