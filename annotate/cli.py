"""Command line: ``annotate FILE [--entry EXPR] [--inputs EXPR] [--kwargs EXPR] [--setup STMTS]
[--export] [-o PATH] [--check]`` and the flags in `build_parser`; ``annotate review`` is
`annotate.review`.

Status and progress go to stderr (`annotate.status`); the annotated file or the exported module
to stdout unless ``-o``, as bytes in FILE's own encoding and newlines. Exit codes: 0 ok, 1
``--check`` found a mismatch, 2 bad usage or input, 3 the user's code raised (or cannot be
traced), 123 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from jaxside.annotate import interrupts
from jaxside.annotate.command import add_common, run_command
from jaxside.annotate.errors import EXIT_OK, Context, Failure, UserCodeRaised
from jaxside.annotate.output import check_target, emit, stdout_to_stderr, write
from jaxside.annotate.status import Status

__all__ = ["build_parser", "main"]

EPILOG = """\
output: stdout carries only the result (the annotated file in FILE's encoding and newline style,
  or the module); status, progress, your code's prints and errors go to stderr.
errors: one line, "error: FILE:LINE: what happened; what to do"; --debug adds the traceback.
exit codes: 0 ok, 1 --check found a mismatch, 2 bad usage or input, 3 your code raised or cannot
  be traced, 123 internal error (a jaxside bug), 130 interrupted (Ctrl-C; nothing is written).
review a hand-written JAX port against its torch original:
  annotate review TORCH_FILE PORT_FILE   (annotate review --help)
