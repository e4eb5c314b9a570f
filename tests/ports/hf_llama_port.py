"""A plain JAX port of transformers' Llama (hf_llama.py's config), written as a user would: weights
as the state_dict's nested dicts, rotate-half rotary from positions, grouped queries repeated, a
causal mask made with `jnp.tril`."""

import jax
import jax.numpy as jnp

HEADS, KV_HEADS, DIM, THETA, EPS = 4, 2, 32, 10000.0, 1e-6
HEAD_DIM = DIM // HEADS


def rms_norm(x, weight):
    variance = jnp.mean(x * x, axis=-1, keepdims=True)
    return weight * (x * jax.lax.rsqrt(variance + EPS))


def rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def rotary(seq):
    inv_freq = 1.0 / (THETA ** (jnp.arange(0, HEAD_DIM, 2, dtype=jnp.float32) / HEAD_DIM))
    freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    angles = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def heads(x, weight, count):
    batch, seq, _ = x.shape
    return (x @ weight.T).reshape(batch, seq, count, HEAD_DIM).transpose(0, 2, 1, 3)


def attention(p, x, cos, sin):
    batch, seq, _ = x.shape
    q = heads(x, p["q_proj"]["weight"], HEADS)
    k = heads(x, p["k_proj"]["weight"], KV_HEADS)
    v = heads(x, p["v_proj"]["weight"], KV_HEADS)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = jnp.repeat(k, HEADS // KV_HEADS, axis=1)
    v = jnp.repeat(v, HEADS // KV_HEADS, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(HEAD_DIM)
    scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, -jnp.inf)
    out = jax.nn.softmax(scores, axis=-1) @ v
    return out.transpose(0, 2, 1, 3).reshape(batch, seq, DIM) @ p["o_proj"]["weight"].T


def mlp(p, x):
    gate = jax.nn.silu(x @ p["gate_proj"]["weight"].T)
    return (gate * (x @ p["up_proj"]["weight"].T)) @ p["down_proj"]["weight"].T


def forward(params, input_ids):
    model = params["model"]
    x = model["embed_tokens"]["weight"][input_ids]
    cos, sin = rotary(input_ids.shape[1])
    for layer in model["layers"]:
        x = x + attention(layer["self_attn"], rms_norm(x, layer["input_layernorm"]["weight"]), cos, sin)
        x = x + mlp(layer["mlp"], rms_norm(x, layer["post_attention_layernorm"]["weight"]))
    return rms_norm(x, model["norm"]["weight"]) @ params["lm_head"]["weight"].T
