"""JAX for samples/jax_programs.py: grad_fn, exported by jaxside from one traced run.

Traced with params[0]: bfloat16[2,2,16,32], params[1]: bfloat16[2,2,16,32], x:
bfloat16[4,128,32]; shapes and non-tensor inputs are baked in as they were then.

Call it:

    outputs = grad_fn(params, x)

`grad_fn` works under `jax.jit`, `jax.vmap` and `jax.grad`.
"""

import jax
import jax.numpy as jnp
from jax import lax


def grad_fn(params, x):
    """`grad_fn`, jax_programs.py:220."""
    loss, scan_layer = loss_fn(params, x)
    grad_x = jnp.broadcast_to(
        lax.div(jnp.float32(1.0), jnp.float32(16384.0)), (4, 128, 32)
    ).astype(jnp.bfloat16)

    def grad_layer(carry, xs):
        xs_0, xs_1, xs_2 = xs

        def grad_layer_1(xs_0, xs_1, xs_2, carry):
            y = jnp.einsum("abc,dec->abde", xs_0, xs_1)
            bias = jnp.ones((64,), jnp.float32)
            bias_1 = jnp.broadcast_to(bias, (4, 64, 2, 64))

            def body(x):
                dynamic_slice_in_dim_x = lax.select(x < 0, x + 128, x)
                query_block = lax.dynamic_slice(
                    y,
                    (jnp.int32(0), dynamic_slice_in_dim_x, jnp.int32(0), jnp.int32(0)),
                    (4, 64, 2, 16),
                    allow_negative_indices=False,
                )
                weights = jnp.sum(query_block.astype(jnp.float32), axis=3).astype(
                    jnp.bfloat16
                )
                weights = lax.broadcast_in_dim(weights, (4, 64, 2, 64), (0, 1, 2))
                weights = weights.astype(jnp.float32)
                weights = weights + bias_1
                return (
                    jnp.einsum("abcd,adce->abce", weights, query_block).astype(
                        jnp.bfloat16
                    ),
                    dynamic_slice_in_dim_x,
                    weights,
                    query_block,
                )

            blocked_attn, map_block, map_block_1, blocked_attn_1 = lax.map(
                body, jnp.arange(2, dtype=jnp.int32)
            )
            blocked_attn = lax.reshape(blocked_attn, (4, 128, 2, 16), (1, 0, 2, 3, 4))
            grad_einsum = jnp.transpose(
                jnp.einsum("abc,abde->cde", carry, blocked_attn), (1, 2, 0)
            )
            grad_blocked_attn = jnp.einsum("abc,dec->abde", carry, xs_2)
            grad_blocked_attn = jnp.transpose(
                jnp.reshape(grad_blocked_attn, (4, 2, 64, 2, 16)), (1, 0, 2, 3, 4)
            )

            def grad_body(carry, xs):
                xs_0, xs_1, xs_2, xs_3 = xs
                grad_einsum = xs_0.astype(jnp.float32)
                grad_einsum = jnp.transpose(grad_einsum, (0, 2, 3, 1))
                grad_weights = jnp.einsum("abcd,acde->aecb", xs_3, grad_einsum)
                grad_query_block = jnp.einsum(
                    "abcd,aceb->adce", xs_2, grad_einsum
                ).astype(jnp.bfloat16)
                grad_weights = grad_weights.astype(jnp.bfloat16)
                grad_weights = lax.reduce_sum(grad_weights, (3,))
                grad_query_block = grad_query_block + lax.broadcast_in_dim(
                    grad_weights.astype(jnp.float32), (4, 64, 2, 16), (0, 1, 2)
                ).astype(jnp.bfloat16)
                grad_dynamic_slice_in_dim_x = carry + lax.dynamic_update_slice(
                    jnp.zeros((4, 128, 2, 16), jnp.bfloat16),
                    grad_query_block,
                    (jnp.int32(0), xs_1, jnp.int32(0), jnp.int32(0)),
                    allow_negative_indices=False,
                )
                return grad_dynamic_slice_in_dim_x, None

            grad_y, _ = lax.scan(
                grad_body,
                jnp.zeros((4, 128, 2, 16), jnp.bfloat16),
                (grad_blocked_attn, map_block, map_block_1, blocked_attn_1),
                reverse=True,
            )
            grad_xs_1 = jnp.einsum("abcd,abe->cde", grad_y, xs_0)
            grad_xs_0 = jnp.einsum("abcd,cde->abe", grad_y, xs_1)
            return grad_xs_0, grad_xs_1, grad_einsum

        grad, grad_1, grad_2 = jax.checkpoint(grad_layer_1, prevent_cse=False)(
            xs_0, xs_1, xs_2, carry
        )
        return grad, (grad_1, grad_2)

    _, (grad_params_0, grad_params_1) = lax.scan(
        grad_layer, grad_x, (scan_layer, params[0], params[1]), reverse=True
    )
    return loss, grad_params_0, grad_params_1


def loss_fn(params, x):
    """`loss_fn`, jax_programs.py:214."""
    x, scan_layer = fwd(params, x)
    loss = jnp.mean(x.astype(jnp.float32), axis=(0, 1, 2)).astype(jnp.bfloat16)
    return loss, scan_layer


def fwd(params, x):
    """`fwd`, jax_programs.py:201."""

    def call(x):
        bias = jnp.ones((64,), jnp.float32)
        bias = jnp.broadcast_to(bias, (4, 64, 2, 64))

        def body(x):
            return lax.select(x < 0, x + 128, x)

        scan = lax.map(body, x)
        return bias, scan

    map_block, map_block_1 = call(jnp.arange(2, dtype=jnp.int32))

    def layer(carry, xs):
        xs_0, xs_1 = xs
        y = jnp.einsum("abc,dec->abde", carry, xs_0)

        def call(map_block_2, map_block_1_1, y):
            def body(x):
                query_block = lax.dynamic_slice(
                    y,
                    (jnp.int32(0), x, jnp.int32(0), jnp.int32(0)),
                    (4, 64, 2, 16),
                    allow_negative_indices=False,
                )
                weights = jnp.sum(query_block.astype(jnp.float32), axis=3).astype(
                    jnp.bfloat16
                )
                weights = lax.broadcast_in_dim(weights, (4, 64, 2, 64), (0, 1, 2))
                weights = weights.astype(jnp.float32)
                weights = weights + map_block_2
                return jnp.einsum("abcd,adce->abce", weights, query_block).astype(
                    jnp.bfloat16
                )

            scan = lax.map(body, map_block_1_1)
            return scan

        blocked_attn = call(map_block, map_block_1, y)
        blocked_attn = lax.reshape(blocked_attn, (4, 128, 2, 16), (1, 0, 2, 3, 4))
        z = jnp.einsum("abdc,dce->abe", blocked_attn, xs_1)
        return z, carry

    x_1, scan_layer = lax.scan(layer, x, (params[0], params[1]))
    return x_1, scan_layer
