"""Turn what went wrong into one line: ``error: FILE:LINE: what happened; what to do``."""

from __future__ import annotations

import ast
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_USER_CODE, EXIT_INTERNAL = 0, 1, 2, 3, 123
EXIT_INTERRUPTED = 130


class Failure(Exception):
    """An error phrased for the user: where, what happened, what to do, and the exit code.

    `details` (the user's own traceback, when their code raised) is printed above the line."""

    def __init__(
        self, what: str, fix: str = "", *, file: str | None = None, line: int | None = None,
        code: int = EXIT_USAGE, details: str = "",
    ) -> None:
        super().__init__(what)
        self.what, self.fix, self.file, self.line = what, fix, file, line
        self.code = code
        self.details = details

    def text(self, shown: Callable[[str], str] = str) -> str:
        where = ""
        if self.file:
            where = shown(self.file) + (f":{self.line}" if self.line else "") + ": "
        return f"error: {where}{self.what}" + (f"; {self.fix}" if self.fix else "")

    def __str__(self) -> str:
        """The line without ``error: `` (what the Python API's callers see)."""
        return self.text().removeprefix("error: ")


class UserCodeRaised(Exception):
    """The user's code raised `error` while jaxside was `doing` something with it (``tracing Net``).

    `option` is set while an option's expression ran (``--entry 'Net()'``), compiled as the
    pseudo-file ``<--entry>``: an error the expression itself raised is bad input, not a bug in
    the user's code."""

    def __init__(self, doing: str, error: BaseException, option: str | None = None) -> None:
        super().__init__(f"{doing}: {type(error).__name__}: {error}")
        self.doing = doing
        self.error = error
        self.option = option

    @property
    def pseudo_file(self) -> str | None:
        return f"<{self.option.split()[0]}>" if self.option else None


@dataclass
class UserFiles:
    """The user's files as errors name them (what `describe` needs to know about this run): FILE
    as given, which files are the user's code, what FILE defines, the copies of piped inputs."""

    file: str
    """FILE as the user wrote it."""
    is_user_file: Callable[[str], bool] = lambda _: False
    """Files that are the user's code: FILE and what `--watch` adds (tracing's own predicate)."""
    defined: list[str] = field(default_factory=list)
    """What FILE defines (its nn.Modules, then its functions), once loaded: suggestions for an expression."""
    copies: dict[str, str] = field(default_factory=dict)
    """Temporary copies of inputs read from a pipe or standard input: copy path -> name shown."""

    @staticmethod
    def is_library_file(filename: str) -> bool:
        """Python, torch, jax, torchax and jaxside: never shown in a user's traceback."""
        from jaxside.tracing import is_library_file

        return is_library_file(filename)

    def shown(self, path: str) -> str:
        """A path as the user would write it: FILE as given, others relative to the working directory."""
        if path.startswith("<"):
            return path
        try:
            resolved = Path(path).resolve()
        except (OSError, RuntimeError):  # a symbolic link loop: the path as given
            return path
        if str(resolved) in self.copies:
            return self.copies[str(resolved)]
        if resolved == Path(self.file).resolve():
            return self.file
        try:
            return str(resolved.relative_to(Path.cwd()))
        except ValueError:
            return str(resolved)


def describe(error: BaseException, user_files: UserFiles) -> Failure:
    """The `Failure` to report for any exception that ended a run."""
    if isinstance(error, Failure):
        return error
    if isinstance(error, UserCodeRaised):
        return _user_code_raised(error, user_files)
    from jaxside.tracing import CaptureError

    if isinstance(error, CaptureError):
        return _capture_error(error, user_files)
    from jaxside.render.text import CommentsChangeCode

    if isinstance(error, CommentsChangeCode):
        return Failure(f"JAX comments here: {error.detail}, so nothing was written",
                       "use --export or --html for this file (and report it: a jaxside bug)",
                       file=error.file, line=error.line, code=EXIT_USER_CODE)
    return _internal(error, user_files)


def report(failure: Failure, user_files: UserFiles, error: BaseException, *, debug: bool) -> None:
    """Print the failure on stderr: the full traceback first with ``--debug``, else any details."""
    if debug:
        original = error.error if isinstance(error, UserCodeRaised) else error
        traceback.print_exception(original, file=sys.stderr)
    elif failure.details:
        sys.stderr.write(failure.details)
    print(failure.text(user_files.shown), file=sys.stderr)


# -- the user's code raised ---------------------------------------------------------------------

# torch's Tensor operators turn a TypeError inside them into NotImplemented, so Python reports this.
_HIDDEN_OPERATOR_ERROR = re.compile(r"unsupported operand type.*'Tensor' and 'Tensor'")


