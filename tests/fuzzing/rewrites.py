"""Proofs of `render.rules.REWRITES`: each rewrite computes the same bits as the equation it
renders, under `jax.jit`, with -0.0, NaN, +-inf and denormals among the inputs.

`PROOFS` holds, per rewrite, JAX functions whose one equation a rule renders with that rewrite,
and the operand types to try.  `prove(name)` renders each (`fuzzing.harness.render_function`),
checks that the rewrite was taken, and compares the jitted original with the jitted rendering
bit for bit on several random draws of special-laden inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fuzzing.harness import program_difference, render_function

Proof = tuple[Callable[..., Any], tuple[jax.ShapeDtypeStruct, ...]]

SEEDS = range(6)
SPECIALS = (0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 1e-310, -1e-45, 5e-324, 1.0, -1.0, 3.4e38)


def _s(shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _dot(dims: Any, preferred: Any = jnp.float32) -> Callable[..., Any]:
    return lambda a, b: lax.dot_general(a, b, dims, preferred_element_type=preferred)


def _split(data: Any, n: int = 2) -> Any:
    """`jax.random.split` of the key whose data is `data` (a uint32 array the fuzzer can draw)."""
    return jax.random.split(jax.random.wrap_key_data(data), n)


def _decomposed(side: str, k: int, shared: bool = False) -> Callable[[Any], Any]:
    """torch's decomposition of `x.tril(k)` (`x.triu(k)`), as torchax stages it (`a - b * alpha`);
    `shared`: one `arange` for a square mask, as after `render.lower`'s common subexpressions."""

    def fn(x: Any) -> Any:
        rows, cols = x.shape[-2:]
        i = jnp.arange(rows, dtype=jnp.int32)
        j = i if shared else jnp.arange(cols, dtype=jnp.int32)
        difference = j[None, :] - i[:, None] * 1
        mask = difference <= k if side == "tril" else difference >= k
        return jnp.logical_and(mask, x) if x.dtype == jnp.bool_ else jnp.where(mask, x, 0)

    return fn


