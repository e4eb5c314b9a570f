"""A plain-JAX port of tied_cached.py that keeps the KV cache: caches in, caches out, read through
the mask torch holds. Its helpers are the one-shot port's, imported: a port of two files."""

import jax
import jax.numpy as jnp
from tied_cached_port import HEADS, layer_norm, linear


def attention(p, cache, x, mask, pos):
    B, T, C = x.shape
    q, k, v = jnp.split(linear(p["c_attn"], x), 3, axis=-1)
    q, k, v = (t.reshape(B, T, HEADS, C // HEADS).transpose(0, 2, 1, 3) for t in (q, k, v))
    keys = cache["k_cache"].at[:, :, pos].set(k)
    values = cache["v_cache"].at[:, :, pos].set(v)
    att = jnp.where(mask, q @ keys.transpose(0, 1, 3, 2) / jnp.sqrt(C // HEADS), -jnp.inf)
    y = jax.nn.softmax(att, axis=-1) @ values
    out = linear(p["c_proj"], y.transpose(0, 2, 1, 3).reshape(B, T, C))
    return out, {"k_cache": keys, "v_cache": values}


def forward(params, idx, pos):
    mask = params["causal_mask"][pos]
    x = params["wte"]["weight"][idx]
    caches = []
    for block in params["h"]:
        out, cache = attention(block["attn"], block["attn"], layer_norm(block["ln_1"], x), mask, pos)
        caches.append(cache)
        x = x + out
        x = x + linear(block["c_out"], jax.nn.gelu(linear(block["c_fc"], layer_norm(block["ln_2"], x)),
                                                     approximate=False))
    return layer_norm(params["ln_f"], x) @ params["wte"]["weight"].T, caches
