"""JAX for samples/jax_programs.py: fwd, exported by jaxside from one traced run.

Traced with params[0]: bfloat16[2,2,16,32], params[1]: bfloat16[2,2,16,32], x:
bfloat16[4,128,32]; shapes and non-tensor inputs are baked in as they were then.

Call it:

    outputs = fwd(params, x)

`fwd` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax
import jax.numpy as jnp
from jax import lax


def fwd(params, x):
    """`fwd`, jax_programs.py:201."""

    def layer(x, params):
        qkv, o = params
        y = jnp.einsum("abc,dec->abde", x, qkv)

        def block(block_idx):
            query_block = lax.dynamic_slice_in_dim(y, block_idx, 64, axis=1)
            weights = jnp.sum(query_block.astype(jnp.float32), axis=3).astype(
                jnp.bfloat16
            )
            weights = lax.broadcast_in_dim(weights, (4, 64, 2, 64), (0, 1, 2))
            bias = jnp.ones((64,), jnp.float32)
            bias = jnp.broadcast_to(bias, (4, 64, 2, 64))
            weights = weights.astype(jnp.float32) + bias
            return jnp.einsum("abcd,adce->abce", weights, query_block).astype(
                jnp.bfloat16
            )

        blocked_attn = lax.map(block, jnp.arange(2, dtype=jnp.int32))
        y_1 = lax.reshape(blocked_attn, (4, 128, 2, 16), (1, 0, 2, 3, 4))
        z = jnp.einsum("abdc,dce->abe", y_1, o)
        return z, None

    x_1, _ = lax.scan(
        jax.checkpoint(layer, prevent_cse=False), x, (params[0], params[1])
    )
    return x_1
