"""A JAX port of windowed.py: its window is a constant, which the jaxpr returns as a literal."""

import jax.numpy as jnp


def forward(params, x):
    y = jnp.tanh(x @ params["proj"]["weight"].T + params["proj"]["bias"]) * 2.0
    return {"y": y, "window": jnp.int32(4)}