def _user_code_raised(wrapper: UserCodeRaised, user_files: UserFiles) -> Failure:
    error = wrapper.error
    if isinstance(error, SyntaxError) and error.filename and not error.filename.startswith("<"):
        return syntax_error(error)
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [f for f in frames if not user_files.is_library_file(f.filename)]
    if theirs and theirs[-1].filename == wrapper.pseudo_file:
        return _expression_failed(wrapper, user_files)
    if not theirs:
        return _internal(error, user_files)
    preferred = [f for f in theirs if user_files.is_user_file(f.filename)]
    where = (preferred or theirs)[-1]
    return Failure(
        f"{_exception_line(error)} (raised while {wrapper.doing})",
        _advice(error),
        file=where.filename, line=where.lineno, code=EXIT_USER_CODE,
        details=_their_traceback(error, _named_as_shown(theirs, user_files)),
    )


def _named_as_shown(
    frames: list[traceback.FrameSummary], user_files: UserFiles
) -> list[traceback.FrameSummary]:
    """Frames in a temporary copy (FILE read from stdin or a pipe) named as the error line names it."""
    named = []
    for frame in frames:
        try:
            shown = user_files.copies.get(str(Path(frame.filename).resolve()))
        except (OSError, RuntimeError, ValueError):
            shown = None
        named.append(frame if shown is None else
                     traceback.FrameSummary(shown, frame.lineno, frame.name, line=frame.line))
    return named


def _expression_failed(wrapper: UserCodeRaised, user_files: UserFiles) -> Failure:
    error = wrapper.error
    name = Path(user_files.file).name
    fix = f"fix the expression; it is evaluated in {name}'s namespace, with torch imported"
    if isinstance(error, NameError):
        defined = user_files.defined
        if defined:
            fix = f"{name} defines {', '.join(defined[:8])}" + (
                ", ..." if len(defined) > 8 else ""
            )
    return Failure(f"{wrapper.option} raised {_exception_line(error)}", fix, file=user_files.file)


def _advice(error: BaseException) -> str:
    if isinstance(error, ModuleNotFoundError) and error.name:
        return f"install {error.name.partition('.')[0]} into the Python that runs annotate ({sys.executable})"
    if isinstance(error, ImportError) and "no known parent package" in str(error):
        return ("FILE uses relative imports, so annotate it where it lives inside its package "
                "(every directory up to the package root needs an __init__.py)")
    if isinstance(error, TypeError) and _HIDDEN_OPERATOR_ERROR.match(str(error)):
        return ("torch turns any failure inside a tensor operator into this message; it is usually shapes "
                "that do not broadcast: write the operator as a call (torch.add, torch.matmul) to see why")
    if isinstance(error, RuntimeError) and "meta" in str(error):
        return ("meta tensors (what --abstract builds) have no values; drop --abstract, or build the model "
                "without reading tensor values")
    return "fix the code there, or rerun with --debug for the full traceback"


def _their_traceback(error: BaseException, frames: list[traceback.FrameSummary]) -> str:
    """The traceback Python would print, with jaxside's, torch's, jax's and torchax's frames removed."""
    stack = traceback.StackSummary.from_list(frames)
    return "Traceback (most recent call last):\n" + "".join(stack.format()) + _exception_line(error) + "\n"


