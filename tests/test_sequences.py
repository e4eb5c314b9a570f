"""Sequence models whose traced length is a bound: exports generic below it, guarded above it.

Small GPTs written in the style of nanoGPT (a `block_size` tril buffer sliced `[:, :, :T, :T]`,
`x[:, [-1], :]` at inference, `torch.arange(0, t)` positions, `assert t <= block_size`) and of
minGPT (`is_causal=True` attention, positions `arange(0, t).unsqueeze(0)`), traced at
`T == block_size`: the export takes any batch and any `T <= block_size` (compared with torch
there) and raises a `ValueError` above it. A gpt-fast KV cache traced at batch 2, length 32 runs
with a cache of batch 3, length 64.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import load_sample
from test_shapes import assert_matches, export

from jaxside.annotate.check import to_jax
from jaxside.render.module import render_program

VOCAB, BLOCK, EMBED = 40, 12, 24


class Attention(nn.Module):
    def __init__(self, n_head: int, causal_buffer: bool) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(EMBED, 3 * EMBED)
        self.c_proj = nn.Linear(EMBED, EMBED)
        self.causal_buffer = causal_buffer
        if causal_buffer:
            self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBED, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.causal_buffer:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_head: int, causal_buffer: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBED)
        self.attn = Attention(n_head, causal_buffer)
        self.ln_2 = nn.LayerNorm(EMBED)
        self.mlp = nn.Sequential(nn.Linear(EMBED, 4 * EMBED), nn.GELU(), nn.Linear(4 * EMBED, EMBED))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """nanoGPT's shape (`nano=True`: the tril buffer, last position only at inference) or minGPT's
    (`is_causal` attention, every position's logits)."""

    def __init__(self, nano: bool, n_layer: int = 1, n_head: int = 3) -> None:
        super().__init__()
        self.nano = nano
        self.block_size = BLOCK
        self.wte = nn.Embedding(VOCAB, EMBED)
        self.wpe = nn.Embedding(BLOCK, EMBED)
        self.h = nn.ModuleList([Block(n_head, causal_buffer=nano) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(EMBED)
        self.lm_head = nn.Linear(EMBED, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        if not self.nano:
            pos = pos.unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if self.nano:
            return self.lm_head(x[:, [-1], :])  # a list, to keep the time axis
        return self.lm_head(x)


@functools.cache
def exported(nano: bool) -> tuple[Any, Any, Any, str]:
    torch.manual_seed(0)
    model = TinyGPT(nano).eval()
    module, program = export(model, torch.randint(0, VOCAB, (2, BLOCK)))
    return model, module, program, render_program(program, source="test")


@pytest.mark.parametrize("nano", [True, False], ids=["nanogpt", "mingpt"])
def test_traced_at_block_size_runs_at_any_batch_and_shorter_sequences(nano):
    model, module, program, text = exported(nano)
    generic = [[str(d) for d in dims] for dims in program.sizes.generic]
    assert generic == [["idx.shape[0]"], ["idx.shape[1]"]], text
    assert [[str(d) for d in dims] for dims, _ in program.sizes.bounded] == [["idx.shape[1]"]]
    assert not program.sizes.fixed
    bound = "Largest sizes: `idx.shape[1]` <= 12: the torch code fails at idx.shape[1] = 24"
    assert bound in " ".join(text.split()), text
    body = text[text.index("\ndef ") :]
    assert f", {BLOCK})" not in body and f"({BLOCK}," not in body and "CONST" not in text, body
    if nano:
        assert "[:, :, :T, :T]" in body and "[:, [-1]]" in body, body
    torch.manual_seed(1)
    for shape in [(3, 5), (1, 1)]:  # another batch and length; a size of 1 broadcasts
        assert_matches(module, program, model, torch.randint(0, VOCAB, shape))


@pytest.mark.parametrize("nano", [True, False], ids=["nanogpt", "mingpt"])
def test_a_sequence_longer_than_the_bound_raises_a_value_error(nano):
    model, module, _, _ = exported(nano)
    with pytest.raises(ValueError, match=r"idx\.shape\[1\] is at most 12"):
        module.forward(module.load_params(model), jnp.zeros((2, BLOCK + 1), jnp.int32))


# -- a gpt-fast KV cache of another batch and length ----------------------------------------------------


def fast_llama(batch: int, length: int) -> torch.nn.Module:
    """The gpt-fast-style sample at a config of its own (9 heads, 3 KV heads), its caches for
    `batch` sequences of `length` positions; the same weights whatever the caches."""
    llama = load_sample("llama_model")
    torch.manual_seed(0)
    config = llama.ModelArgs(block_size=48, vocab_size=VOCAB, n_layer=1, n_head=9, n_local_heads=3, dim=72)
    model = llama.Transformer(config)
    model.setup_caches(max_batch_size=batch, max_seq_length=length)
    return model.eval()


@functools.cache
def fast_export() -> tuple[Any, Any]:
    model = fast_llama(2, 32)
    return export(model, torch.randint(0, VOCAB, (2, 5)), torch.arange(5))


@pytest.mark.parametrize(("batch", "length"), [(3, 64), (1, 16)])
def test_a_kv_cache_of_another_batch_and_length_runs(batch, length):
    """Traced with caches of batch 2 and length 32: a prefill then a decode with caches of
    another batch and length (the model built for them), against torch."""
    module, program = fast_export()
    lengths = [{str(d) for d in dims} for dims in program.sizes.generic]
    assert any("layers.0.attention.kv_cache.k_cache.shape[2]" in dims for dims in lengths)
    model = fast_llama(batch, length)
    params, state = module.load_params(model)
    forward = jax.jit(module.forward)
    generator = torch.Generator().manual_seed(batch * length)
    start = 0
    for steps in (7, 1):
        idx = torch.randint(0, VOCAB, (batch, steps), generator=generator)
        input_pos = torch.arange(start, start + steps)
        logits, state = forward(params, state, *to_jax((idx, input_pos)))
        with torch.no_grad():
            expected = model(idx, input_pos)
        np.testing.assert_allclose(np.asarray(logits), expected.numpy(), rtol=1e-4, atol=1e-5)
        start += steps
    cache = model.layers[0].attention.kv_cache.v_cache
    new_cache = state["layers"][0]["attention"]["kv_cache"]["v_cache"]
    np.testing.assert_allclose(np.asarray(new_cache), cache.numpy(), rtol=1e-5, atol=1e-6)


class BranchAtTheBound(nn.Module):
    """Takes a branch only near its bound: the sizes below it, all the other way, are not the
    program at the traced size."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(8, 4)
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        assert t <= 8
        h = x + self.pos(torch.arange(t))
        if t > 6:
            h = h * 2
        return self.proj(h)


def test_a_branch_at_the_bound_keeps_the_traced_size():
    """Fitted at 4, 6 and 2, the program is written only if it stages the traced program's jaxpr at
    the traced size; here it does not (it would skip `h * 2`): the length stays fixed, guarded."""
    torch.manual_seed(0)
    model = BranchAtTheBound()
    module, program = export(model, torch.randn(2, 8, 4))
    fixed = {str(d): why for dims, why in program.sizes.fixed for d in dims}
    assert fixed["x.shape[1]"].startswith("the program at the traced size is not the one at smaller sizes")
    assert [[str(d) for d in dims] for dims in program.sizes.generic] == [["x.shape[0]"]]
    assert_matches(module, program, model, torch.randn(3, 8, 4))
    with pytest.raises(ValueError, match=r"x\.shape\[1\] is fixed at 8"):
        module.forward(module.load_params(model), jnp.zeros((2, 5, 4)))
