"""An Equinox port of samples/llama_model.py, written the way Equinox models are: immutable modules
whose fields are `eqx.nn.Linear` layers (weights (out, in), as torch), separate q/k/v projections
where the torch model fuses them, and the KV cache as `eqx.nn.StateIndex` state passed in and out.

`annotate review samples/llama_model.py samples/llama_equinox.py` loads the torch weights into the
model `build()` returns and calls it as `model(tokens, positions, state)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Config:
    vocab_size: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 256
    max_seq_len: int = 64
    rope_base: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def linear(layer: eqx.nn.Linear, x):
    """Apply a bias-free Linear to the last axis of a batch."""
    return x @ layer.weight.T


def rotate(x, cos, sin):
    """Rotate consecutive feature pairs of x: (batch, seq, heads, head_dim)."""
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    real, imag = pairs[..., 0], pairs[..., 1]
    rotated = jnp.stack([real * cos - imag * sin, imag * cos + real * sin], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


class RMSNorm(eqx.Module):
    weight: jax.Array
    eps: float = eqx.field(static=True)

    def __init__(self, dim: int, eps: float):
        self.weight = jnp.ones((dim,))
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return normed.astype(x.dtype) * self.weight


class Attention(eqx.Module):
    wq: eqx.nn.Linear
    wk: eqx.nn.Linear
    wv: eqx.nn.Linear
    wo: eqx.nn.Linear
    cache: eqx.nn.StateIndex
    n_heads: int = eqx.field(static=True)
    n_kv_heads: int = eqx.field(static=True)

    def __init__(self, cfg: Config, key: jax.Array):
        q_key, k_key, v_key, o_key = jax.random.split(key, 4)
        self.wq = eqx.nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, use_bias=False, key=q_key)
        self.wk = eqx.nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, use_bias=False, key=k_key)
        self.wv = eqx.nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, use_bias=False, key=v_key)
        self.wo = eqx.nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, use_bias=False, key=o_key)
        empty = jnp.zeros((1, cfg.n_kv_heads, cfg.max_seq_len, cfg.head_dim))
        self.cache = eqx.nn.StateIndex((empty, empty))
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.n_kv_heads

    def __call__(self, x, cos, sin, mask, positions, state):
        batch, seq, dim = x.shape
        head_dim = dim // self.n_heads
        q = rotate(linear(self.wq, x).reshape(batch, seq, self.n_heads, head_dim), cos, sin)
        k = rotate(linear(self.wk, x).reshape(batch, seq, self.n_kv_heads, head_dim), cos, sin)
        v = linear(self.wv, x).reshape(batch, seq, self.n_kv_heads, head_dim)
        k_cache, v_cache = state.get(self.cache)
        k_cache = k_cache.at[:, :, positions].set(k.transpose(0, 2, 1, 3))
        v_cache = v_cache.at[:, :, positions].set(v.transpose(0, 2, 1, 3))
        state = state.set(self.cache, (k_cache, v_cache))
        repeats = self.n_heads // self.n_kv_heads
        keys, values = jnp.repeat(k_cache, repeats, axis=1), jnp.repeat(v_cache, repeats, axis=1)
        scores = q.transpose(0, 2, 1, 3) @ keys.transpose(0, 1, 3, 2) / jnp.sqrt(head_dim)
        weights = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
        out = (weights @ values).transpose(0, 2, 1, 3).reshape(batch, seq, dim)
        return out @ self.wo.weight.T, state


class FeedForward(eqx.Module):
    w1: eqx.nn.Linear
    w2: eqx.nn.Linear
    w3: eqx.nn.Linear

    def __init__(self, cfg: Config, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.w1 = eqx.nn.Linear(cfg.dim, cfg.ffn_dim, use_bias=False, key=k1)
        self.w2 = eqx.nn.Linear(cfg.ffn_dim, cfg.dim, use_bias=False, key=k2)
        self.w3 = eqx.nn.Linear(cfg.dim, cfg.ffn_dim, use_bias=False, key=k3)

    def __call__(self, x):
        return linear(self.w2, jax.nn.silu(linear(self.w1, x)) * linear(self.w3, x))


class Block(eqx.Module):
    attention_norm: RMSNorm
    attention: Attention
    ffn_norm: RMSNorm
    feed_forward: FeedForward

    def __init__(self, cfg: Config, key: jax.Array):
        attn_key, ffn_key = jax.random.split(key)
        self.attention_norm = RMSNorm(cfg.dim, cfg.eps)
        self.attention = Attention(cfg, attn_key)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.feed_forward = FeedForward(cfg, ffn_key)

    def __call__(self, x, cos, sin, mask, positions, state):
        attended, state = self.attention(self.attention_norm(x), cos, sin, mask, positions, state)
        h = x + attended
        return h + self.feed_forward(self.ffn_norm(h)), state


class Llama(eqx.Module):
    embedding: eqx.nn.Embedding
    blocks: list[Block]
    norm: RMSNorm
    head: eqx.nn.Linear
    cfg: Config = eqx.field(static=True)

    def __init__(self, cfg: Config, key: jax.Array):
        embed_key, head_key, *block_keys = jax.random.split(key, 2 + cfg.n_layers)
        self.embedding = eqx.nn.Embedding(cfg.vocab_size, cfg.dim, key=embed_key)
        self.blocks = [Block(cfg, k) for k in block_keys]
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.head = eqx.nn.Linear(cfg.dim, cfg.vocab_size, use_bias=False, key=head_key)
        self.cfg = cfg

    def __call__(self, tokens, positions, state):
        cfg = self.cfg
        inv_freq = 1.0 / cfg.rope_base ** (jnp.arange(0, cfg.head_dim, 2, dtype=jnp.float32) / cfg.head_dim)
        angles = jnp.outer(positions.astype(jnp.float32), inv_freq)
        cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
        mask = (positions[:, None] >= jnp.arange(cfg.max_seq_len)[None, :])[None, None]
        x = self.embedding.weight[tokens]
        for block in self.blocks:
            x, state = block(x, cos, sin, mask, positions, state)
        return linear(self.head, self.norm(x)), state


def build() -> tuple[Llama, eqx.nn.State]:
    return eqx.nn.make_with_state(Llama)(Config(), jax.random.key(0))
