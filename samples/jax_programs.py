"""Pure JAX programs to decompile: an MLP loss and its gradient, loops, branches and the two seeds' examples.

`annotate samples/jax_programs.py --export` writes `example()`'s program: the gradient of the MLP loss.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np


def mlp(params, x):
    """Two dense layers with a tanh between them."""
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def mlp_loss(params, x, y):
    """Mean squared error of the MLP's predictions."""
    prediction = mlp(params, x)
    error = prediction - y
    return jnp.mean(error**2)


def init_mlp(key, sizes=(8, 16, 4)):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (sizes[0], sizes[1])) / np.sqrt(sizes[0]),
        "b1": jnp.zeros(sizes[1]),
        "w2": jax.random.normal(k2, (sizes[1], sizes[2])) / np.sqrt(sizes[1]),
        "b2": jnp.zeros(sizes[2]),
    }


def mlp_data(seed=0):
    key = jax.random.key(seed)
    kp, kx, ky = jax.random.split(key, 3)
    return init_mlp(kp), jax.random.normal(kx, (32, 8)), jax.random.normal(ky, (32, 4))


def residual_block(layer, x):
    h = jnp.tanh(x @ layer["w"] + layer["b"])
    return x + h


def residual_tower(params, x):
    """A Python loop over layers: one def for the block, each layer's gradient its own."""
    for layer in params["layers"]:
        x = residual_block(layer, x)
    return jnp.sum(x**2)


def tower_params(depth=3, width=4, seed=0):
    key = jax.random.key(seed)
    layers = [
        {"w": jax.random.normal(jax.random.fold_in(key, i), (width, width)) / width, "b": jnp.zeros(width)}
        for i in range(depth)
    ]
    return {"layers": layers}


# The JaxDecompiler paper's example: the gradient of softplus, nan for x > 88 as `exp` overflows.
softplus_grad = jax.grad(lambda x: jnp.log(1 + jnp.exp(x)))


@jax.custom_jvp
def stable_softplus(x):
    """Softplus with the paper's fix as a rule: its derivative, the sigmoid, never overflows."""
    return jnp.logaddexp(x, 0.0)


@stable_softplus.defjvp
def _stable_softplus_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return stable_softplus(x), jax.nn.sigmoid(x) * x_dot


@jax.custom_vjp
def clip_gradient(x):
    """The identity, whose gradient is clipped to [-1, 1] on the way back."""
    return x


def _clip_gradient_fwd(x):
    return x, None


def _clip_gradient_bwd(_, grad):
    return (jnp.clip(grad, -1.0, 1.0),)


clip_gradient.defvjp(_clip_gradient_fwd, _clip_gradient_bwd)


def custom_rules(x):
    """Functions with their own derivative rules."""
    y = stable_softplus(x) * 3.0
    return clip_gradient(y) + jax.nn.relu(x)


def attention_scores(q, k, key):
    """A jitted helper and random keys: noisy attention weights."""

    @jax.jit
    def scores(q, k):
        return q @ k.T / jnp.sqrt(q.shape[-1])

    noise_key, dropout_key = jax.random.split(key)
    logits = scores(q, k) + 0.01 * jax.random.normal(noise_key, (q.shape[0], k.shape[0]))
    keep = jax.random.bernoulli(jax.random.fold_in(dropout_key, 1), 0.9, logits.shape)
    return jnp.where(keep, jax.nn.softmax(logits), 0.0)


def newton_sqrt(a):
    """A `while_loop`: Newton's iteration for sqrt(a) until it stops moving."""

    def not_done(state):
        x, previous = state
        return jnp.abs(x - previous) > 1e-6

    def step(state):
        x, _ = state
        return (x + a / x) / 2.0, x

    root, _ = jax.lax.while_loop(not_done, step, (a, a + 1.0))
    return root


def leaky_or_quadratic(x, threshold):
    """A `cond`: one branch or the other on a traced predicate."""

    def quadratic(x):
        return x * x

    def leaky(x):
        return jnp.where(x > 0, x, 0.01 * x)

    return jax.lax.cond(jnp.sum(x) > threshold, quadratic, leaky, x)


def polynomial(x, coefficients):
    """A `fori_loop` (Horner's rule) and a `switch` on the degree."""

    def horner(i, total):
        return total * x + coefficients[i]

    value = jax.lax.fori_loop(0, coefficients.shape[0], horner, jnp.zeros_like(x))
    index = jnp.clip(jnp.argmax(jnp.abs(coefficients)), 0, 2)
    return jax.lax.switch(index, [jnp.sin, jnp.cos, jnp.tanh], value)


def decaying_sums(x, steps):
    """Scans backwards with unrolling, over no xs, and a `fori_loop` whose bound is traced."""

    def accumulate(total, row):
        return total * 0.9 + row, jnp.sum(total)

    total, partials = jax.lax.scan(accumulate, x[0], x, reverse=True, unroll=2)

    def double(pair, _):
        a, b = pair
        return (a + 1.0, b * 2.0), a

    (a, b), history = jax.lax.scan(double, (total, total), None, length=3)

    def shift(i, v):
        return v + i

    return partials, history, jax.lax.fori_loop(0, steps, shift, a + b)


# jax_sourceror's README example: a scanned, checkpointed block attention and its gradient.
block_len = 64
seq_len = 128
batch = 4
num_heads = 2
embed_size = 32
num_layers = 2
head_size = 16


def pseudo_sliding_window_attention(x):
    """Not attention, but minimized from it: dims are [batch, len, num_heads, head_dim]."""

    def block(block_idx):
        query_block = jax.lax.dynamic_slice_in_dim(x, block_idx, block_len, axis=1)
        weights = jnp.sum(query_block, axis=3)
        weights = jax.lax.broadcast_in_dim(weights, (batch, block_len, num_heads, block_len), (0, 1, 2))
        bias = jnp.ones(block_len)
        bias = jnp.broadcast_to(bias, (batch, block_len, num_heads, block_len))
        weights = weights + bias
        return jnp.einsum("bqhk,bkhd->bqhd", weights, query_block).astype(query_block.dtype)

    num_blocks = seq_len // block_len
    blocked_attn = jax.lax.map(block, jnp.arange(0, num_blocks))
    blocked_attn = jnp.concatenate(blocked_attn, axis=1)
    return blocked_attn


def fwd(params, x):
    @partial(jax.checkpoint, prevent_cse=False)
    def layer(x, params):
        qkv, o = params
        y = jnp.einsum("bte,hde->bthd", x, qkv)
        y = pseudo_sliding_window_attention(y)
        z = jnp.einsum("bthd,hde->bte", y, o)
        return z, None

    x, _ = jax.lax.scan(layer, x, params)
    return x


def loss_fn(params, x):
    x = fwd(params, x)
    loss = jnp.mean(x)
    return loss


def grad_fn(params, x):
    loss, grad = jax.value_and_grad(loss_fn)(params, x)
    return loss, *jax.tree_util.tree_leaves(grad)


def sourceror_inputs(dtype=jnp.bfloat16):
    qkv = jnp.ones((num_layers, num_heads, head_size, embed_size), dtype=dtype)
    o = jnp.ones((num_layers, num_heads, head_size, embed_size), dtype=dtype)
    x = jnp.ones((batch, seq_len, embed_size), dtype=dtype)
    return (qkv, o), x


def example():
    params, x, y = mlp_data()
    return jax.grad(mlp_loss), (params, x, y)
