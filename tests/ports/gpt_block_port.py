"""A plain-JAX port of gpt_block.py, written by hand; the review tests plant bugs in copies of it."""

import math

import jax
import jax.numpy as jnp

HEADS = 3


def linear(p, x):
    y = x @ p["weight"].T
    return y + p["bias"] if "bias" in p else y


def layer_norm(p, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * p["weight"] + p["bias"]


def attention(p, x):
    B, T, C = x.shape
    q, k, v = jnp.split(linear(p["c_attn"], x), 3, axis=2)
    q, k, v = (t.reshape(B, T, HEADS, C // HEADS).transpose(0, 2, 1, 3) for t in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(k.shape[-1])
    att = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((T, T), bool)), att, -jnp.inf), axis=-1)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return linear(p["c_proj"], y)


def block(p, x):
    x = x + attention(p["attn"], layer_norm(p["ln_1"], x))
    h = jax.nn.gelu(linear(p["c_fc"], layer_norm(p["ln_2"], x)), approximate=False)
    return x + linear(p["c_proj"], h)


def forward(params, idx):
    x = params["wte"]["weight"][idx] + params["wpe"]["weight"][jnp.arange(idx.shape[1])]
    for p in params["h"]:
        x = block(p, x)
    x = layer_norm(params["ln_f"], x)
    return linear(params["lm_head"], x)
