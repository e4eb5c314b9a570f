"""JAX for samples/jax_programs.py: leaky_or_quadratic, exported by jaxside from one
traced run.

Traced with x: float32[3], threshold: float32[]; shapes and non-tensor inputs are
baked in as they were then.

Call it:

    outputs = leaky_or_quadratic(x, threshold)

`leaky_or_quadratic` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax.numpy as jnp
from jax import lax


def leaky_or_quadratic(x, threshold):
    """`leaky_or_quadratic`, jax_programs.py:130."""
    gt = jnp.sum(x, axis=0) > lax.convert_element_type(threshold, jnp.float32)

    def leaky(x):
        return jnp.where(x > 0.0, x, 0.01 * x)

    def quadratic(x):
        return x * x

    return lax.cond(gt, quadratic, leaky, x)
