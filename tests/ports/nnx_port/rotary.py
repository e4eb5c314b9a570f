import jax.numpy as jnp

THETA = 10000.0


def angles(seq, head_dim):
    inv_freq = 1.0 / THETA ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    freqs = jnp.outer(jnp.arange(seq, dtype=jnp.float32), inv_freq)
    both = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(both), jnp.sin(both)


def rotate(x, cos, sin):
    first, second = jnp.split(x, 2, axis=-1)
    turned = jnp.concatenate([-second, first], axis=-1)
    return x * cos + turned * sin
