"""The frame recorder's `Probe`: which values are traced tensors, and how far tracing has got."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Hashable
from types import FunctionType
from typing import Any

import torch

from jaxside.tracing import _internals


class Probe:
    """Tells the frame recorder which values are traced tensors, and how far tracing got.

    `frame` is the jaxpr being built, set once tracing has started."""

    def __init__(self) -> None:
        self.frame: Any = None

    def key(self, value: object) -> Hashable | None:
        """The var of a traced tensor; a lazy torchax view stands for the value it will
        produce (resolved when the Trace is built)."""
        var = _internals.var_of(value)
        return value if var is None and isinstance(value, _internals.TorchaxView) else var

    def leaves(self, value: object, path: str = "", depth: int = 0) -> list[tuple[str, Hashable]]:
        var = _internals.var_of(value)
        if var is not None:
            return [(path, var)]
        if depth > 3:
            return []
        if isinstance(value, (tuple, list)):
            return [
                leaf for i, item in enumerate(value) for leaf in self.leaves(item, f"{path}[{i}]", depth + 1)
            ]
        if isinstance(value, dict):
            return [
                leaf for k, item in value.items() for leaf in self.leaves(item, f"{path}[{k!r}]", depth + 1)
            ]
        return []

    def watermark(self) -> int:
        return _internals.equation_count(self.frame) if self.frame is not None else 0

    def library_calls(self, pause: Callable[[], object], resume: Callable[[], object]) -> LibraryCalls:
        return LibraryCalls(pause, resume)


# Tensor types whose torch functions are all library code; a user subclass may call back.
_LIBRARY_TENSORS = frozenset(
    {torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, _internals.TorchaxTensor, _internals.TorchaxView}
)


# torchax's tensor and view classes define some methods in Python themselves, which torch
# functions never route through a mode: `cache[:, :, pos] = k` (`__setitem__`, ~900 frames of
# JAX indexing), `flatten`, `type_as`. Together 90% of the frames the hook met at 70B.
_OWN_METHODS = (_internals.TorchaxTensor, _internals.TorchaxView)


class LibraryCalls(torch.overrides.TorchFunctionMode):
    """Runs each torch function with the frame hook paused: under settrace, the torchax and
    JAX frames of an op are most of the hook's cost, and they never call user code back
    unless handed a callable (``torch.cond``, hooks) or a user tensor subclass. While open,
    the methods torchax's classes define in Python (`_OWN_METHODS`) run paused too."""

    def __init__(self, pause: Callable[[], object], resume: Callable[[], object]) -> None:
        super().__init__()
        self.pause, self.resume = pause, resume
        self._replaced: list[tuple[type, str, object]] = []

    def __enter__(self) -> LibraryCalls:
        super().__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        hook = sys.gettrace()  # the recorder's: only where it runs is it paused
        for cls in _OWN_METHODS:
            for name, method in list(vars(cls).items()):
                if isinstance(method, FunctionType) and (not name.startswith("__") or name == "__setitem__"):
                    self._replaced.append((cls, name, method))
                    setattr(cls, name, _paused(method, hook, self.pause, self.resume))
        return self

    def __exit__(self, *exc: object) -> None:
        while self._replaced:
            cls, name, method = self._replaced.pop()
            setattr(cls, name, method)
        super().__exit__(*exc)  # type: ignore[no-untyped-call]  # torch leaves it untyped

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if not _LIBRARY_TENSORS.issuperset(types):
            return func(*args, **kwargs)
        self.pause()  # before the arguments are looked at: that is library work too
        if _passes_callable(args, kwargs):
            self.resume()
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        finally:
            self.resume()


def _paused(
    method: Callable[..., Any], hook: object, pause: Callable[[], object], resume: Callable[[], object]
) -> Callable[..., Any]:
    """`method`, run with the frame hook paused where `hook` is the running one (not in another
    thread, nor within a call already paused) and no callable is passed."""

    @functools.wraps(method)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if sys.gettrace() is not hook:
            return method(*args, **kwargs)
        pause()
        if _passes_callable(args, kwargs):
            resume()
            return method(*args, **kwargs)
        try:
            return method(*args, **kwargs)
        finally:
            resume()

    return paused


def _passes_callable(args: tuple[Any, ...], kwargs: dict[Any, Any]) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, (tuple, list)):
            if any(callable(item) for item in value):
                return True
        elif callable(value):
            return True
    return False
