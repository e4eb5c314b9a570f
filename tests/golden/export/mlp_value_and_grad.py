"""JAX for samples/jax_programs.py: value_and_grad_mlp_loss, exported by jaxside from
one traced run.

Traced with params['b1']: float32[16], params['b2']: float32[4], params['w1']:
float32[8,16], params['w2']: float32[16,4], x: float32[32,8], y: float32[32,4];
shapes and non-tensor inputs are baked in as they were then.

Call it:

    outputs = value_and_grad_mlp_loss(params, x, y)

`value_and_grad_mlp_loss` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax.numpy as jnp
from jax import lax


def value_and_grad_mlp_loss(params, x, y):
    """`value_and_grad_mlp_loss`, jax_programs.py."""
    value, hidden, d_hidden, d_error_pow_2 = mlp_loss(params, x, y)
    grad_error_pow_2 = jnp.broadcast_to(
        lax.div(jnp.float32(1.0), jnp.float32(128.0)), (32, 4)
    )
    grad_error = grad_error_pow_2 * d_error_pow_2
    grad_params_b2 = jnp.sum(jnp.sum(grad_error, axis=0)[None], axis=0)
    grad_params_w2 = (grad_error.T @ hidden).T
    grad_hidden = grad_error @ params["w2"].T
    grad_tanh = grad_hidden * d_hidden
    grad_x_matmul_w1 = grad_tanh + grad_tanh * hidden
    grad_params_b1 = jnp.sum(jnp.sum(grad_x_matmul_w1, axis=0)[None], axis=0)
    grad_params_w1 = (grad_x_matmul_w1.T @ x).T
    return value, {
        "b1": grad_params_b1,
        "b2": grad_params_b2,
        "w1": grad_params_w1,
        "w2": grad_params_w2,
    }


def mlp_loss(params, x, y):
    """`mlp_loss`, jax_programs.py:19."""
    prediction, hidden, d_hidden = mlp(params, x)
    error = prediction - y
    return jnp.mean(error**2, axis=(0, 1)), hidden, d_hidden, 2.0 * error


def mlp(params, x):
    """`mlp`, jax_programs.py:13."""
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"], hidden, 1.0 - hidden
