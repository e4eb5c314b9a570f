"""Command line: ``annotate FILE [--entry EXPR] [--inputs EXPR] [--kwargs EXPR] [--setup STMTS]
[--export] [-o PATH] [--check]`` and the flags in `build_parser`; ``annotate review`` is
`annotate.review.command`. Which outputs one run writes, and where: `annotate.results`.

Status and progress go to stderr (`annotate.status`); the annotated file or the exported module
to stdout unless ``-o``, as bytes in FILE's own encoding and newlines. Exit codes: 0 ok, 1
``--check`` found a mismatch, 2 bad usage or input, 3 the user's code raised (or cannot be
traced), 123 internal error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from jaxside.annotate import interrupts
from jaxside.annotate.collecting import attempt, collection, leave, settle
from jaxside.annotate.command import add_common, run_command
from jaxside.annotate.errors import Failure, UserCodeRaised, UserFiles
from jaxside.annotate.files import imported_beside, resolve_watch
from jaxside.annotate.noise import library_warnings
from jaxside.annotate.options import MAIN, Options
from jaxside.annotate.output import stdout_to_stderr
from jaxside.annotate.preflight import check_expressions
from jaxside.annotate.results import check_outputs, write_results
from jaxside.annotate.retracing import announced
from jaxside.annotate.status import Status

__all__ = ["build_parser", "main"]

EPILOG = """\
output: stdout carries only the result (the annotated file in its encoding and newline style,
  or the module); status, progress, your code's prints and errors go to stderr. The annotated
  file is FILE, or when FILE's own lines made no JAX (an example() importing the model) the file
  with most lines that did; a note on stderr names the others (--file NAME, -o DIR/ for all).
  One run writes every output asked for: --export -o m.py --html v.html --json map.json --check.
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

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        options = super().parse_args(args, namespace)
        if options.file is None and isinstance(options.json, str):  # `annotate --json model.py`
            options.file, options.json = options.json, MAIN
        if options.file is None:
            self.error("the following arguments are required: FILE")
        return options


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="annotate",
        description="Trace a PyTorch file through torchax and write the JAX each line produced.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("file", metavar="FILE", nargs="?", help="the torch model file (never modified); - reads it from "
        "stdin")
    add("--entry", metavar="EXPR", help="what to trace: a function or module, as an expression in "
        "FILE's namespace with torch imported (default: FILE's example())")
    add("--inputs", metavar="EXPR", help="positional inputs: a tuple expression (anything else is the "
        "single argument)")
    add("--kwargs", metavar="EXPR", help="keyword inputs: a dict expression; non-tensor values stay "
        "Python constants, e.g. \"dict(use_cache=False)\"")
    add("--setup", metavar="STMTS", help="statements run before tracing, with `model` bound to the "
        "entry, e.g. 'model.setup_caches(1, 64)'")
    add("--export", action="store_true", help="write a structured JAX module instead of comments")
    add("--style", choices=("functional", "nnx", "equinox"), default="functional",
        help="the --export module's style: defs over params dicts (functional, the default), Flax NNX "
        "modules (nnx) or Equinox modules (equinox), each with from_torch(model) converting the weights")
    add("--json", metavar="PATH", nargs="?", const=MAIN, help="the torch line -> JAX statements map as "
        "JSON, every traced file's lines: each value's origin, shape and dtype (schema in docs/usage.md); "
        "bare, instead of comments; with a PATH, written there beside the other outputs")
    add("-o", "--output", metavar="PATH", help="write the result here instead of stdout (- is stdout); "
        "only if it changed, never FILE itself, and an existing file annotate did not write only "
        "with --force; a directory (DIR/) gets an annotated copy of every file whose code made JAX")
    add("--file", dest="file_name", metavar="NAME", help="show the comments of this traced file (a "
        "name or path; default: FILE if its lines made JAX, else the file with most lines that did)")
    add("--force", action="store_true", help="let -o and --html replace an existing file that annotate "
        "did not write")
    add("--check", action="store_true", help="run the exported module and compare it with torch "
        "(at the example inputs, and at other sizes where the export is generic); without --export, "
        "beside the comments (or the other outputs asked for)")
    add("--static-shapes", action="store_true", help="write every size as traced, not as expressions "
        "of the inputs' shapes (one extra trace per set of sizes fewer)")
    add("--rtol", type=float, default=None, metavar="X", help="relative tolerance for --check")
    add("--atol", type=float, default=None, metavar="X", help="absolute tolerance for --check")
    add("--abstract", action="store_true", help="build the entry on the meta device and trace shapes "
        "only: no weight is allocated (a 70B model on a laptop)")
    add("--shapes", action="store_true", help="show each value's shape and dtype in the comments")
    add("--html", metavar="PATH", help="also write a side-by-side HTML view to PATH (without -o, "
        "--export or a bare --json, only the HTML and --json PATH are written)")
    add("--watch", metavar="PATH_OR_MODULE", action="append", default=[], help="also record this "
        "file, directory or module as user code (repeatable)")
    add_common(parser)
    # FILE is optional to argparse only so that `annotate --json model.py` still reads model.py as FILE.
    parser.usage = parser.format_usage().removeprefix("usage: ").replace(" [FILE]", " FILE").strip()
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "review":
        from jaxside.annotate.review.command import main as review

        return review(argv[1:])
    return run_command(build_parser(), argv, Options.from_namespace, _check_options, _run)