PROOFS: dict[str, list[Proof]] = {
    "matmul_transposed": [
        (_dot((((1,), (1,)), ((), ()))), (_s((8, 16)), _s((12, 16)))),  # F.linear: x @ w.T
        (_dot((((2,), (1,)), ((), ()))), (_s((2, 8, 16)), _s((12, 16)))),  # a batch of rows
        (_dot((((0,), (0,)), ((), ()))), (_s((16, 8)), _s((16, 12)))),  # a weight gradient: g.T @ x
        (_dot((((3,), (3,)), ((0, 1), (0, 1)))), (_s((2, 3, 8, 16)), _s((2, 3, 10, 16)))),  # q @ k.mT
        (
            _dot((((1,), (1,)), ((), ())), jnp.bfloat16),
            (_s((8, 16), jnp.bfloat16), _s((12, 16), jnp.bfloat16)),
        ),
    ],
    "matmul_unflattened": [
        (lambda a, b: jnp.reshape(jnp.reshape(a, (6, 8, 16)) @ jnp.reshape(b, (6, 16, 10)), (2, 3, 8, 10)),
         (_s((2, 3, 8, 16)), _s((2, 3, 16, 10)))),
        (lambda a, b: jnp.reshape(jnp.reshape(a, (4, 5, 7)) @ jnp.reshape(b, (4, 7, 3)), (1, 4, 5, 3)),
         (_s((1, 4, 5, 7)), _s((1, 4, 7, 3)))),
    ],
    "repeat_broadcasts": [  # HF's repeat_kv: a new axis of size one, expanded, merged
        (lambda k: jnp.reshape(jnp.broadcast_to(k[:, :, None], (2, 2, 3, 5, 16)), (2, 6, 5, 16)),
         (_s((2, 2, 5, 16)),)),
        (lambda k: jnp.reshape(jnp.broadcast_to(k[:, None], (3, 4, 5)), (12, 5)),
         (_s((3, 5), jnp.bfloat16),)),
        (lambda k: jnp.reshape(jnp.broadcast_to(k[..., None], (2, 3, 2)), (2, 6)), (_s((2, 3), jnp.int32),)),
        (lambda k: jnp.reshape(jnp.broadcast_to(k[:, :, None], (1, 1, 2, 4, 8)), (1, 2, 4, 8)),
         (_s((1, 1, 4, 8)),)),  # axes of size one: the batch and the one KV head
    ],
    "times_one": [
        (lambda x: lax.mul(x, 1.0), (_s((4, 8)),)),
        (lambda x: lax.mul(1.0, x), (_s((4, 8)),)),
        (lambda x: lax.mul(x, jnp.bfloat16(1)), (_s((4, 8), jnp.bfloat16),)),
        (lambda x: lax.mul(x, jnp.float16(1)), (_s((4, 8), jnp.float16),)),
        (lambda x: lax.mul(x, 1), (_s((4, 8), jnp.int32),)),
        (lambda x: lax.mul(x, jnp.uint8(1)), (_s((4, 8), jnp.uint8),)),
    ],
    "times_minus_one": [
        (lambda x: lax.mul(x, -1.0), (_s((4, 8)),)),
        (lambda x: lax.mul(-1.0, x), (_s((4, 8)),)),
        (lambda x: lax.mul(x, jnp.bfloat16(-1)), (_s((4, 8), jnp.bfloat16),)),
        (lambda x: lax.mul(x, jnp.float16(-1)), (_s((4, 8), jnp.float16),)),
        (lambda x: lax.mul(x, -1), (_s((4, 8), jnp.int32),)),
        (lambda x: lax.mul(jnp.int8(-1), x), (_s((4, 8), jnp.int8),)),
    ],
    "copy_is_value": [  # torchax's `x.to(copy=True)`, `jnp.array(x)` inside a library function
        (jnp.copy, (_s((4, 8)),)),
        (jnp.copy, (_s((4, 8), jnp.bfloat16),)),
        (jnp.copy, (_s((3,), jnp.int32),)),
        (jnp.copy, (_s((2, 3), jnp.bool_),)),
        (lambda x: jnp.copy(x * 2.0) + x, (_s((4, 8)),)),  # read again after the copy
        (lambda x: jnp.copy(x).at[0].set(0.0), (_s((4, 8)),)),  # updated after the copy: a new value
        (lambda x: (jnp.copy(x), x), (_s((4, 8)),)),  # the copy and its operand both returned
    ],
    "plus_zero": [
        (lambda x: lax.add(x, 0), (_s((4, 8), jnp.int32),)),
        (lambda x: lax.add(0, x), (_s((4, 8), jnp.int32),)),
        (lambda x: lax.add(x, jnp.uint8(0)), (_s((4, 8), jnp.uint8),)),
        (lambda x: lax.add(x, -0.0), (_s((4, 8)),)),
        (lambda x: lax.add(x, jnp.bfloat16(-0.0)), (_s((4, 8), jnp.bfloat16),)),
    ],
    "logical_identity": [
        (lambda x: lax.bitwise_and(x, True), (_s((4, 8), jnp.bool_),)),
        (lambda x: lax.bitwise_and(True, x), (_s((4, 8), jnp.bool_),)),
        (lambda x: lax.bitwise_or(x, False), (_s((4, 8), jnp.bool_),)),
        (lambda x: True & (x > 0), (_s((4, 8)),)),
    ],
    "split_slices": [  # torchax's split: one slice per part (`x[make_range(...)]`)
        (lambda x: (x[:, :, :64], x[:, :, 64:96], x[:, :, 96:]), (_s((2, 8, 128)),)),
        (lambda x: (x[:4], x[4:8], x[8:]), (_s((12, 3)),)),  # torch.chunk: equal parts
        (lambda x: (x[:, :3], x[:, 3:]), (_s((4, 5), jnp.bfloat16),)),
        (lambda x: (x[..., :1], x[..., 1:]), (_s((3, 2, 2), jnp.int32),)),
    ],
    "unstack_parts": [  # torch.unbind: a split into parts of one, each squeezed
        (lambda x: tuple(jnp.squeeze(p, axis=1) for p in jnp.split(x, 3, axis=1)), (_s((4, 3, 5)),)),
        (lambda x: tuple(jnp.squeeze(p, axis=0) for p in jnp.split(x, 2, axis=0)),
         (_s((2, 9), jnp.int32),)),
        (lambda x: tuple(jnp.squeeze(p, axis=2) for p in jnp.split(x, 4, axis=2)), (_s((3, 5, 4)),)),
    ],
    "keys_unpacked": [  # torchax's turn of its key before a draw: split, each part sliced and squeezed
        (lambda k: tuple(jax.random.key_data(p) for p in tuple(_split(k))), (_s((2,), jnp.uint32),)),
        (lambda k: tuple(jax.random.key_data(p) for p in tuple(_split(k, 3))), (_s((2,), jnp.uint32),)),
        (lambda k: jax.random.key_data(tuple(_split(k))[1]), (_s((2,), jnp.uint32),)),  # one part used
    ],
    "triangular_mask": [  # torch's decomposition of tril and triu
        (_decomposed("tril", 0), (_s((4, 6)),)),
        (_decomposed("tril", 1), (_s((2, 5, 3), jnp.bfloat16),)),
        (_decomposed("triu", -1), (_s((3, 4, 6)),)),
        (_decomposed("tril", -2, shared=True), (_s((5, 5), jnp.int32),)),
        (_decomposed("tril", 0, shared=True), (_s((2, 5, 5), jnp.bool_),)),  # a causal mask
        (_decomposed("triu", 1), (_s((4, 3), jnp.bool_),)),
        (_decomposed("tril", 9), (_s((4, 6)),)),  # beyond the corners: all kept
        (_decomposed("triu", -9), (_s((4, 6), jnp.float16),)),
        (_decomposed("tril", -9), (_s((4, 6)),)),  # none kept
    ],
    "unit_axes": [
        (lambda v: jnp.reshape(v, (1, 16, 1, 1)), (_s((16,)),)),  # BatchNorm's statistics
        (lambda x, v: x - jnp.reshape(v, (1, 16, 1, 1)), (_s((2, 16, 3, 3)), _s((16,)))),
        (lambda x, v: jnp.reshape(v, (1, 4, 1)) * x, (_s((2, 4, 5), jnp.bfloat16), _s((4,), jnp.bfloat16))),
        (lambda x, v: x + jnp.reshape(v, (1, 1, 1)), (_s((2, 3, 5)), _s(()))),  # a scalar
        (lambda v: jnp.reshape(v, (3, 1, 5)), (_s((3, 5), jnp.int32),)),
    ],
}


