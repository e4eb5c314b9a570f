"""Ports of conv1d_block.py: `build_nnx` (nnx.Linear kernels, (in, out)) and `build_equinox`
(eqx.nn.Linear weights, (out, in))."""

import equinox as eqx
import jax
import jax.numpy as jnp
from flax import nnx

DIM, HIDDEN = 8, 24


class NnxBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.c_fc = nnx.Linear(DIM, HIDDEN, rngs=rngs)
        self.c_proj = nnx.Linear(HIDDEN, DIM, rngs=rngs)
        self.c_out = nnx.Linear(DIM, DIM, rngs=rngs)
        self.gain = nnx.Variable(jnp.ones((DIM,)))

    def __call__(self, x):
        h = x + self.c_proj(nnx.gelu(self.c_fc(x), approximate=True))
        return self.c_out(h) * self.gain[...]


class EqxBlock(eqx.Module):
    c_fc: eqx.nn.Linear
    c_proj: eqx.nn.Linear
    c_out: eqx.nn.Linear
    gain: jax.Array

    def __init__(self, key) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.c_fc = eqx.nn.Linear(DIM, HIDDEN, key=k1)
        self.c_proj = eqx.nn.Linear(HIDDEN, DIM, key=k2)
        self.c_out = eqx.nn.Linear(DIM, DIM, key=k3)
        self.gain = jnp.ones((DIM,))

    def __call__(self, x):
        hidden = jax.nn.gelu(jax.vmap(jax.vmap(self.c_fc))(x), approximate=True)
        h = x + jax.vmap(jax.vmap(self.c_proj))(hidden)
        return (jnp.einsum("oi,bti->bto", self.c_out.weight, h) + self.c_out.bias) * self.gain


def build_nnx() -> NnxBlock:
    return NnxBlock(nnx.Rngs(0))


def build_equinox() -> EqxBlock:
    return EqxBlock(jax.random.key(0))