more, with examples: docs/usage.md and docs/errors.md in the jaxside source.
"""
class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error reported as one line like every other error."""

    def error(self, message: str) -> NoReturn:
        raise Failure(message, "see annotate --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="annotate",
        description="Trace a PyTorch file through torchax and write the JAX each line produced.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("file", metavar="FILE", help="the torch model file (never modified); - reads it from stdin")
    add("--entry", metavar="EXPR", help="what to trace: a function or module, as an expression in "
        "FILE's namespace with torch imported (default: FILE's example())")
    add("--inputs", metavar="EXPR", help="positional inputs: a tuple expression (anything else is the "
        "single argument)")
    add("--kwargs", metavar="EXPR", help="keyword inputs: a dict expression; non-tensor values stay "
        "Python constants, e.g. \"dict(use_cache=False)\"")
    add("--setup", metavar="STMTS", help="statements run before tracing, with `model` bound to the "
        "entry, e.g. 'model.setup_caches(1, 64)'")
    add("--export", action="store_true", help="write a structured JAX module instead of comments")
    add("--json", action="store_true", help="write the torch line -> JAX statements map as JSON instead "
        "of comments: each value's origin, shape and dtype (schema in docs/usage.md)")
    add("-o", "--output", metavar="PATH", help="write the result here instead of stdout (- is stdout); "
        "only if it changed, never FILE itself, and an existing file annotate did not write only "
        "with --force")
    add("--force", action="store_true", help="let -o and --html replace an existing file that annotate "
        "did not write")
    add("--check", action="store_true", help="run the exported module and compare it with torch "
        "(at the example inputs, and at other sizes where the export is generic)")
    add("--static-shapes", action="store_true", help="write every size as traced, not as expressions "
        "of the inputs' shapes (one extra trace per set of sizes fewer)")
    add("--rtol", type=float, default=None, metavar="X", help="relative tolerance for --check")
    add("--atol", type=float, default=None, metavar="X", help="absolute tolerance for --check")
    add("--abstract", action="store_true", help="build the entry on the meta device and trace shapes "
        "only: no weight is allocated (a 70B model on a laptop)")
    add("--shapes", action="store_true", help="show each value's shape and dtype in the comments")
    add("--html", metavar="PATH", help="also write a side-by-side HTML view to PATH (alone, without "
        "--export or -o, only the HTML is written)")
    add("--watch", metavar="PATH_OR_MODULE", action="append", default=[], help="also record this "
        "file, directory or module as user code (repeatable)")
    add_common(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "review":
        from jaxside.annotate import review

        return review.main(argv[1:])
    return run_command(build_parser(), argv, _check_options, _run)


def _run(options: argparse.Namespace, context: Context) -> int:
    status = options.status = Status(verbosity=options.verbosity)
    try:
        # Whatever else goes to stderr meanwhile (warnings, --check) clears the live line first.
        with contextlib.redirect_stderr(status.writer()):
            return _annotate(options, context, status)
    finally:
        status.close()


def _annotate(options: argparse.Namespace, context: Context, status: Status) -> int:
    status.phase("loading torch and jax")  # before the imports: the first seconds are theirs
    with interrupts.deferred():
        import jax  # noqa: F401
        import torch  # noqa: F401

        from jaxside.annotate.loading import (
            defined_names,
            find_entry,
            load_file,
            namespace_of,
            source_encoding,
        )
        from jaxside.tracing import Capture, CaptureError, user_code

    file = str(Path(options.file).resolve())
    # The user's prints must not land in the annotated file or module on stdout.
    with stdout_to_stderr(), _traceback_filtering(not options.debug):
        interrupts.check()
        status.phase(f"importing {Path(options.shown_file).name}")
        watch = [file]
        context.is_user_file = user_code(None, watch)
        module = load_file(options.file)
        context.defined = defined_names(namespace_of(module))
        watch += [_resolve_watch(item) for item in options.watch]
        interrupts.check()
        status.phase("building the model and its inputs")
        entry = find_entry(module, options, abstract=options.abstract)
        context.is_user_file = user_code(entry.fn, watch)
        status.modules = _module_positions(entry.fn)
        interrupts.check()
        status.phase(f"tracing {_name(entry.fn)}")
        capture = Capture(watch=watch, abstract=options.abstract, progress=status.progress)
        try:
            trace = capture(entry.fn, *entry.args, **entry.kwargs)
        except CaptureError:
            raise
        except (Exception, SystemExit) as error:
            raise UserCodeRaised(f"tracing {_name(entry.fn)}", error) from error
    interrupts.check()
    status.phase(f"rendering {len(trace.jaxpr.jaxpr.eqns):,} equations")
    code = EXIT_OK
    if options.export or options.check:
        from jaxside.annotate.export import run

        retrace = None
        if not options.static_shapes:
            def retrace(resize: dict[str, tuple[int, ...]]) -> Any:
                again = Capture(watch=watch, abstract=options.abstract, resize=resize)
                with stdout_to_stderr():
                    return again(entry.fn, *entry.args, **entry.kwargs)
        code = run(options, entry, trace, retrace)
    elif options.json:
        from jaxside.render.json import to_json

        emit(to_json(trace), options, form="json")
    elif not options.html or options.output:
        from jaxside.render.comments import annotate_file

        emit(annotate_file(trace, file, shapes=options.shapes), options, encoding=source_encoding(file))
    if options.html:
        from jaxside.render.html import side_by_side

        write(side_by_side(trace, file, shapes=options.shapes), options.html, options, "--html", form="html")
    return code


def _module_positions(fn: Any) -> dict[str, int]:
    """The entry's submodule paths in definition order (``""`` the root), when it is a module."""
    import torch

    if not isinstance(fn, torch.nn.Module):
        return {}
    return {path: n for n, (path, _) in enumerate(fn.named_modules(remove_duplicate=False))}


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
    from jaxside.annotate.loading import check_source

    check_source(options.file)
    if options.json and (options.export or options.check):
        raise Failure("--json writes the line map, --export and --check the module", "give one of them")
    if options.abstract and options.check:
        raise Failure("--check compares numbers with torch, and --abstract has none",
                      "drop --abstract to check, or --check to see the abstract trace")
    for name in ("rtol", "atol"):
        value = getattr(options, name)
        if value is not None and not value >= 0:
            raise Failure(f"--{name} must be a number >= 0, not {value}", f"e.g. --{name} 1e-5")
    if options.output == "-" and options.html == "-":
        raise Failure("-o - and --html - both want stdout", "write one of them to a file")
    if (options.output and options.html and options.output != "-"
            and Path(options.output).resolve() == Path(options.html).resolve()):
        raise Failure("-o and --html name the same file", "give them different paths",
                      file=options.output)
    for flag, path in (("-o", options.output), ("--html", options.html)):
        if path and path != "-":
            check_target(path, options, flag)


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


def _name(fn: Any) -> str:
    return type(fn).__name__ if not hasattr(fn, "__qualname__") else fn.__qualname__
