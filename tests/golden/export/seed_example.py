"""JAX for samples/seed_example.py: my_mathy_thing, exported by jaxside from one traced
run (torchax).

Traced with weight: float32[4,4], hidden: float32[4,4]; non-tensor inputs are baked
in as they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`weight.shape[0]` = `weight.shape[1]` = `hidden.shape[0]` = `hidden.shape[1]`.

Call it:

    outputs = my_mathy_thing(weight, hidden)

`my_mathy_thing` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).
"""

import jax.numpy as jnp


def my_mathy_thing(weight, hidden):
    """`my_mathy_thing`, seed_example.py:6."""
    if weight.shape[1] != weight.shape[0]:
        raise ValueError("weight.shape[1] must equal weight.shape[0]")
    if hidden.shape[0] != weight.shape[0]:
        raise ValueError("hidden.shape[0] must equal weight.shape[0]")
    if hidden.shape[1] != weight.shape[0]:
        raise ValueError("hidden.shape[1] must equal weight.shape[0]")
    activation = weight @ hidden
    output = jnp.sin(activation) + other_math(weight, hidden)
    return output + hidden


def other_math(a, b):
    """`my_mathy_thing.<locals>.other_math`, seed_example.py:7."""
    return (a + b) @ (a * b)
