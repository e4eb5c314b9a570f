"""Command line: ``annotate FILE [--entry EXPR] [--inputs EXPR] [--kwargs EXPR] [--setup STMTS]
[--export] [-o PATH] [--check]``.

Status goes to stderr; the annotated file or the exported module to stdout unless ``-o``.
Exit codes: 0 ok, 1 ``--check`` found a mismatch, 2 bad usage or input, 3 the user's code
raised, 123 internal error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_USER_CODE, EXIT_INTERNAL = 0, 1, 2, 3, 123


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="annotate",
        description="Trace a PyTorch file through torchax and write the JAX each line produced.",
    )
    parser.add_argument("file", metavar="FILE", help="the torch model file")
    parser.add_argument("--entry", metavar="EXPR", help="what to trace: a function or module, "
                        "as an expression in FILE's namespace (default: FILE's example())")
    parser.add_argument("--inputs", metavar="EXPR", help="positional inputs, an expression giving a tuple")
    parser.add_argument("--kwargs", metavar="EXPR", help="keyword inputs, an expression giving a dict")
    parser.add_argument("--setup", metavar="STMTS", help="statements run with `model` bound to the entry")
    parser.add_argument("--export", action="store_true", help="write a structured JAX module instead")
    parser.add_argument("-o", "--output", metavar="PATH", help="write here instead of stdout")
    parser.add_argument("--check", action="store_true", help="run the export and compare with torch")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    from annotate.loading import load_entry
    from tracing import capture

    entry = load_entry(options)
    trace = capture(entry.fn, *entry.args, **entry.kwargs)
    print(f"traced {trace.entry}: {len(trace.jaxpr.jaxpr.eqns)} equations", file=sys.stderr)
    return EXIT_OK
