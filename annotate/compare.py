"""`--check`'s verdicts: an export's result against torch's, leaf by leaf, each leaf named by its path.

Both sides are first rewritten into plain tuples, lists and dicts the way the export returns
them (`tracing.plain_output`), then walked together. A leaf's path is how the export's result
is indexed to reach it: `[0]`, `['logits']`, `['past_key_values']['layers'][0]['keys']`.

- Arrays: the shape and the dtype must match (torch's dtype as JAX holds it: int64 is int32
  unless x64 is on); values within ``atol + rtol * max|torch|``, where equal values (the same
  infinities, NaN against NaN) count as no error and complex values compare both parts.
- Other leaves (numbers, strings, None) must be equal.
- A container of another kind, or with other keys or length, is a mismatch at its path.
- Paths listed as random are compared by shape and dtype only: a random op in the export draws
  from its `key`, torch's from its own generator.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch

from jaxside.annotate.table import leaf_table
from jaxside.tracing import plain_output, to_jax_dtype

# (rtol, atol) by the dtype compared: round-off of one reordered reduction, not more.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-5, 1e-6),  # computed in float32 unless JAX runs with x64
    "float32": (1e-5, 1e-6),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "complex64": (1e-5, 1e-6),
    "complex128": (1e-5, 1e-6),
}


@dataclass
class Comparison:
    """One leaf of the export's result (or one new state buffer) against torch."""

    what: str
    shape: str
    max_abs: float = 0.0
    rel: float = 0.0
    """`max_abs / max |torch|`: the error relative to the leaf's scale."""
    rtol: float = 0.0
    atol: float = 0.0
    scale: float = 0.0
    problem: str = ""
    """Why the leaf cannot be compared by value (other structure, shape, dtype or constant)."""
    random: bool = False
    """Drawn from random bits: compared by shape and dtype only."""

    @property
    def ok(self) -> bool:
        if self.problem:
            return False
        return self.random or bool(self.max_abs <= self.atol + self.rtol * self.scale)

    def row(self) -> tuple[str, str, str]:
        """The leaf's row of the table (`annotate.table`): path, shape, verdict."""
        if self.problem:
            return self.what, self.shape, f"{self.problem}  MISMATCH"
        if self.random:
            return self.what, self.shape, "random: drawn from the export's key, not compared"
        verdict = "ok" if self.ok else "MISMATCH"
        return self.what, self.shape, f"max abs {self.max_abs:.2e}  rel {self.rel:.2e}  {verdict}"

    def line(self) -> str:
        """The leaf's row alone, as the table prints it."""
        return "\n".join(leaf_table([self.row()]))


def lines(comparisons: list[Comparison]) -> list[str]:
    """The table's lines for these leaves, columns sized to them (`annotate.table`)."""
    return leaf_table([comparison.row() for comparison in comparisons])


def compare(
    got: Any,
    want: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    random: frozenset[str] = frozenset(),
    prefix: str = "",
) -> list[Comparison]:
    """Every leaf of `got` (the export's result) against `want` (torch's), in order."""
    return list(_walk(plain_output(got), plain_output(want), prefix, rtol, atol, random))


def _walk(
    got: Any, want: Any, path: str, rtol: float | None, atol: float | None, random: frozenset[str]
) -> Iterator[Comparison]:
    what = path or "output"
    if isinstance(want, dict) or isinstance(got, dict):
        if not (isinstance(want, dict) and isinstance(got, dict)):
            yield _structure(what, got, want)
            return
        for key in want:
            if key not in got:
                yield Comparison(f"{path}[{key!r}]", _kind(want[key]), problem="missing from the export")
            else:
                yield from _walk(got[key], want[key], f"{path}[{key!r}]", rtol, atol, random)
        for key in got:
            if key not in want:
                yield Comparison(f"{path}[{key!r}]", _kind(got[key]), problem="torch returned no such key")
        return
    if isinstance(want, (tuple, list)) or isinstance(got, (tuple, list)):
        if type(got) is not type(want) or len(got) != len(want):
            yield _structure(what, got, want)
            return
        for i, (g, w) in enumerate(zip(got, want)):
            yield from _walk(g, w, f"{path}[{i}]", rtol, atol, random)
        return
    if _is_array(want) or _is_array(got):
        yield _arrays(what, got, want, rtol, atol, path in random)
        return
    if _same_constant(got, want):
        yield Comparison(what, _kind(want))
    else:
        yield Comparison(what, _kind(want), problem=f"{got!r} != {want!r}")


