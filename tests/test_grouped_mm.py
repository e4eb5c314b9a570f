"""The local lowering of `aten::_grouped_mm` (tracing/_grouped_mm.py) against torch eager on CPU,
and transformers' experts through it: exported and checked at their default implementation."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

from jaxside.tracing import _internals
from jaxside.tracing._internals import torchax


def _offsets(g: torch.Generator, groups: int) -> torch.Tensor:
    """Cumulative group ends of random group sizes, one group (perhaps the first or last) empty."""
    sizes = torch.randint(1, 7, (groups,), generator=g)
    sizes[int(torch.randint(0, groups, (1,), generator=g))] = 0
    return torch.cumsum(sizes, 0).to(torch.int32)


def _torchax_grouped_mm(x: np.ndarray, w: np.ndarray, offs: np.ndarray) -> jax.Array:
    env = torchax.default_env()
    with env:
        wrapped = [_internals.wrap(v, env) for v in (x, w, offs)]
        return torch._grouped_mm(wrapped[0], wrapped[1], offs=wrapped[2])._elem


@pytest.mark.parametrize("seed", range(4))
def test_grouped_mm_under_jit_matches_torch_eager(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    groups = 2 + seed
    offs = _offsets(g, groups)
    x, w = torch.randn(int(offs[-1]), 8, generator=g), torch.randn(groups, 8, 12, generator=g)
    assert (torch.diff(offs, prepend=torch.tensor([0])) == 0).any()
    expected = torch._grouped_mm(x, w, offs=offs).numpy()
    got = np.asarray(jax.jit(_torchax_grouped_mm)(x.numpy(), w.numpy(), offs.numpy()))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # each row is its own group's matrix product: the same as torch's row by row
    ends = offs.tolist()
    for group, (start, end) in enumerate(zip([0, *ends[:-1]], ends)):
        np.testing.assert_allclose(got[start:end], (x[start:end] @ w[group]).numpy(), rtol=1e-5, atol=1e-5)


def test_grouped_mm_binds_one_ragged_dot() -> None:
    x, w = np.ones((6, 8), np.float32), np.ones((3, 8, 4), np.float32)
    offs = np.array([2, 2, 6], np.int32)
    jaxpr = jax.make_jaxpr(_torchax_grouped_mm)(x, w, offs)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert "ragged_dot_general" in str(jaxpr) and "dot_general" not in names, names


def test_other_layouts_stay_unsupported() -> None:
    env = torchax.default_env()
    with env, pytest.raises(torchax.tensor.OperatorNotFound, match="aten::_grouped_mm has no lowering"):
        x, w = (_internals.wrap(np.ones((8, 8), np.float32), env) for _ in range(2))
        torch._grouped_mm(x, w, offs=_internals.wrap(np.array([4, 8], np.int32), env))
