"""A Flax NNX port of samples/llama_model.py, written the way NNX models are: modules holding their
weights, `nnx.Linear` kernels laid out (in, out), separate q/k/v projections where the torch model
fuses them, the rotary table computed on the fly and the KV cache kept in `nnx.Cache` variables.

`annotate review samples/llama_model.py samples/llama_nnx.py` loads the torch weights into `build()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx


@dataclass(frozen=True)
class Config:
    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    hidden_dim: int = 256
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def rope_angles(positions, head_dim, theta):
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x, cos, sin):
    """Rotate consecutive feature pairs of x: (batch, seq, heads, head_dim)."""
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[:, None, :], sin[:, None, :]
    rotated = jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float):
        self.scale = nnx.Param(jnp.ones((dim,)))
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return normed.astype(x.dtype) * self.scale[...]


class Attention(nnx.Module):
    def __init__(self, cfg: Config, batch: int, *, rngs: nnx.Rngs):
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nnx.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, use_bias=False, rngs=rngs)
        cache_shape = (batch, cfg.n_kv_heads, cfg.max_seq_len, cfg.head_dim)
        self.cached_key = nnx.Cache(jnp.zeros(cache_shape))
        self.cached_value = nnx.Cache(jnp.zeros(cache_shape))

    def __call__(self, x, cos, sin, mask, positions):
        batch, seq, _ = x.shape
        q = self.q_proj(x).reshape(batch, seq, self.n_heads, self.head_dim)
        k = self.k_proj(x).reshape(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        self.cached_key[...] = self.cached_key[...].at[:, :, positions].set(k.transpose(0, 2, 1, 3))
        self.cached_value[...] = self.cached_value[...].at[:, :, positions].set(v.transpose(0, 2, 1, 3))
        groups = self.n_heads // self.n_kv_heads
        keys = jnp.repeat(self.cached_key[...], groups, axis=1)
        values = jnp.repeat(self.cached_value[...], groups, axis=1)
        scores = q.transpose(0, 2, 1, 3) @ keys.transpose(0, 1, 3, 2) / jnp.sqrt(self.head_dim)
        probs = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
        out = (probs @ values).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        return self.o_proj(out)


class MLP(nnx.Module):
    def __init__(self, cfg: Config, *, rngs: nnx.Rngs):
        self.gate_proj = nnx.Linear(cfg.dim, cfg.hidden_dim, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(cfg.dim, cfg.hidden_dim, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(cfg.hidden_dim, cfg.dim, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: Config, batch: int, *, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg, batch, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, x, cos, sin, mask, positions):
        h = x + self.attention(self.input_layernorm(x), cos, sin, mask, positions)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nnx.Module):
    def __init__(self, cfg: Config, batch: int = 1, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed_tokens = nnx.Embed(cfg.vocab_size, cfg.dim, rngs=rngs)
        self.layers = nnx.List([DecoderLayer(cfg, batch, rngs=rngs) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nnx.Linear(cfg.dim, cfg.vocab_size, use_bias=False, rngs=rngs)

    def __call__(self, tokens, positions):
        cos, sin = rope_angles(positions, self.cfg.head_dim, self.cfg.rope_theta)
        mask = (positions[:, None] >= jnp.arange(self.cfg.max_seq_len)[None, :])[None, None]
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, positions)
        return self.lm_head(self.norm(x))


def build() -> Llama:
    return Llama(Config(), rngs=nnx.Rngs(0))
