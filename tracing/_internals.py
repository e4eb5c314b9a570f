"""The one place that touches private JAX and torchax internals.

Everything else in jaxside goes through the functions here; `tests/test_internals.py`
fails loudly when a new JAX or torchax moves one of them.

- jax 0.10: a ``DynamicJaxprTracer`` holds its jaxpr atom in ``.val`` (a ``Var``, or a
  ``Literal`` for a folded constant), and the trace being built keeps its equations, in
  emission order, in ``trace.frame.tracing_eqns`` (weak references once dead code can
  be dropped).
- torchax 0.0.13: a ``torchax.tensor.Tensor`` holds its JAX value in ``._elem``; in-place
  ops replace ``._elem`` on the same object.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import jax
from jax._src import core as jax_core  # jax 0.10
from jax._src.interpreters import partial_eval as pe  # jax 0.10

from tracing._compat import import_torchax

torchax = import_torchax()
from torchax.ops import mappings as _mappings  # noqa: E402  (needs the import above first)
from torchax.tensor import Tensor as TorchaxTensor  # noqa: E402

Var = jax_core.Var


def current_jaxpr_frame() -> Any:
    """The equation list owner of the jaxpr being traced right now."""
    trace = jax_core.trace_ctx.trace
    if not isinstance(trace, pe.DynamicJaxprTrace):
        raise RuntimeError("not inside jax.make_jaxpr")
    return trace.frame


def equation_count(frame: Any) -> int:
    """How many equations `frame` has emitted so far (dead ones included)."""
    return len(frame.tracing_eqns)


def emitted_outvars(frame: Any) -> list[Sequence[Var] | None]:
    """Per emitted equation, in order, its output vars (None if it was already dropped)."""
    result: list[Sequence[Var] | None] = []
    for entry in frame.tracing_eqns:
        eqn = entry() if isinstance(entry, weakref.ReferenceType) else entry
        result.append(None if eqn is None else eqn.outvars)
    return result


def var_of(value: object) -> Var | None:
    """The jaxpr var a torchax tensor (or a JAX tracer) stands for, if any."""
    if isinstance(value, TorchaxTensor):
        value = value._elem
    if isinstance(value, pe.DynamicJaxprTracer):
        atom = value.val
        return atom if isinstance(atom, Var) else None
    return None


def jax_value(tensor: object) -> object:
    """The JAX value inside a torchax tensor."""
    return tensor._elem  # type: ignore[attr-defined]


def wrap(value: object, env: object) -> TorchaxTensor:
    """A torchax tensor around a JAX value."""
    return TorchaxTensor(value, env)


def raw_frames(eqn: jax_core.JaxprEqn) -> tuple[Sequence[Any], Sequence[int]]:
    """The ``(code objects, lasti)`` of the Python stack that emitted `eqn`, innermost first."""
    traceback = eqn.source_info.traceback
    return traceback.raw_frames() if traceback is not None else ((), ())


def to_jax_dtype(dtype: Any) -> Any:
    return _mappings.t2j_dtype(dtype)


def to_jax_array(tensor: Any) -> jax.Array:
    """A CPU torch tensor's value as a JAX array (bfloat16 included)."""
    return _mappings.t2j(tensor.detach(), use_dlpack=False)
