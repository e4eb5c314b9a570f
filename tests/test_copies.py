"""A copy is its value: `jnp.copy(x)` is never written (the rewrite `copy_is_value`, proven bit for
bit in tests/fuzzing/rewrites.py). JAX arrays are immutable, so nothing the export does after a
copy (a torch write into a clone, the operand read again, both returned) can tell the two apart;
here the export of a model that copies is run and compared with torch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn

import jaxside


class Copies(nn.Module):
    """Copies the way model code makes them: `torch.special.gammaincc` (torchax stages its result
    through `jnp.array`, a `copy`), `clone` then a write into the clone, `.to(copy=True)`."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        tail = torch.special.gammaincc(h.abs() + 1.0, h.abs() + 2.0)
        masked = h.clone()
        masked[:, 0] = 0.0  # a write into the clone: the operand keeps its first column
        kept = h.to(dtype=h.dtype, copy=True)
        return tail + h, masked, kept * h, h


def test_a_model_that_copies_exports_without_copies_and_matches_torch():
    torch.manual_seed(0)
    model, x = Copies().eval(), torch.randn(4, 6)
    exported = jaxside.export(model, x)
    assert "copy" not in exported.source and "h_abs_1" not in exported.source, exported.source
    params = exported.load_params(model)
    got = jax.jit(exported.forward)(params, jnp.asarray(x.numpy()))
    with torch.no_grad():
        want = model(x)
    assert len(got) == len(want)
    for mine, theirs in zip(got, want):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), rtol=1e-5, atol=1e-6)
    # the write stayed in the clone: the operand, returned as well, keeps its first column
    assert not np.array_equal(np.asarray(got[1])[:, 0], np.asarray(got[3])[:, 0])
