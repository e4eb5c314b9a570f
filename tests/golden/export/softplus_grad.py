"""JAX for samples/jax_programs.py: grad_fn, exported by jaxside from one traced run.

Traced with x: float32[]; shapes and non-tensor inputs are baked in as they were
then.

Call it:

    outputs = grad_fn(x)

`grad_fn` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax.numpy as jnp


def grad_fn(x):
    """`grad_fn`, jax_programs.py."""
    exp_x = jnp.exp(x)
    grad_exp_plus_1 = 1.0 / (1.0 + exp_x)
    grad_x = grad_exp_plus_1 * exp_x
    return grad_x
