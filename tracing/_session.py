"""What a capture session is: the protocol the torch and the JAX sessions share, and what they hand on.

A session knows its frontend: how to turn the entry's inputs into jaxpr inputs, and how to run
the entry on traced values. `tracing._capture.record` drives any session the same way and
`tracing._assemble` turns what it recorded into a `Trace`. A new frontend is one more class
that fits `Session`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any, Protocol

import torch

from jaxside.tracing.errors import InputsError
from jaxside.tracing.trace import Frontend, InputKind

if TYPE_CHECKING:
    from jaxside.tracing._frames import Recorder
    from jaxside.tracing._progress import Reporter


@dataclass(frozen=True)
class Entry:
    """What is being captured, as the `Trace` describes it."""

    name: str
    """The entry's qualname (or the module class name): `Trace.entry`."""
    frontend: Frontend
    code: CodeType | None
    """The code object whose call is the root of the call tree (None: the root is synthesized)."""
    file: str
    line: int
    """Where a synthesized root call is placed."""
    inputs: list[tuple[InputKind, str]]
    """Kind and name of each jaxpr input, in order."""
    is_user_file: Callable[[str], bool]


@dataclass
class Returned:
    """What one run of the entry gave back: the jaxpr's outputs and how to read them."""

    values: list[Any]
    """The jaxpr's outputs: the traced leaves of the return value, then the new values of `mutated`."""
    paths: list[str]
    """Path of each traced leaf in the return value (`''`, `[0]`, `['logits']`)."""
    spec: Any
    """torch pytree spec of the return value."""
    static: dict[int, Any]
    """Leaf index -> the return value's non-traced leaves."""
    mutated: list[int] = field(default_factory=list)
    """Indices of the inputs the code updated in place."""
    module_paths: dict[int, str] = field(default_factory=dict)
    """`id(module)` -> its path, for the torch modules the code ran."""
    views: Mapping[int, tuple[object, Hashable]] = field(default_factory=dict)
    """`id(view)` -> the view and the var it materialized to, for torchax's lazy views."""


class Session(Protocol):
    """One capture of one entry, by a frontend (`tracing._torch`, `tracing._jaxfn`)."""

    entry: Entry

    def inputs(self) -> list[Any]:
        """The jaxpr inputs (values or `jax.ShapeDtypeStruct`s), one per `entry.inputs`."""

    def run(self, flat: tuple[Any, ...], recorder: Recorder, reporter: Reporter) -> Returned:
        """Run the entry on the traced inputs, user code inside `recorder`; what it returned."""


def bind(target: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[Any, Any]) -> inspect.BoundArguments:
    """The inputs bound to the entry's signature; an `InputsError` at its ``def`` if they do not fit."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        signature = inspect.Signature(
            [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
             inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
        )
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as error:
        name = getattr(target, "__qualname__", repr(target))
        code = entry_code(target)
        raise InputsError(
            f"the inputs do not fit {name}{signature}: {error}",
            file=code.co_filename if code else None, line=code.co_firstlineno if code else None,
        ) from None


def entry_code(fn: Any) -> CodeType | None:
    """The code object an entry runs first (a module's ``forward``, a decorated function's own)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    return getattr(inspect.unwrap(getattr(target, "__func__", target)), "__code__", None)
