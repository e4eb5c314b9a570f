import equinox as eqx
import jax
import jax.numpy as jnp


def dense(layer, x):
    return x @ layer.weight.T


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    turned = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + turned * sin


class Attention(eqx.Module):
    q_proj: eqx.nn.Linear
    k_proj: eqx.nn.Linear
    v_proj: eqx.nn.Linear
    o_proj: eqx.nn.Linear
    heads: int = eqx.field(static=True, default=2)

    def __call__(self, x, cos, sin):
        batch, seq, dim = x.shape
        q, k, v = (dense(p, x).reshape(batch, seq, self.heads, -1).transpose(0, 2, 1, 3)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / jnp.sqrt(q.shape[-1])
        scores = jnp.where(jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :], scores, -jnp.inf)
        out = jnp.matmul(jax.nn.softmax(scores, axis=-1), v)
        return dense(self.o_proj, out.transpose(0, 2, 1, 3).reshape(batch, seq, dim))
