"""Run a command line: parse, check, run in an isolated import state, every failure one `error:` line."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from jaxside.annotate import __version__, interrupts
from jaxside.annotate.errors import EXIT_INTERRUPTED, Failure, UserFiles, describe, report
from jaxside.annotate.loading import STDIN, isolated, readable_copy

T = TypeVar("T")


def run_command(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    make: Callable[[argparse.Namespace], T],
    check: Callable[[T], None],
    run: Callable[[T, UserFiles], int],
) -> int:
    """Parse `argv`, `make` the command's options once (inputs read from pipes already in
    files), then `check` and `run` the command in an isolated import state, every failure
    ending as one `error:` line with its exit code, and Ctrl-C as exit 130 whenever it comes
    (see `annotate.interrupts`)."""
    with interrupts.handling():
        try:
            parsed = parser.parse_args(argv)
        except SystemExit as exit:  # --help, --version
            return int(exit.code or 0)
        except Failure as failure:
            print(failure.text(), file=sys.stderr)
            return failure.code
        except KeyboardInterrupt:
            return _interrupted()
        user_files = UserFiles(parsed.file)
        try:
            with contextlib.ExitStack() as stack:
                options = make(_read_pipes(parsed, user_files, stack))
                check(options)
                with isolated():
                    code = run(options, user_files)
            interrupts.check()
            return code
        except KeyboardInterrupt:
            return _interrupted()
        except BaseException as error:  # every failure ends as one line (SystemExit from user code too)
            if interrupts.interrupted():  # a Ctrl-C that code on the way turned into another error
                return _interrupted()
            failure = describe(error, user_files)
            report(failure, user_files, error, debug=parsed.debug)
            return failure.code


def add_common(parser: argparse.ArgumentParser) -> None:
    """The flags every `annotate` command has: -q, -v, --debug, --version."""
    add = parser.add_argument
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0,
                          help="print nothing on stderr but errors and --check results")
    loudness.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                          help="print every phase as a line with its time, also on a terminal")
    add("--debug", action="store_true", help="on error, show the full Python traceback")
    add("--version", action="version", version=f"%(prog)s (jaxside {__version__})")


_SOURCE_OPTIONS = ("file", "port")
"""The options that name Python source files to load (`annotate`'s FILE; `review`'s two files)."""


def _read_pipes(
    parsed: argparse.Namespace, user_files: UserFiles, stack: contextlib.ExitStack
) -> argparse.Namespace:
    """Inputs given as ``-``, ``/dev/stdin`` or another pipe are read once into temporary files:
    the options returned name those (`shown_file`: FILE as given), and errors the names given."""
    values = {**vars(parsed), "shown_file": parsed.file}
    for name in _SOURCE_OPTIONS:
        given = values.get(name)
        if given is None:
            continue
        path = stack.enter_context(readable_copy(given))
        if path != given:
            shown = "<stdin>" if given == STDIN else given
            user_files.copies[str(Path(path).resolve())] = shown
            values[name] = path
            if name == "file":
                values["shown_file"] = shown
    return argparse.Namespace(**values)


def _interrupted() -> int:
    print("error: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED
