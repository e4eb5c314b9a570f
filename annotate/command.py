"""Run a command line: parse, check, run in an isolated import state, every failure one `error:` line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from annotate.errors import EXIT_INTERRUPTED, Context, Failure, describe, report
from annotate.loading import isolated


def run_command(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    check: Callable[[argparse.Namespace], None],
    run: Callable[[argparse.Namespace, Context], int],
) -> int:
    """Parse `argv`, then `check` and `run` the command in an isolated import state, every
    failure ending as one `error:` line with its exit code."""
    try:
        options = parser.parse_args(argv)
    except SystemExit as exit:  # --help
        return int(exit.code or 0)
    except Failure as failure:
        print(failure.text(), file=sys.stderr)
        return failure.code
    context = Context(options.file)
    try:
        check(options)
        with isolated():
            return run(options, context)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as error:  # every failure ends as one line (SystemExit from user code too)
        failure = describe(error, context)
        report(failure, context, error, debug=options.debug)
        return failure.code
