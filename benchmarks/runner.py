"""The table: every row in turn, one line per case, as each finishes."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Sequence

from benchmarks._common import Result, header, line

ROWS = {
    "capture": "benchmarks.capture_overhead",
    "hook": "benchmarks.hook_overhead",
    "annotate": "benchmarks.annotate_cli",
    "bare": "benchmarks.against_bare",
    "runtime": "benchmarks.exported_runtime",
    "render": "benchmarks.rendering",
    "depth": "benchmarks.nesting",
    "readability": "benchmarks.readability",
    "catalogue": "benchmarks.catalogue",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and one run each: checks every row runs, judges nothing")
    parser.add_argument("--only", metavar="ROW", action="append", choices=sorted(ROWS),
                        help="run only this row (repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    names = options.only or list(ROWS)
    print(f"jaxside benchmarks{' (smoke)' if options.smoke else ''}: Python {sys.version.split()[0]}",
          flush=True)
    print(header(), flush=True)
    failed = False
    start = time.perf_counter()
    for name in names:
        try:
            results = importlib.import_module(ROWS[name]).run(smoke=options.smoke)
        except Exception as error:  # one broken row must not hide the others
            traceback.print_exc(file=sys.stderr)
            results = [Result(name, "", "", verdict=f"failed: {type(error).__name__}: {error}")]
        for result in results:
            failed |= result.verdict.startswith("failed")
            print(line(result), flush=True)
    print(f"({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failed else 0