def _structure(what: str, got: Any, want: Any) -> Comparison:
    return Comparison(what, _kind(want), problem=f"the export returned {_kind(got)}, torch {_kind(want)}")


def _kind(value: Any) -> str:
    if _is_array(value):
        return _signature(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"dict of {len(value)}"
    return type(value).__name__


def _is_array(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, jax.Array, np.ndarray, np.generic))


_BUILTIN_CONSTANTS = (float, complex, slice, tuple, frozenset)


def _same_constant(got: Any, want: Any) -> bool:
    if type(got) is type(want) and type(want) in _BUILTIN_CONSTANTS and repr(got) == repr(want):
        return True  # NaN is unequal to itself, yet the same value where it stands (a part, a slice's end)
    if isinstance(want, torch.dtype):  # the export returns the jnp dtype of torch's
        return isinstance(got, type) and np.dtype(got).name == str(want).removeprefix("torch.")
    try:
        return bool(got == want) and type(got) is type(want)
    except Exception:  # an object whose == is not a truth value
        return False


def expected_dtype(value: Any) -> np.dtype:
    """The dtype JAX holds a torch tensor (or array) as: 64-bit types narrowed unless x64 is on."""
    if isinstance(value, torch.Tensor):
        return np.dtype(jax.dtypes.canonicalize_dtype(to_jax_dtype(value.dtype)))
    return np.dtype(jax.dtypes.canonicalize_dtype(np.asarray(value).dtype))


def _signature(value: Any) -> str:
    dtype = str(value.dtype).removeprefix("torch.")
    return f"{dtype}{list(value.shape)}".replace(" ", "")


def _arrays(
    what: str, got: Any, want: Any, rtol: float | None, atol: float | None, random: bool
) -> Comparison:
    shape = _signature(want) if _is_array(want) else _kind(want)
    if not (_is_array(want) and _is_array(got)):
        return Comparison(what, shape, problem=f"the export returned {_kind(got)}, torch {_kind(want)}")
    if tuple(got.shape) != tuple(want.shape) or np.dtype(got.dtype) != expected_dtype(want):
        return Comparison(what, shape, problem=f"the export returned {_signature(got)}")
    if random:
        return Comparison(what, shape, random=True)
    want_np, got_np = _numpy(want), np.asarray(got)
    default_rtol, default_atol = TOLERANCES.get(shape.partition("[")[0], (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    if not want_np.size:
        return Comparison(what, shape, rtol=rtol, atol=atol)
    kind = np.complex128 if want_np.dtype.kind == "c" else np.float64
    g, w = got_np.astype(kind), want_np.astype(kind)
    # NaN matches NaN where it stands: a complex's real and imaginary parts each (np.isnan of a
    # complex is true when either part is NaN, so `nan+1j` would match `nan+5j`).
    same = _same_parts(g.real, w.real) & (_same_parts(g.imag, w.imag) if kind is np.complex128 else True)
    with np.errstate(invalid="ignore"):  # inf against a finite value or NaN: inf or NaN
        diff = np.where(same, 0.0, np.abs(g - w))
    max_abs = float(np.inf) if np.isnan(diff).any() else float(diff.max())
    finite = np.abs(w)[np.isfinite(w)]
    scale = float(finite.max()) if finite.size else 0.0
    rel = max_abs / scale if scale else (0.0 if max_abs == 0 else float("inf"))
    return Comparison(what, shape, max_abs, rel, rtol, atol, scale)


def _same_parts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().resolve_conj().resolve_neg()  # `x.conj().imag` has the neg bit
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    return np.asarray(value)
