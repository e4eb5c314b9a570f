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
import ast
import contextlib
import importlib.util
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from annotate import __version__, interrupts
from annotate.errors import (
    EXIT_OK,
    Context,
    Failure,
    UserCodeRaised,
    run_command,
)
from annotate.status import Status

__all__ = ["build_parser", "emit", "main"]

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
    add("-o", "--output", metavar="PATH", help="write the result here instead of stdout (- is stdout); "
        "only if it changed, never FILE itself, and an existing file annotate did not write only "
        "with --force")
    add("--force", action="store_true", help="let -o and --html replace an existing file that annotate "
        "did not write")
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
    add_common(parser)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "review":
        from annotate import review

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

        from annotate.loading import find_entry, load_file, namespace_of, source_encoding
        from tracing import Capture, CaptureError, user_code

    file = str(Path(options.file).resolve())
    # The user's prints must not land in the annotated file or module on stdout.
    with contextlib.redirect_stdout(sys.stderr), _traceback_filtering(not options.debug):
        interrupts.check()
        status.phase(f"importing {Path(options.shown_file).name}")
        watch = [file]
        context.is_user_file = user_code(None, watch)
        module = load_file(options.file)
        context.namespace = namespace_of(module)
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
        from annotate.export import run

        code = run(options, entry, trace)
    elif not options.html or options.output:
        from render.comments import annotate_file

        emit(annotate_file(trace, file, shapes=options.shapes), options, encoding=source_encoding(file))
    if options.html:
        from render.html import side_by_side

        _write(side_by_side(trace, file, shapes=options.shapes), options.html, options, "--html")
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


def emit(text: str, options: argparse.Namespace, *, encoding: str = "utf-8") -> None:
    """Write the result to ``-o`` (only if it changed) or to stdout, encoded in `encoding`."""
    if options.output and options.output != "-":
        _write(text, options.output, options, "-o", encoding=encoding)
    else:
        _to_stdout(text if text.endswith("\n") or not text else text + "\n", encoding)


def _encode(text: str, encoding: str) -> bytes:
    # Only comments can hold what the encoding lacks (FILE's own text came from it): escape it there.
    return text.encode(encoding, errors="backslashreplace")


def _to_stdout(text: str, encoding: str) -> None:
    """Bytes on stdout, the same `-o` would write, whatever encoding the terminal or locale has."""
    interrupts.check()
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream put in place of stdout
        sys.stdout.write(text)
    else:
        buffer.write(_encode(text, encoding))
        buffer.flush()


def _say(options: argparse.Namespace, text: str) -> None:
    status = getattr(options, "status", None)
    if status is not None:
        status.say(text)
    elif getattr(options, "verbosity", 0) >= 0:
        print(f"annotate: {text}", file=sys.stderr)


def _write(text: str, path: str, options: argparse.Namespace, flag: str, *, encoding: str = "utf-8") -> None:
    """Write `text` to `path` when it changed: whole or not at all (a temporary file renamed over it)."""
    interrupts.check()
    if path == "-":
        _to_stdout(text, encoding)
        return
    _check_target(path, options, flag)
    data = _encode(text, encoding)
    target = Path(path).resolve()
    try:
        if target.is_file() and target.read_bytes() == data:
            _say(options, f"{path} unchanged")
            return
        _replace(target, data)
    except OSError as error:
        raise Failure(f"cannot write it ({error.strerror})",
                      "choose a path in a directory you can write to", file=path) from None
    _say(options, f"wrote {path}")


def _replace(target: Path, data: bytes) -> None:
    if target.exists() and not target.is_file():  # a device or a pipe: write into it
        with open(target, "wb") as out:
            out.write(data)
        return
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        interrupts.check()
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _lower(text: str | None) -> str:
    return (text[:1].lower() + text[1:]) if text else "cannot create a file"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    if options.output == "-" and options.html == "-":
        raise Failure("-o - and --html - both want stdout", "write one of them to a file")
    if (options.output and options.html and options.output != "-"
            and Path(options.output).resolve() == Path(options.html).resolve()):
        raise Failure("-o and --html name the same file", "give them different paths",
                      file=options.output)
    for flag, path in (("-o", options.output), ("--html", options.html)):
        if path and path != "-":
            _check_target(path, options, flag)


def _check_target(path: str, options: argparse.Namespace, flag: str) -> None:
    """Refuse an output path before anything runs: FILE itself, a directory, a place that cannot
    be written (tried, not guessed: root passes every permission check), or an existing file
    annotate did not write, unless --force."""
    target = Path(path)
    source = Path(options.file)
    if target.resolve() == source.resolve() or (
        target.exists() and source.exists() and os.path.samefile(target, source)
    ):
        raise Failure(f"{flag} names FILE itself, and annotate never overwrites its input",
                      f"write somewhere else, e.g. {flag} {source.stem}_jax.py", file=path)
    if target.is_dir():
        raise Failure(f"{flag} names a directory", "give a file path", file=path)
    resolved = target.resolve()
    directory = resolved.parent
    if not directory.is_dir():
        raise Failure(f"its directory {directory} does not exist", f"create it, or choose another {flag}",
                      file=path)
    denied = Failure("cannot write there (permission denied)",
                     f"choose another {flag} in a directory you can write to", file=path)
    if resolved.exists() and not resolved.is_file():  # a device or a pipe is written into
        if not os.access(resolved, os.W_OK):
            raise denied
        return
    if resolved.exists() and not os.access(resolved, os.W_OK):
        raise denied
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{resolved.name}.", suffix=".tmp"):
            pass
    except OSError as error:
        raise Failure(f"cannot write there ({_lower(error.strerror)})",
                      f"choose another {flag} in a directory you can write to", file=path) from None
    if resolved.is_file() and not options.force and not _written_by_annotate(resolved, source):
        raise Failure("exists, and annotate did not write it",
                      f"pass --force to replace it, or choose another {flag}", file=path)


def _written_by_annotate(target: Path, source: Path) -> bool:
    """Whether replacing `target` loses nothing annotate did not write: it is empty, names jaxside
    near its top (an exported module), holds ``jax:`` notes (annotated copies, HTML views), or
    is FILE's code with other comments."""
    try:
        data = target.read_bytes()
    except OSError:
        return False
    if not data.strip() or b"jaxside" in data[:2000] or b"# jax: " in data or b"jax: def " in data:
        return True
    try:
        return ast.dump(ast.parse(source.read_bytes())) == ast.dump(ast.parse(data))
    except (OSError, SyntaxError, ValueError):
        return False


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
