"""Walking a jaxpr into the jaxprs its equations hold, with the name stack each equation ran under."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jaxside.tracing import _internals

_BACKWARD = "transpose"
"""The name-stack transform of a backward pass: `jax.grad`'s is ``transpose(jvp())``."""
_RECOMPUTED = "rematted_computation"
"""The scope of forward values `jax.checkpoint` recomputes inside a backward pass."""


def walk(jaxpr: Any, stack: str = "") -> Iterator[tuple[Any, Any, str]]:
    """Every equation of `jaxpr` and of the jaxprs inside it: `(eqn, the jaxpr holding it, name stack)`."""
    for eqn in jaxpr.eqns:
        name = _join(stack, _internals.name_stack(eqn))
        yield eqn, jaxpr, name
        for inner in _internals.sub_jaxprs(eqn):
            yield from walk(inner, name)


def is_backward(stack: str) -> bool:
    """Whether a name stack is a backward pass's (values `jax.checkpoint` recomputes for it are not)."""
    return _BACKWARD in stack and _RECOMPUTED not in stack


def _join(outer: str, inner: str) -> str:
    return f"{outer}/{inner}" if outer and inner else outer or inner
