"""dtypes torch read from a tensor are read from it in the export (`h.type_as(x)` is
`h.astype(x.dtype)`), and the export still matches torch at bfloat16."""

from __future__ import annotations

import torch
import torch.nn as nn
from test_shapes import export

from jaxside.annotate.check import check
from jaxside.render.module import render_program


class HalfNorm(nn.Module):
    """An RMSNorm computed in float32 and cast back the ways torch code casts to an input's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(16).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h.type_as(x) * self.weight + h.to(dtype=x.dtype) * 0.5 - h.half().to(x.dtype)


def test_a_dtype_torch_took_from_a_tensor_is_read_from_it():
    torch.manual_seed(0)
    model = HalfNorm()
    x = torch.randn(2, 5, 16).to(torch.bfloat16)
    module, program = export(model, x)
    text = render_program(program, source="test")
    body = text[text.index("\ndef forward") :]
    assert body.count(".astype(x.dtype)") >= 2 and "astype(jnp.bfloat16)" not in body, body
    assert "x.astype(jnp.float32)" in body and "astype(jnp.float16)" in body, body  # as torch wrote them
    comparisons = check(module, program, model, (torch.randn(3, 4, 16).to(torch.bfloat16),), {})
    assert comparisons and all(c.ok for c in comparisons), [c.line() for c in comparisons]
