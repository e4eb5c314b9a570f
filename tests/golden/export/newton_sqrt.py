"""JAX for samples/jax_programs.py: newton_sqrt, exported by jaxside from one traced
run.

Traced with a: float32[]; shapes and non-tensor inputs are baked in as they were
then.

Call it:

    outputs = newton_sqrt(a)

`newton_sqrt` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax.numpy as jnp
from jax import lax


def newton_sqrt(a):
    """`newton_sqrt`, jax_programs.py:115."""

    def not_done(state):
        x, previous = state
        return jnp.abs(x - previous) > 1e-06

    def step(state):
        x, _ = state
        return (x + a / x) / 2.0, x

    root, _ = lax.while_loop(not_done, step, (a, a + 1.0))
    return root
