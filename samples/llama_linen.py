"""A Flax Linen port of samples/llama_model.py in the MaxText manner: `@nn.compact` modules configured
by a dataclass, kernels laid out (in..., out...) (q/k/v `DenseGeneral` kernels are (embed, heads,
head_dim)), layers named `layers_0`, ..., and the KV cache in the `cache` collection.

`annotate review samples/llama_model.py samples/llama_linen.py` loads the torch weights into the
variables `build()` returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class Config:
    vocab_size: int = 256
    emb_dim: int = 64
    num_decoder_layers: int = 2
    num_query_heads: int = 4
    num_kv_heads: int = 2
    mlp_dim: int = 256
    max_target_length: int = 64
    rope_max_timescale: float = 10000.0
    normalization_layer_epsilon: float = 1e-5
    batch_size: int = 1

    @property
    def head_dim(self) -> int:
        return self.emb_dim // self.num_query_heads


class RMSNorm(nn.Module):
    epsilon: float

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.epsilon)
        return normed.astype(x.dtype) * scale


def rotary_embedding(x, positions, max_timescale):
    """Rotate consecutive feature pairs of x: (batch, seq, heads, head_dim) by position."""
    head_dim = x.shape[-1]
    timescale = max_timescale ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = positions.astype(jnp.float32)[:, None] / timescale[None, :]
    sin, cos = jnp.sin(angles)[:, None, :], jnp.cos(angles)[:, None, :]
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    first, second = pairs[..., 0], pairs[..., 1]
    rotated = jnp.stack([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


class Attention(nn.Module):
    config: Config

    @nn.compact
    def __call__(self, x, positions, mask):
        cfg = self.config
        heads, kv_heads, head_dim = cfg.num_query_heads, cfg.num_kv_heads, cfg.head_dim
        query = nn.DenseGeneral((heads, head_dim), use_bias=False, name="query")(x)
        key = nn.DenseGeneral((kv_heads, head_dim), use_bias=False, name="key")(x)
        value = nn.DenseGeneral((kv_heads, head_dim), use_bias=False, name="value")(x)
        query = rotary_embedding(query, positions, cfg.rope_max_timescale)
        key = rotary_embedding(key, positions, cfg.rope_max_timescale)
        cache_shape = (cfg.batch_size, kv_heads, cfg.max_target_length, head_dim)
        cached_key = self.variable("cache", "cached_key", jnp.zeros, cache_shape, jnp.float32)
        cached_value = self.variable("cache", "cached_value", jnp.zeros, cache_shape, jnp.float32)
        cached_key.value = cached_key.value.at[:, :, positions].set(key.transpose(0, 2, 1, 3))
        cached_value.value = cached_value.value.at[:, :, positions].set(value.transpose(0, 2, 1, 3))
        keys = jnp.repeat(cached_key.value, heads // kv_heads, axis=1)
        values = jnp.repeat(cached_value.value, heads // kv_heads, axis=1)
        logits = jnp.einsum("bsnh,bnth->bnst", query, keys) / jnp.sqrt(head_dim).astype(query.dtype)
        weights = jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)
        out = jnp.einsum("bnst,bnth->bsnh", weights, values).reshape(*x.shape[:2], heads * head_dim)
        out_kernel = self.param("out_kernel", nn.initializers.lecun_normal(), (heads * head_dim, cfg.emb_dim))
        return jnp.einsum("bsh,he->bse", out, out_kernel)


class MlpBlock(nn.Module):
    config: Config

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        gate = nn.Dense(cfg.mlp_dim, use_bias=False, name="wi_0")(x)
        up = nn.Dense(cfg.mlp_dim, use_bias=False, name="wi_1")(x)
        return nn.Dense(cfg.emb_dim, use_bias=False, name="wo")(nn.silu(gate) * up)


class DecoderLayer(nn.Module):
    config: Config

    @nn.compact
    def __call__(self, x, positions, mask):
        eps = self.config.normalization_layer_epsilon
        normed = RMSNorm(eps, name="pre_self_attention_layer_norm")(x)
        h = x + Attention(self.config, name="self_attention")(normed, positions, mask)
        normed = RMSNorm(eps, name="post_self_attention_layer_norm")(h)
        return h + MlpBlock(self.config, name="mlp")(normed)


class Decoder(nn.Module):
    config: Config

    @nn.compact
    def __call__(self, tokens, positions):
        cfg = self.config
        mask = (positions[:, None] >= jnp.arange(cfg.max_target_length)[None, :])[None, None]
        x = nn.Embed(cfg.vocab_size, cfg.emb_dim, name="token_embedder")(tokens)
        for i in range(cfg.num_decoder_layers):
            x = DecoderLayer(cfg, name=f"layers_{i}")(x, positions, mask)
        x = RMSNorm(cfg.normalization_layer_epsilon, name="decoder_norm")(x)
        return nn.Dense(cfg.vocab_size, use_bias=False, name="logits_dense")(x)


def build() -> tuple[Decoder, dict]:
    config = Config()
    model = Decoder(config)
    tokens = jnp.zeros((config.batch_size, 8), jnp.int32)
    return model, model.init(jax.random.key(0), tokens, jnp.arange(8))