def command() -> None:
    """The `annotate` script: `main`, then the process ends without freeing its heap (`collecting.leave`)."""
    leave(main())


def _run(options: Options, user_files: UserFiles) -> int:
    status = Status(verbosity=options.verbosity)
    try:
        # Whatever else goes to stderr meanwhile (warnings, --check) clears the live line first.
        with contextlib.redirect_stderr(status.writer()), collection():
            return _annotate(options, user_files, status)
    finally:
        status.close()


def _annotate(options: Options, user_files: UserFiles, status: Status) -> int:
    status.phase("loading torch and jax")  # before the imports: the first seconds are theirs
    with interrupts.deferred():
        import jax  # noqa: F401
        import torch  # noqa: F401

        from jaxside.annotate.loading import defined_names, find_entry, load_file, namespace_of
        from jaxside.tracing import Capture, CaptureError, user_code

    settle()  # torch and jax, imported: frozen out of the run's collections
    source = options.source
    file = str(Path(source.file).resolve())
    # The user's prints must not land in the annotated file or module on stdout.
    with stdout_to_stderr(), _traceback_filtering(not options.debug):
        interrupts.check()
        status.phase(f"importing {Path(source.shown_file).name}")
        watch = [file]
        user_files.is_user_file = user_code(None, watch)
        before = set(sys.modules)
        module = load_file(source.file)
        user_files.defined = defined_names(namespace_of(module))
        watch += imported_beside(before, file) + [resolve_watch(item) for item in options.watch]
        interrupts.check()
        status.phase("building the model and its inputs")
        entry = find_entry(module, source, abstract=options.abstract)
        user_files.is_user_file = user_code(entry.fn, watch)
        # The engines' warnings dropped from here on; what they say about the user's code said once.
        quiet = functools.partial(library_warnings, user_files.is_user_file, status.say, set())
        status.modules = _module_positions(entry.fn)
        interrupts.check()
        status.phase(f"tracing {_name(entry.fn)}")
        capture = Capture(watch=watch, abstract=options.abstract, progress=status.progress)
        try:
            with quiet():
                trace = capture(entry.fn, *entry.args, **entry.kwargs)
        except CaptureError:
            raise
        except (Exception, SystemExit) as error:
            raise UserCodeRaised(f"tracing {_name(entry.fn)}", error) from error
    interrupts.check()
    settle()
    status.phase(f"rendering {len(trace.jaxpr.jaxpr.eqns):,} equations")
    retrace = None
    if options.jax.generic:
        def retrace(resize: dict[str, tuple[int, ...]]) -> Any:
            settle()  # the program before, kept until the sizes are fitted
            again = Capture(
                watch=watch, abstract=options.abstract, resize=resize, progress=status.progress, like=trace
            )
            with stdout_to_stderr(), quiet(), attempt():
                return again(entry.fn, *entry.args, **entry.kwargs)
        retrace = announced(retrace, status, trace)
    with quiet():
        return write_results(options, trace, entry, retrace, status.say, status)


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


def _check_options(options: Options) -> None:
    """Refuse what cannot work before importing torch or loading anything."""
    from jaxside.annotate.loading import check_source

    check_source(options.source.file)
    check_expressions(options.source)
    if options.abstract and options.jax.check:
        raise Failure("--check compares numbers with torch, and --abstract has none",
                      "drop --abstract to check, or --check to see the abstract trace")
    for name, value in (("rtol", options.jax.rtol), ("atol", options.jax.atol)):
        if value is not None and not value >= 0:
            raise Failure(f"--{name} must be a number >= 0, not {value}", f"e.g. --{name} 1e-5")
    check_outputs(options)


def _name(fn: Any) -> str:
    return type(fn).__name__ if not hasattr(fn, "__qualname__") else fn.__qualname__
