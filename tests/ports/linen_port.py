"""A Flax Linen port of tiny_decoder.py in one module, which linen_entry.py imports."""

import jax
import jax.numpy as jnp
from flax import linen as nn


def rotate_half(x):
    first, second = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-second, first], axis=-1)


class RMSNorm(nn.Module):
    eps: float = 1e-3

    @nn.compact
    def __call__(self, x):
        weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
        return weight * (x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps))


class Attention(nn.Module):
    heads: int = 2
    head_dim: int = 8

    @nn.compact
    def __call__(self, x, cos, sin):
        batch, seq, dim = x.shape
        split = lambda t: t.reshape(batch, seq, self.heads, self.head_dim).transpose(0, 2, 1, 3)  # noqa: E731
        q = split(nn.Dense(self.heads * self.head_dim, use_bias=False, name="q_proj")(x))
        k = split(nn.Dense(self.heads * self.head_dim, use_bias=False, name="k_proj")(x))
        v = split(nn.Dense(self.heads * self.head_dim, use_bias=False, name="v_proj")(x))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * self.head_dim**-0.5
        scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -jnp.inf)
        out = jnp.einsum("bhqk,bhkd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(batch, seq, -1)
        return nn.Dense(dim, use_bias=False, name="o_proj")(out)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, cos, sin):
        x = x + Attention(name="self_attn")(RMSNorm(name="input_layernorm")(x), cos, sin)
        h = RMSNorm(name="post_attention_layernorm")(x)
        gate = nn.Dense(40, use_bias=False, name="gate_proj")(h)
        up = nn.Dense(40, use_bias=False, name="up_proj")(h)
        return x + nn.Dense(16, use_bias=False, name="down_proj")(nn.silu(gate) * up)


class Decoder(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        seq = tokens.shape[1]
        inv_freq = 1.0 / 10000.0 ** (jnp.arange(0, 8, 2, dtype=jnp.float32) / 8)
        freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
        angles = jnp.concatenate([freqs, freqs], axis=-1)
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        x = nn.Embed(24, 16, name="embed_tokens")(tokens)
        x = Block(name="layers_0")(x, cos, sin)
        return nn.Dense(24, use_bias=False, name="lm_head")(RMSNorm(name="norm")(x))
