"""A plain-JAX port of samples/mlp.py, as someone would write it by hand, for the Python API's tests:
`forward` is right; `forward_relu` has one bug planted (ReLU where torch has GELU)."""

import jax
import jax.numpy as jnp


def linear(p, x):
    return x @ p["weight"].T + p["bias"]


def layer_norm(p, x, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * p["weight"] + p["bias"]


def forward(params, x):
    h = jax.nn.gelu(linear(params["fc1"], x), approximate=False)
    h = layer_norm(params["norm"], h + jax.nn.relu(linear(params["fc2"], h)))
    return linear(params["head"], h)


def forward_relu(params, x):
    h = jax.nn.relu(linear(params["fc1"], x))
    h = layer_norm(params["norm"], h + jax.nn.relu(linear(params["fc2"], h)))
    return linear(params["head"], h)