def special_inputs(struct: jax.ShapeDtypeStruct, seed: int) -> Any:
    """Random values of this type; for floats, every special value (denormals of float32 and
    below it included) at least once when there is room, the rest normal numbers of mixed sign."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(struct.dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=struct.shape, endpoint=True, dtype=dtype)
        return jnp.asarray(values)
    flat = (rng.normal(size=int(np.prod(struct.shape))) * 4).astype(np.float64)
    few = min(len(flat), len(SPECIALS))  # (an array smaller than the list: other specials each seed)
    flat[:few] = np.roll(SPECIALS, -seed)[:few]
    rng.shuffle(flat)
    return jnp.asarray(flat.reshape(struct.shape), dtype=dtype)


def prove(name: str) -> int:
    """Check every proof of rewrite `name`; how many programs ran.  Raises AssertionError."""
    ran = 0
    for fn, structs in PROOFS[name]:
        closed = jax.make_jaxpr(fn)(*structs)
        rendered = render_function(closed, "rewritten", consts_as_params=True)
        assert name in rendered.rewrites, f"{name} not taken:\n{rendered.source}"
        for seed in SEEDS:
            inputs = [special_inputs(s, seed * 31 + i) for i, s in enumerate(structs)]
            _, problem = program_difference(closed, rendered.fn, inputs)
            assert problem is None, f"{name}, seed {seed}:\n{rendered.source}\n{problem}"
            ran += 1
    return ran
