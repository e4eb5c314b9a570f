"""Why a capture failed: the `CaptureError` family, and telling those failures from the user's own.

A failure tracing can explain (the code needs a traced value, torchax cannot lower an op, a
plain tensor meets a traced one) becomes a `CaptureError` located at the innermost user
frame. Anything else the user's code raises goes through unchanged; an exception raised in
jaxside's own frames, with no user frame to blame, is a bug of ours (the CLI says so).
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

import jax
import torch

from jaxside.tracing import _internals
from jaxside.tracing._source import SourceIndex
from jaxside.tracing.trace import Site


class CaptureError(Exception):
    """The entry could not be traced; the message says why.

    `site` is the user expression that was running (when known), `file` and `line` where it is.
    Other exceptions the user's code raises while traced propagate unchanged.
    """

    def __init__(
        self, message: str, *, site: Site | None = None, file: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.site = site
        self.file = file if file is not None else site.file if site else None
        self.line = line if line is not None else site.line if site else None


class InputsError(CaptureError):
    """The inputs do not fit the entry's signature (`file`/`line`: its ``def``)."""


class ValueDependentError(CaptureError):
    """User code needed a traced tensor's value in Python: an ``if`` on it, ``.item()``, a mask index.

    Tracing knows shapes and dtypes only, so Python cannot decide it."""


class UnsupportedOpError(CaptureError):
    """torchax has no JAX lowering for an op the user's code called (`op`, e.g. ``aten::foo``)."""

    def __init__(self, message: str, *, op: str | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.op = op


class MixedDeviceError(CaptureError):
    """A plain (CPU) torch tensor met a traced one; `names` are the user's names for it, if found."""

    def __init__(self, message: str, *, names: tuple[str, ...] = (), **where: Any) -> None:
        super().__init__(message, **where)
        self.names = names


class OutputError(CaptureError):
    """The entry returned traced tensors inside an object torch's pytree cannot flatten (or a value
    the export cannot rebuild); `fix` says what to return instead, when that is known."""

    def __init__(self, message: str, *, fix: str | None = None, **where: Any) -> None:
        super().__init__(message, **where)
        self.fix = fix


def make_jaxpr_classified(
    traced: Callable[..., Any], inputs: list[Any], is_user_file: Callable[[str], bool], *,
    filtered: bool = True,
) -> Any:
    """`jax.make_jaxpr(traced)(*inputs)`, failures tracing can explain raised as `CaptureError`s.

    Not `filtered`, a failure keeps JAX's own frames in its traceback, as JAX leaves it when its
    filtering is off: for a caller that reads only the error (a retrace the sizes search makes),
    as the filtering asks the file system about every frame (~10 ms a failure at 70B)."""
    try:
        with _jax_frames_kept(not filtered):
            return jax.make_jaxpr(traced)(*inputs)
    except CaptureError:
        raise
    except Exception as error:
        classified = classify(error, is_user_file)
        if classified is None:
            raise
        raise classified from error


@contextlib.contextmanager
def _jax_frames_kept(kept: bool) -> Iterator[None]:
    previous = jax.config.values["jax_traceback_filtering"]
    if kept and previous != "off":
        jax.config.update("jax_traceback_filtering", "off")
    try:
        yield
    finally:
        if kept and previous != "off":
            jax.config.update("jax_traceback_filtering", previous)


_VALUE_NEEDED = (
    jax.errors.ConcretizationTypeError,  # bool(), .item(), int() of a tracer
    jax.errors.NonConcreteBooleanIndexError,  # x[mask]
    jax.errors.TracerArrayConversionError,  # .numpy(), np.asarray
    jax.errors.TracerIntegerConversionError,  # range(t), list index
)


def classify(error: Exception, is_user_file: Callable[[str], bool]) -> CaptureError | None:
    """The `CaptureError` for a failure tracing explains, located at the innermost user frame;
    None for anything else (the user's own exceptions go through unchanged)."""
    frame, lasti = _innermost_user_frame(error.__traceback__, is_user_file)
    sources = SourceIndex()
    site = sources.site(frame.f_code, lasti) if frame is not None else None
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    if isinstance(error, _VALUE_NEEDED):
        return ValueDependentError(first, site=site)
    if _internals.is_missing_lowering(error):
        return UnsupportedOpError(first, op=_internals.missing_lowering_op(error), site=site)
    if _internals.is_mixed_device(error):
        expression = sources.expression(site) if site is not None else None
        return MixedDeviceError(first, names=_plain_tensor_names(frame, expression), site=site)
    return None


def _innermost_user_frame(
    tb: TracebackType | None, is_user_file: Callable[[str], bool]
) -> tuple[FrameType | None, int]:
    found: tuple[FrameType | None, int] = (None, -1)
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found = (tb.tb_frame, tb.tb_lasti)
        tb = tb.tb_next
    return found


def _plain_tensor_names(frame: FrameType | None, expression: ast.expr | None) -> tuple[str, ...]:
    """Names in the failing expression that hold a plain torch tensor (not a traced one)."""
    if frame is None or expression is None:
        return ()
    names: dict[str, None] = {}
    for node in ast.walk(expression):
        value: Any = None
        if isinstance(node, ast.Name):
            value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = frame.f_locals.get(node.value.id, frame.f_globals.get(node.value.id))
            value = getattr(owner, "__dict__", {}).get(node.attr)  # no property runs
        if (
            isinstance(value, torch.Tensor) and not isinstance(value, _internals.TorchaxTensor)
            and value.device.type != "jax"
        ):
            names.setdefault(ast.unparse(node))
    return tuple(names)
