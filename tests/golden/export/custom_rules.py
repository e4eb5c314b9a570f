"""JAX for samples/jax_programs.py: custom_rules, exported by jaxside from one traced
run.

Traced with x: float32[2]; shapes and non-tensor inputs are baked in as they were
then.

Call it:

    outputs = custom_rules(x)

`custom_rules` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax
import jax.numpy as jnp


def custom_rules(x):
    """`custom_rules`, jax_programs.py:96."""
    y = stable_softplus(x) * 3.0

    def clip_gradient(x):
        """Its custom VJP rule is not reproduced here:

        `jax.grad` of this code differentiates this body instead.
        """
        return x

    return clip_gradient(y) + jax.nn.relu(x)


@jax.custom_jvp
def stable_softplus(x):
    return jnp.logaddexp(x, jnp.float32(0.0))


@stable_softplus.defjvp
def stable_softplus_jvp(primals, tangents):
    x = primals[0]
    x_dot = tangents[0]
    return stable_softplus(x), jax.nn.sigmoid(x) * x_dot
