"""``annotate review TORCH_FILE PORT_FILE``: check a hand-written JAX port against its torch original."""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from jaxside.annotate.command import add_common, run_command
from jaxside.annotate.errors import EXIT_MISMATCH, EXIT_OK, Failure
from jaxside.annotate.options import ReviewOptions
from jaxside.annotate.output import Guard, check_target, stdout_to_stderr, to_stdout, write
from jaxside.annotate.status import Status

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Failure(message, "see annotate review --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="annotate review", description="Run a torch model and its hand-written JAX "
                     "port on the same inputs and weights and find the first line where they differ.",
                     epilog="Exit codes: 0 outputs match, 1 they diverge, 2 bad usage or input, 3 your "
                     "code raised. See docs/review.md.")
    add = parser.add_argument
    add("file", metavar="TORCH_FILE", help="the torch original")
    add("port", metavar="PORT_FILE", help="the JAX port")
    add("--entry", metavar="EXPR", help="torch side, as for annotate (default: TORCH_FILE's example())")
    add("--inputs", metavar="EXPR", help="torch inputs, a tuple expression; the port gets them too")
    add("--kwargs", metavar="EXPR", help="torch keyword inputs, a dict expression")
    add("--setup", metavar="STMTS", help="statements run before tracing, with `model` bound")
    add("--port-entry", metavar="NAME", help="the port's function, module or factory (default: forward, "
        "else build): a function's leading arguments are weight pytrees, its last ones take the torch "
        "inputs; a Flax NNX, Flax Linen or Equinox module (or a function returning one) is called on them")
    add("--params-map", metavar="FILE", help="a Python file defining PARAMS_MAP = {port leaf path: "
        "state_dict name}, e.g. {\"params['embed']\": 'tok_embeddings.weight'} or, for a module port, "
        "{'layers.0.attn.q.kernel': 'layers.0.attention.wqkv.weight[0:64]'}; overrides the guess")
    add("--port-weights", metavar="NAME", help="the port's own weight loader, NAME(port_model, "
        "torch_state_dict) in PORT_FILE, returning the loaded port (or filling it in place): the port "
        "runs on its weights, and each leaf is checked against review's own mapping")
    add("--rtol", type=float, default=1e-5, metavar="X", help="relative tolerance (default 1e-5)")
    add("--atol", type=float, default=1e-6, metavar="X", help="absolute tolerance (default 1e-6)")
    add("--html", metavar="PATH", help="also write a two-column HTML view of both files to PATH")
    add("--force", action="store_true", help="let --html replace a file that annotate did not write")
    add_common(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv, ReviewOptions.from_namespace, _check,
                       lambda options, context: _run(options))


def _check(options: ReviewOptions) -> None:
    from jaxside.annotate.loading import check_source

    roles = ("the torch .py file to review", "the JAX port's .py file", "the --params-map .py file")
    for path, role in zip((options.source.file, options.port, options.params_map), roles, strict=True):
        if isinstance(path, str):
            check_source(path, role)
    for name, value in (("rtol", options.rtol), ("atol", options.atol)):
        if not value >= 0:
            raise Failure(f"--{name} must be a number >= 0", f"e.g. --{name} 1e-5")
    if options.html and options.html != "-":
        check_target(options.html, _guard(options), "--html")


def _run(options: ReviewOptions) -> int:
    status = Status(verbosity=options.verbosity)
    try:
        # Whatever else goes to stderr meanwhile (warnings, the user's prints) clears the live line first.
        with contextlib.redirect_stderr(status.writer()):
            return _review(options, status)
    finally:
        status.close()


def _review(options: ReviewOptions, status: Status) -> int:
    status.phase("loading torch and jax")
    from jaxside.annotate.loading import find_entry, load_file
    from jaxside.annotate.noise import library_warnings
    from jaxside.annotate.review.result import review_entries
    from jaxside.tracing import user_code

    with stdout_to_stderr():
        status.phase(f"tracing {Path(options.source.file).name}")
        entry = find_entry(load_file(options.source.file), options.source)
        # The engines' warnings dropped (JAX's int64 `arange` under torchax), as annotate does.
        is_user_file = user_code(entry.fn, [options.source.file, options.port])
        with library_warnings(is_user_file, status.say, set()):
            def port_of(torch_entry: Any) -> Any:
                return _port_entry(options, torch_entry, entry.fn)

            review = review_entries(options, entry, port_of, status.phase)
    status.close()  # the report follows on stdout, the live line cleared first
    to_stdout(review.text())
    if options.html:
        write(review.html(), options.html, _guard(options), "--html", status.say, form="html")
    return EXIT_OK if review.ok else EXIT_MISMATCH


def _guard(options: ReviewOptions) -> Guard:
    """What decides whether ``--html`` may be written: TORCH_FILE, and ``--force``."""
    return Guard(options.source.file, options.force)


def _port_entry(options: ReviewOptions, torch_entry: str, model: Any = None) -> tuple[Any, Any, str]:
    """PORT_FILE loaded, and the port in it: ``--port-entry``, else `forward`, else `build`, else
    `from_torch` given the torch module (an NNX or Equinox export), else what has the torch entry's
    name (an export of a torch function keeps the function's name)."""
    module = _load_port(options.port)
    named = torch_entry.rpartition(".")[2]
    defaults = ("forward", "build", "from_torch", named)
    name = options.port_entry or next((n for n in defaults if hasattr(module, n)), "forward")
    entry = getattr(module, name, None)
    if name == "from_torch" and callable(entry) and model is not None:
        entry = functools.partial(entry, model)  # the structure from the converter; review maps the weights
    if entry is None or not callable(entry) and not isinstance(entry, tuple):
        what = (f"no {name}" if options.port_entry
                else f"no forward (a function), build (returning a module) or {named}")
        raise Failure(f"defines {what}", "name the port's function, module or factory with --port-entry",
                      file=options.port)
    return module, entry, name


def _load_port(path: str) -> Any:
    """Import the port; a framework it needs that is missing is bad input, said in one line."""
    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.installed import pip_install
    from jaxside.annotate.loading import load_file
    from jaxside.annotate.review.frameworks import FRAMEWORKS

    try:
        return load_file(path)
    except UserCodeRaised as raised:
        error = raised.error
        root = (getattr(error, "name", None) or "").split(".")[0]
        if not isinstance(error, ModuleNotFoundError) or root not in FRAMEWORKS:
            raise
        file = str(Path(path).resolve())
        frames = [f for f in _frames(error.__traceback__) if str(Path(f.tb_frame.f_code.co_filename)) == file]
        raise Failure(f"needs {root}, which is not installed", f"{pip_install('review')} (or {root})",
                      file=path, line=frames[-1].tb_lineno if frames else None) from None


def _frames(tb: Any) -> list[Any]:
    found = []
    while tb is not None:
        found.append(tb)
        tb = tb.tb_next
    return found


