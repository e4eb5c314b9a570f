"""A Flax NNX one-shot port of tied_cached.py that holds its own boolean causal mask (an
`nnx.Variable`), keeps no KV cache and ties its head: `wte.attend`."""

import jax
import jax.numpy as jnp
from flax import nnx

DIM, HEADS, VOCAB, MAX, LAYERS = 16, 2, 24, 12, 2


class Attention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.c_attn = nnx.Linear(DIM, 3 * DIM, rngs=rngs)
        self.c_proj = nnx.Linear(DIM, DIM, rngs=rngs)
        self.mask = nnx.Variable(jnp.tril(jnp.ones((MAX, MAX), dtype=bool)))

    def __call__(self, x):
        B, T, C = x.shape
        q, k, v = jnp.split(self.c_attn(x), 3, axis=-1)
        q, k, v = (t.reshape(B, T, HEADS, C // HEADS) for t in (q, k, v))
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(C // HEADS)
        att = jnp.where(self.mask[...][:T, :T], att, -jnp.inf)
        y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(att, axis=-1), v)
        return self.c_proj(y.reshape(B, T, C))


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(DIM, epsilon=1e-5, rngs=rngs)
        self.attn = Attention(rngs)
        self.ln_2 = nnx.LayerNorm(DIM, epsilon=1e-5, rngs=rngs)
        self.c_fc = nnx.Linear(DIM, 4 * DIM, rngs=rngs)
        self.c_out = nnx.Linear(4 * DIM, DIM, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_out(nnx.gelu(self.c_fc(self.ln_2(x)), approximate=False))


class GPT(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.wte = nnx.Embed(VOCAB, DIM, rngs=rngs)
        self.h = nnx.List([Block(rngs) for _ in range(LAYERS)])
        self.ln_f = nnx.LayerNorm(DIM, epsilon=1e-5, rngs=rngs)

    def __call__(self, idx, pos):
        x = self.wte(idx)
        for block in self.h:
            x = block(x)
        return self.wte.attend(self.ln_f(x))


def build() -> GPT:
    return GPT(nnx.Rngs(0))
