"""Row 1b: the frame recorder alone on a plain Python model, per interpreter and backend.

torch is installed for Python 3.11 only here, so ``sys.monitoring`` (3.12+) is measured on
`toy_model` over `toy_library`: the recorder on against off, and against settrace on the same
interpreter, with ops as heavy as torchax's (``torchax``) and fifteen times lighter
(``light``). Other interpreters run this module as a worker (``--worker``), which prints JSON;
they need only `bytecode` (``make test-frames`` makes ``.venv-frames-3.12`` and
``.venv-frames-3.13``; ``JAXSIDE_BENCH_PYTHONS=/path/python3.12:/path/python3.13`` adds others).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import subprocess
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks._common import Result

ROOT = Path(__file__).resolve().parents[1]
ROW = "1b hook, plain Python"
LIMITS = {"monitoring": 1.1, "settrace": 1.3}

PLAN = {
    # (layers, op weight) -> backends shown: the interpreter's own ("native") at every depth
    # with torchax-weight ops and once with light ops; the others at one depth.
    (2, "torchax"): {"native"},
    (8, "torchax"): {"native", "settrace", "settrace+pause"},
    (32, "torchax"): {"native"},
    (8, "light"): {"native"},
}
SMOKE_PLAN = {(2, "light"): {"native", "settrace", "settrace+pause"}}


class ToyProbe:
    """The recorder's probe for `toy_library` arrays; with `pausing`, it pauses for every op."""

    def __init__(self, pausing: bool) -> None:
        from benchmarks import toy_library

        self.library = toy_library
        if pausing:
            self.library_calls = self._library_calls

    def key(self, value: object) -> Hashable | None:
        return value if isinstance(value, self.library.Array) else None

    def leaves(self, value: object, path: str = "", depth: int = 0) -> list[tuple[str, Hashable]]:
        if isinstance(value, self.library.Array):
            return [(path, value)]
        if depth > 3:
            return []
        if isinstance(value, (tuple, list)):
            return [leaf for i, v in enumerate(value) for leaf in self.leaves(v, f"{path}[{i}]", depth + 1)]
        if isinstance(value, dict):
            return [leaf for k, v in value.items() for leaf in self.leaves(v, f"{path}[{k!r}]", depth + 1)]
        return []

    def watermark(self) -> int:
        return len(self.library.EQUATIONS)

    @contextlib.contextmanager
    def _library_calls(self, pause: Callable[[], object], resume: Callable[[], object]) -> Iterator[None]:
        def quiet(dispatch: Callable[..., Any], name: str, args: tuple, params: dict) -> Any:
            pause()
            try:
                return dispatch(name, args, params)
            finally:
                resume()

        with self.library.mode(quiet):
            yield


def measure(layers: int, weight: str, runs: int) -> list[dict[str, Any]]:
    """This interpreter's numbers: each backend (settrace also with pausing) against the recorder off."""
    from benchmarks import toy_library, toy_model
    from benchmarks._common import medians
    from jaxside.tracing._frames import _BACKENDS, Recorder

    toy_library.configure(weight)
    tokens, params = toy_model.build(layers)
    user_file = toy_model.__file__

    def off() -> None:
        toy_library.EQUATIONS.clear()
        toy_model.model(tokens, params)

    def on(backend: str, pausing: bool) -> Callable[[], None]:
        def recorded() -> None:
            toy_library.EQUATIONS.clear()
            with Recorder(lambda filename: filename == user_file, ToyProbe(pausing), backend):
                toy_model.model(tokens, params)

        return recorded

    cases: dict[str, Callable[[], None]] = {"off": off}
    for backend in sorted(_BACKENDS):
        cases[backend] = on(backend, pausing=False)
        if backend == "settrace":
            cases["settrace+pause"] = on(backend, pausing=True)
    times = medians(cases, runs=runs, warmup=2)
    python = list(sys.version_info[:3])
    return [
        {"python": python, "backend": name, "layers": layers, "weight": weight, "off": times["off"],
         "on": times[name]}
        for name in cases if name != "off"
    ]


def measure_plan(plan: dict[tuple[int, str], set[str]], runs: int) -> list[dict[str, Any]]:
    native = "monitoring" if sys.version_info >= (3, 12) else "settrace+pause"
    rows = []
    for (layers, weight), shown in plan.items():
        for row in measure(layers, weight, runs):
            if row["backend"] in shown or (row["backend"] == native and "native" in shown):
                rows.append(row)
    return rows


def interpreters() -> list[str]:
    """Python 3.12+ interpreters that can import the recorder (they need `bytecode`)."""
    found = [p for p in os.environ.get("JAXSIDE_BENCH_PYTHONS", "").split(os.pathsep) if p]
    for version in ("3.12", "3.13", "3.14"):
        found += sorted(glob.glob(str(ROOT / f".venv-frames-{version}" / "bin" / "python")))
        found += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    usable: list[str] = []
    versions: set[tuple[int, ...]] = set()
    for python in found:
        probe = subprocess.run(
            [python, "-c", "import sys, bytecode; print(*sys.version_info[:2])"],
            capture_output=True, text=True,
        )
        version = tuple(int(part) for part in probe.stdout.split()) if probe.returncode == 0 else ()
        if version >= (3, 12) and version not in versions:
            usable.append(python)
            versions.add(version)
    return usable


def run(smoke: bool = False) -> list[Result]:
    from benchmarks._common import Result, judge, seconds

    runs = 1 if smoke else 9
    rows = measure_plan(SMOKE_PLAN if smoke else PLAN, runs)
    results: list[Result] = []
    pythons = [] if smoke else interpreters()
    for python in pythons:
        worker = subprocess.run(
            [python, "-m", "benchmarks.hook_overhead", "--worker", "--runs", str(runs)],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if worker.returncode != 0:
            last = (worker.stderr.strip().splitlines() or ["no output"])[-1]
            results.append(Result(ROW, python, "", verdict=f"failed: {last}"))
            continue
        rows += json.loads(worker.stdout)
    for row in rows:
        ratio = row["on"] / row["off"]
        limit = LIMITS[row["backend"].split("+")[0]]
        version = ".".join(map(str, row["python"]))
        case = f"{version} {row['backend']}, {row['layers']}L {row['weight']}"
        # Judged: what a capture would use on that interpreter, with torchax-weight ops.
        judged = row["backend"] in ("monitoring", "settrace+pause") and row["weight"] == "torchax"
        results.append(Result(
            ROW, case, seconds(row["on"]), seconds(row["off"]), ratio, f"<= {limit:.2f}x",
            judge(ratio, limit, smoke) if judged else "n/a",
        ))
    if not smoke and not pythons:
        results.append(Result(ROW, "Python >= 3.12", "", verdict=(
            "skipped: no Python >= 3.12 with `bytecode` (`make test-frames`, or JAXSIDE_BENCH_PYTHONS)"
        )))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="worker for the plain Python hook row")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--runs", type=int, default=9)
    options = parser.parse_args(argv)
    print(json.dumps(measure_plan(PLAN, options.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
