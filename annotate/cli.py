"""Command line: ``annotate FILE [--entry EXPR] [--inputs EXPR] [--kwargs EXPR] [--setup STMTS]
[--export] [-o PATH] [--check]`` and the flags in `build_parser`.

Status and progress go to stderr; the annotated file or the exported module to stdout unless
``-o``. Exit codes: 0 ok, 1 ``--check`` found a mismatch, 2 bad usage or input, 3 the user's
code raised (or cannot be traced), 123 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from annotate.command import run_command
from annotate.errors import EXIT_OK, Context, Failure, UserCodeRaised
from annotate.output import check_target, emit, write

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported as one line like every other error."""

    def error(self, message: str) -> NoReturn:
        raise Failure(message, "see annotate --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="annotate",
        description="Trace a PyTorch file through torchax and write the JAX each line produced.",
        epilog="Exit codes: 0 ok, 1 --check mismatch, 2 bad usage or input, 3 your code raised or "
        "cannot be traced, 123 internal error. See docs/usage.md and docs/errors.md.",
    )
    add = parser.add_argument
    add("file", metavar="FILE", help="the torch model file (never modified)")
    add("--entry", metavar="EXPR", help="what to trace: a function or module, as an expression in "
        "FILE's namespace with torch imported (default: FILE's example())")
    add("--inputs", metavar="EXPR", help="positional inputs: a tuple expression (anything else is the "
        "single argument)")
    add("--kwargs", metavar="EXPR", help="keyword inputs: a dict expression; non-tensor values stay "
        "Python constants, e.g. \"dict(use_cache=False)\"")
    add("--setup", metavar="STMTS", help="statements run before tracing, with `model` bound to the "
        "entry, e.g. 'model.setup_caches(1, 64)'")
    add("--export", action="store_true", help="write a structured JAX module instead of comments")
    add("-o", "--output", metavar="PATH", help="write the result here instead of stdout (only if it "
        "changed; never FILE itself)")
    add("--check", action="store_true", help="run the exported module and compare it with torch")
    add("--rtol", type=float, default=None, metavar="X", help="relative tolerance for --check")
    add("--atol", type=float, default=None, metavar="X", help="absolute tolerance for --check")
    add("--abstract", action="store_true", help="build the entry on the meta device and trace shapes "
        "only: no weight is allocated (a 70B model on a laptop)")
    add("--shapes", action="store_true", help="show each value's shape and dtype in the comments")
    add("--html", metavar="PATH", help="also write a side-by-side HTML view to PATH (alone, without "
        "--export or -o, only the HTML is written)")
    add("--watch", metavar="PATH_OR_MODULE", action="append", default=[], help="also record this "
        "file, directory or module as user code (repeatable)")
    add("--debug", action="store_true", help="on error, show the full Python traceback")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "review":
        from annotate import review

        return review.main(argv[1:])
    return run_command(build_parser(), argv, _check_options, _run)


def _run(options: argparse.Namespace, context: Context) -> int:
    from annotate.loading import defined_names, find_entry, load_file, namespace_of
    from tracing import PROGRESS_AFTER, Capture, CaptureError, user_code

    started = time.monotonic()
    file = str(Path(options.file).resolve())
    # The user's prints must not land in the annotated file or module on stdout.
    with contextlib.redirect_stdout(sys.stderr), _traceback_filtering(not options.debug):
        watch = [file]
        context.is_user_file = user_code(None, watch)
        module = load_file(options.file)
        context.defined = defined_names(namespace_of(module))
        watch += [_resolve_watch(item) for item in options.watch]
        entry = find_entry(module, options, abstract=options.abstract)
        context.is_user_file = user_code(entry.fn, watch)
        capture = Capture(watch=watch, abstract=options.abstract, progress=_print_progress)
        try:
            trace = capture(entry.fn, *entry.args, **entry.kwargs)
        except CaptureError:
            raise
        except (Exception, SystemExit) as error:
            raise UserCodeRaised(f"tracing {_name(entry.fn)}", error) from error
    if time.monotonic() - started > PROGRESS_AFTER:
        print(f"annotate: rendering: {len(trace.jaxpr.jaxpr.eqns):,} equations, "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    code = EXIT_OK
    if options.export or options.check:
        from annotate.export import run

        code = run(options, entry, trace)
    elif not options.html or options.output:
        from render.comments import annotate_file

        emit(annotate_file(trace, file, shapes=options.shapes), options)
    if options.html:
        from render.html import side_by_side

        write(side_by_side(trace, file, shapes=options.shapes), options.html, options.file, "--html")
    return code


@contextlib.contextmanager
def _traceback_filtering(on: bool) -> Iterator[None]:
    """JAX hides its own frames from tracebacks; --debug wants them all."""
    import jax

    previous = jax.config.jax_traceback_filtering
    if not on:
        jax.config.update("jax_traceback_filtering", "off")
    try:
        yield
    finally:
        jax.config.update("jax_traceback_filtering", previous)


def _check_options(options: argparse.Namespace) -> None:
    """Refuse what cannot work before importing torch or loading anything."""
    from annotate.loading import check_source

    check_source(options.file)
    if options.abstract and options.check:
        raise Failure("--check compares numbers with torch, and --abstract has none",
                      "drop --abstract to check, or --check to see the abstract trace")
    for name in ("rtol", "atol"):
        value = getattr(options, name)
        if value is not None and not value >= 0:
            raise Failure(f"--{name} must be a number >= 0, not {value}", f"e.g. --{name} 1e-5")
    if options.output and options.html and Path(options.output).resolve() == Path(options.html).resolve():
        raise Failure("-o and --html name the same file", "give them different paths",
                      file=options.output)
    for flag, path in (("-o", options.output), ("--html", options.html)):
        if path:
            check_target(path, options.file, flag)


def _resolve_watch(item: str) -> str:
    """A --watch item as a path: files and directories as given, a module as its file or package."""
    if Path(item).exists():
        return str(Path(item).resolve())
    try:
        spec = importlib.util.find_spec(item)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return str(Path(next(iter(spec.submodule_search_locations))).resolve())
    if spec is not None and spec.origin and Path(spec.origin).exists():
        return str(Path(spec.origin).resolve())
    raise Failure(f"--watch {item}: no such file, directory or importable module",
                  "give a path, or a module name FILE can import")


def _print_progress(progress: Any) -> None:
    where = ""
    if progress.module_path is not None:
        where = f" {progress.module_path or 'the root module'}" + (
            f" ({progress.module_type})" if progress.module_type else ""
        )
    print(f"annotate: {progress.phase}{where}: {progress.equations:,} equations, {progress.seconds:.1f} s",
          file=sys.stderr, flush=True)


def _name(fn: Any) -> str:
    return type(fn).__name__ if not hasattr(fn, "__qualname__") else fn.__qualname__
