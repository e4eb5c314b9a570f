import equinox as eqx
import jax
import jax.numpy as jnp


class RMSNorm(eqx.Module):
    weight: jax.Array
    eps: float = eqx.field(static=True, default=1e-3)

    def __call__(self, x):
        variance = jnp.mean(x**2, axis=-1, keepdims=True)
        return self.weight * (x * jax.lax.rsqrt(variance + self.eps))