def _exception_line(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 240:
        first = first[:237] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def syntax_error(error: SyntaxError) -> Failure:
    column = f" (column {error.offset})" if error.offset else ""
    return Failure(
        f"syntax error: {error.msg}{column}",
        "annotate imports the file as Python does, so it must parse; fix that line",
        file=error.filename, line=error.lineno,
    )


# -- tracing could not go on --------------------------------------------------------------------


# Ops that libraries pick by default where another implementation of theirs traces.
_KNOWN_WAYS_AROUND = {
    "aten::_grouped_mm": (
        "jaxside lowers it (as lax.ragged_dot) only for a 2-D input, 3-D weights and offsets, with no bias "
        "or output dtype, as transformers' experts call it; write this one with torch.mm per group, or for "
        "transformers' experts pick the batched ones: model.set_experts_implementation('batched_mm') (e.g. "
        "in --setup)"
    ),
}


def _capture_error(error: Any, user_files: UserFiles) -> Failure:
    from jaxside.tracing import (
        InputsError,
        MixedDeviceError,
        OutputError,
        UnsupportedOpError,
        ValueDependentError,
    )

    where = {"file": error.file or user_files.file, "line": error.line}
    expression = _quoted(error.site.text) if error.site and error.site.text else "this line"
    if isinstance(error, ValueDependentError):
        what, fix = _value_dependent(error, expression)
        return Failure(what, fix, code=EXIT_USER_CODE, **where)
    if isinstance(error, UnsupportedOpError):
        op = error.op or "an operator"
        override = f"torchax.default_env().override_op_definition(torch.ops.{_op_path(op)}, fn)"
        known = _KNOWN_WAYS_AROUND.get(op)
        return Failure(
            f"{expression} calls {op}, which torchax cannot lower to JAX",
            known or f"express it with other torch ops, or define it in torch ops for torchax ({override}, "
            "e.g. in --setup)",
            code=EXIT_USER_CODE, **where,
        )
    if isinstance(error, MixedDeviceError):
        which = " and ".join(f"`{n}`" for n in error.names) if error.names else "a tensor"
        return Failure(
            f"{expression} mixes {which}, a plain torch tensor made outside the traced call, with traced "
            "tensors",
            "register it as a buffer, pass it as an input, or create it inside the traced code "
            "without device=",
            code=EXIT_USER_CODE, **where,
        )
    if isinstance(error, InputsError):
        return Failure(str(error), "give matching --inputs and --kwargs", **where)
    if isinstance(error, OutputError):
        return Failure(
            str(error),
            getattr(error, "fix", None)
            or "return tensors in tuples, lists, dicts or dataclasses, or register the type with "
            "torch.utils._pytree.register_pytree_node",
            code=EXIT_USER_CODE, **where,
        )
    return Failure(str(error), "", code=EXIT_USER_CODE, **where)


def _op_path(op: str) -> str:
    return op.replace("::", ".")


def _quoted(code: str, limit: int = 80) -> str:
    """Source text as one short line in backticks."""
    text = " ".join(code.split())
    return f"`{text if len(text) <= limit else text[: limit - 3] + '...'}`"


def _value_dependent(error: Any, expression: str) -> tuple[str, str]:
    import jax

    cause = error.__cause__
    why = "tracing knows shapes and dtypes, not values"
    if isinstance(cause, jax.errors.NonConcreteBooleanIndexError):
        return (f"{expression} indexes with a boolean mask, so its shape depends on the values; {why}",
                "use torch.where(mask, x, 0) or a masked reduction, which keep the shape")
    if "must be statically specified" in str(cause):  # nonzero, unique, argwhere: a value-dependent size
        return (f"{expression} gives a result whose shape depends on the values; {why}",
                "keep a fixed shape (torch.where(mask, x, 0), torch.topk) or pass the size as a Python value")
    use, header = _how_used(error.site)
    if use == "branch":
        return (f"{_quoted(header)} branches on the value of a traced tensor; {why}, so Python cannot "
                "decide which way to go",
                "use torch.where(cond, a, b), or branch on shapes or on Python values (--kwargs)")
    if isinstance(cause, jax.errors.TracerArrayConversionError):
        return (f"{expression} turns a traced tensor into a NumPy array; {why}",
                "keep the computation in torch ops")
    if use == "number":
        return (f"{expression} reads a traced tensor as a Python number; {why}",
                "keep it a tensor (drop .item()/int()/float()), or pass the number as a Python value")
    return (f"{expression} needs the value of a traced tensor in Python; {why}",
            "keep the computation in torch ops, or make it depend on shapes and Python values only")


def _how_used(site: Any) -> tuple[str, str]:
    """How the failing expression used the value: ``branch`` (the test of an if, while, assert or
    conditional expression, with that header), ``number`` (.item(), int(), float(), range()) or
    ``other``."""
    from jaxside.render.source import expression

    found = expression(site)
    if found is None:
        return "other", ""
    target, parents, source = found
    node = target
    while isinstance(parents.get(node), ast.BoolOp) or (
        isinstance(parents.get(node), ast.UnaryOp) and isinstance(parents[node].op, ast.Not)
    ):
        node = parents[node]
    owner = parents.get(node)
    if isinstance(owner, (ast.If, ast.While, ast.Assert, ast.IfExp)) and node is owner.test:
        test = ast.get_source_segment(source, node) or ast.unparse(node)
        keyword = {ast.If: "if {}:", ast.While: "while {}:", ast.Assert: "assert {}"}.get(type(owner))
        return "branch", keyword.format(test) if keyword else ast.unparse(owner)
    if isinstance(target, ast.Call):
        func = target.func
        if (isinstance(func, ast.Name) and func.id in {"int", "float", "bool", "range"}) or (
            isinstance(func, ast.Attribute) and func.attr in {"item", "tolist"}
        ):
            return "number", ""
    return "other", ""


# -- our own bugs ---------------------------------------------------------------------------------


def _internal(error: BaseException, user_files: UserFiles) -> Failure:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" ({user_files.shown(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return Failure(
        f"internal error: {_exception_line(error)}{where}",
        "this is a jaxside bug; please report it with the output of --debug",
        code=EXIT_INTERNAL,
    )
