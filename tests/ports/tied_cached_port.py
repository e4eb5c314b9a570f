"""A plain-JAX one-shot port of tied_cached.py: no KV cache, the causal mask made with `jnp.tril`,
the output head the token embedding's transpose."""

import jax
import jax.numpy as jnp

HEADS = 2


def layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p["weight"] + p["bias"]


def linear(p, x):
    return x @ p["weight"].T + p["bias"]


def attention(p, x):
    B, T, C = x.shape
    q, k, v = jnp.split(linear(p["c_attn"], x), 3, axis=-1)
    q, k, v = (t.reshape(B, T, HEADS, C // HEADS).transpose(0, 2, 1, 3) for t in (q, k, v))
    att = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(C // HEADS)
    att = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), att, -jnp.inf)
    y = jax.nn.softmax(att, axis=-1) @ v
    return linear(p["c_proj"], y.transpose(0, 2, 1, 3).reshape(B, T, C))


def forward(params, idx, pos):
    x = params["wte"]["weight"][idx]
    for block in params["h"]:
        x = x + attention(block["attn"], layer_norm(block["ln_1"], x))
        x = x + linear(block["c_out"], jax.nn.gelu(linear(block["c_fc"], layer_norm(block["ln_2"], x)),
                                                     approximate=False))
    return layer_norm(params["ln_f"], x) @ params["wte"]["weight"].T
