"""A local lowering of ``aten::_grouped_mm`` for torchax, until torchax has one.

torchax 0.0.13 has no lowering for ``torch._grouped_mm`` (``torch.nn.functional.grouped_mm``
calls it too), the grouped matmul transformers' mixture-of-experts layers use by default.
This module registers one with torchax's operator registry, for the one layout whose
meaning ``jax.lax.ragged_dot`` has exactly:

- ``mat_a`` 2-D ``(M, K)`` holding the rows of every group one after the other,
  ``mat_b`` 3-D ``(G, K, N)`` holding one matrix per group, ``offs`` 1-D ``(G,)`` the
  cumulative end row of each group (an empty group repeats the previous end), no
  ``bias`` and no ``out_dtype`` other than the operands' dtype. The result is ``(M, N)``:
  row ``i`` of group ``g`` is ``mat_a[i] @ mat_b[g]``.
- That is ``jax.lax.ragged_dot(mat_a, mat_b, group_sizes)`` with
  ``group_sizes = jnp.diff(offs, prepend=0)``.

Rows past ``offs[-1]`` belong to no group: torch leaves them uninitialised, ``ragged_dot``
writes zeros. Every other layout (2-D x 2-D, 3-D x 2-D, 3-D x 3-D, a bias, another
output dtype) raises torchax's own missing-lowering error, so it reads as the unsupported
op it still is. Remove this module once torchax lowers ``aten::_grouped_mm`` itself:
`register` leaves an existing lowering alone.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

OP = torch.ops.aten._grouped_mm


def grouped_mm(
    mat_a: jax.Array,
    mat_b: jax.Array,
    offs: jax.Array | None = None,
    bias: jax.Array | None = None,
    out_dtype: Any = None,
) -> jax.Array:
    """``torch._grouped_mm`` for 2-D x 3-D operands with offsets, as a ragged dot."""
    layout = _unsupported_layout(mat_a, mat_b, offs, bias, out_dtype)
    if layout:
        from torchax.tensor import OperatorNotFound

        raise OperatorNotFound(f"Operator with name aten::_grouped_mm has no lowering ({layout})")
    assert offs is not None  # `_unsupported_layout` refuses no offsets
    group_sizes = jnp.diff(offs.astype(jnp.int32), prepend=0)
    return jax.lax.ragged_dot(mat_a, mat_b, group_sizes)


def _unsupported_layout(
    mat_a: jax.Array, mat_b: jax.Array, offs: Any, bias: Any, out_dtype: Any
) -> str | None:
    """Why this call is outside the layout the lowering covers; None when it is inside."""
    if (mat_a.ndim, mat_b.ndim) != (2, 3):
        return f"only 2-D x 3-D operands are lowered, not {mat_a.ndim}-D x {mat_b.ndim}-D"
    if offs is None or offs.ndim != 1 or offs.shape[0] != mat_b.shape[0]:
        return "only offsets with one end per group of the 3-D operand are lowered"
    if bias is not None:
        return "a bias is not lowered"
    if out_dtype is not None and _jax_dtype(out_dtype) != mat_a.dtype:
        return "an output dtype other than the operands' is not lowered"
    if mat_a.dtype != mat_b.dtype:
        return "operands of different dtypes are not lowered"
    return None


def _jax_dtype(dtype: Any) -> Any:
    if isinstance(dtype, torch.dtype):
        from torchax.ops import mappings

        return mappings.t2j_dtype(dtype)
    return jnp.dtype(dtype)


def register() -> None:
    """Add the lowering to torchax's registry (and a live default environment) if missing."""
    import torchax
    from torchax.ops import ops_registry

    if OP in ops_registry.all_aten_ops or OP.default in ops_registry.all_aten_ops:
        return
    ops_registry.register_torch_dispatch_op(OP, grouped_mm)
    env = getattr(torchax, "_env", None)  # torchax 0.0.13: the lazily built default environment
    if env is not None and OP not in env._ops:
        env._ops[OP] = ops_registry.all_aten_ops[OP]
