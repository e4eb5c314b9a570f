"""A hand-written plain-JAX port of samples/llama_model.py, as a person porting it would write it.

Its parameters use the port's own names (`blocks`, `attn`, `mlp`, ...) rather than torch's
state_dict paths, and the KV cache is explicit state in and out. tests/test_review.py breaks
one line of it at a time, for `annotate review` to find.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rms_norm(x, weight, eps=1e-5):
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return normed.astype(x.dtype) * weight


def rope(x, table):
    """Rotate pairs of features by the angles in `table` (seq, head_dim // 2, 2: cos and sin)."""
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    cos = table[None, :, None, :, 0]
    sin = table[None, :, None, :, 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


def attention(p, cache, x, table, mask, pos, n_head, n_kv_head):
    batch, seq, dim = x.shape
    head_dim = dim // n_head
    qkv = x @ p["wqkv"].T
    q, k, v = jnp.split(qkv, [dim, dim + n_kv_head * head_dim], axis=-1)
    q = rope(q.reshape(batch, seq, n_head, head_dim), table)
    k = rope(k.reshape(batch, seq, n_kv_head, head_dim), table)
    v = v.reshape(batch, seq, n_kv_head, head_dim)
    q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    keys = cache["k"].at[:, :, pos].set(k)
    values = cache["v"].at[:, :, pos].set(v)
    keys_all = jnp.repeat(keys, n_head // n_kv_head, axis=1)
    values_all = jnp.repeat(values, n_head // n_kv_head, axis=1)
    scores = q @ keys_all.transpose(0, 1, 3, 2) / jnp.sqrt(head_dim).astype(q.dtype)
    scores = jnp.where(mask, scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1)
    out = (weights @ values_all).transpose(0, 2, 1, 3).reshape(batch, seq, dim)
    return out @ p["wo"].T, {"k": keys, "v": values}


def mlp(p, x):
    return (jax.nn.silu(x @ p["w1"].T) * (x @ p["w3"].T)) @ p["w2"].T


def block(p, cache, x, table, mask, pos, n_head, n_kv_head):
    attn_out, cache = attention(p["attn"], cache, rms_norm(x, p["attn_norm"]), table, mask, pos,
                                n_head, n_kv_head)
    h = x + attn_out
    return h + mlp(p["mlp"], rms_norm(h, p["mlp_norm"])), cache


def forward(params, caches, tokens, pos, n_head=4, n_kv_head=2):
    """Logits for `tokens` at positions `pos`, and the caches with those positions written."""
    mask = params["causal_mask"][None, None, pos]
    table = params["rope"][pos]
    x = params["embed"][tokens]
    new_caches = []
    for p, cache in zip(params["blocks"], caches):
        x, cache = block(p, cache, x, table, mask, pos, n_head, n_kv_head)
        new_caches.append(cache)
    x = rms_norm(x, params["final_norm"])
    return x @ params["lm_head"].T, new_caches
