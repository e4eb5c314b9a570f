"""A JAX port of windowed.py: its window and the flag torch sets in place are constants, which the
jaxpr returns as literals."""

import jax.numpy as jnp


def forward(params, x):
    y = jnp.tanh(x @ params["proj"]["weight"].T + params["proj"]["bias"]) * 2.0
    return {"y": y, "window": jnp.int32(4), "ran": jnp.float32(1.0)}
