import jax
import jax.numpy as jnp
from flax import nnx

from nnx_port.rotary import rotate


class RMSNorm(nnx.Module):
    def __init__(self, dim, eps=1e-3):
        self.weight = nnx.Param(jnp.ones((dim,)))
        self.eps = eps

    def __call__(self, x):
        normed = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * normed


class Attention(nnx.Module):
    def __init__(self, dim, heads, head_dim, rngs):
        self.heads, self.head_dim = heads, head_dim
        self.q_proj = nnx.Linear(dim, heads * head_dim, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(dim, heads * head_dim, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(dim, heads * head_dim, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(heads * head_dim, dim, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin):
        batch, seq, _ = x.shape
        q = self.q_proj(x).reshape(batch, seq, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(batch, seq, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(batch, seq, self.heads, self.head_dim).transpose(0, 2, 1, 3)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = q @ k.swapaxes(-1, -2) / jnp.sqrt(self.head_dim).astype(q.dtype)
        causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        probs = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        out = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        return self.o_proj(out)


class MLP(nnx.Module):
    def __init__(self, dim, hidden, rngs):
        self.gate_proj = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(hidden, dim, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))
