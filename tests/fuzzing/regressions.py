"""Fuzzed programs kept as explicit tests: shrunk failures, each with what went wrong.

`REGRESSIONS` must round-trip (`fuzzing.roundtrip`); `TORCHAX_ISSUES` are programs where
torchax itself fails or departs from torch eager, kept so that we notice when that changes.
"""

from __future__ import annotations

import torch

from fuzzing.programs import InputSpec, Program

F32, BF16, I64, BOOL = torch.float32, torch.bfloat16, torch.int64, torch.bool


def program(inputs: list[tuple[tuple[int, ...], torch.dtype]], *lines: str, seed: int = 0) -> Program:
    """A program over `inputs` (`v0`, `v1`, ...) returning its last line's value."""
    last = lines[-1].split(" = ")[0]
    return Program([InputSpec(shape, dtype) for shape, dtype in inputs], list(lines), [last], seed)


REGRESSIONS: dict[str, Program] = {
    # One index tensor used twice became two constants in the re-trace: closed-over arrays are
    # lifted once per use, so the harness passes the jaxpr's constants as parameters.
    "constant_used_twice": program(
        [((3,), F32)],
        "v1 = v0.index_put((torch.tensor([0, 0, 2]),), v0[torch.tensor([0, 0, 2])] * 0.5)",
    ),
    # torchax's int64 is int32 in JAX: compared by value, not by dtype name.
    "int64_output": program([((4,), F32)], "v1 = v0.long()", "v2 = v1.sum(0)"),
    # top_k of a weakly typed operand gives weak indices; concatenating them with strong ones
    # must stay lax.concatenate (jnp.concatenate inserts a convert_element_type).
    "weak_indices_concatenated": program([((3, 5), F32)], "v1 = torch.kthvalue(v0, 2, -1).values"),
    # Slices that carry strides=(1, 1) are lax.slice, not `x[a:b]` (which binds strides=None).
    "roll_slices": program([((3, 4), F32)], "v1 = torch.roll(v0, 1, 0)", "v2 = torch.roll(v1, -2, 1)"),
    # A size-1 axis inserted in the middle: `x[:, :, None]`, once `x[..., None]`.
    "pool1d_new_axis": program([((1, 2, 7), F32)], "v1 = F.avg_pool1d(v0, 3, 2)"),
    # The window identity must be concrete or lax.reduce_window binds the generic primitive.
    "pool2d_identity": program([((1, 2, 6, 6), F32)], "v1 = F.max_pool2d(v0, 2)", "v2 = F.avg_pool2d(v1, 2)"),
    # bfloat16 math with a float32 result is held to bfloat16's tolerance.
    "bf16_matmul_then_float": program(
        [((2, 3, 4), BF16)], "v1 = v0 @ v0.transpose(-1, -2)", "v2 = torch.sin(v1)", "v3 = v2.float()"
    ),
    # Literals on the left of a comparison and of a subtraction keep their order.
    "literal_on_the_left": program([((3, 4), F32)], "v1 = 3.0 - v0", "v2 = torch.where(0.5 < v1, v1, -v1)"),
    # A causal mask: -inf through masked_fill and softmax.
    "causal_softmax": program(
        [((3, 3), F32)],
        "v1 = torch.softmax(v0.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), float('-inf')), -1)",
    ),
    # Found by the fuzzer: bool + bool is a weakly typed int32 in torchax; `.all()` compares it
    # with a strong `0:i32[]`.  `x != jnp.int32(0)` made jnp convert x to strong first.
    "weak_int_against_strong_literal": program(
        [((1, 1, 1, 1), F32)], "v1 = v0 >= 0.5", "v2 = torch.zeros_like(v1) + v1", "v3 = v2.all(0)"
    ),
    # torch.clamp(x, max=m) is jnp.clip(x, max=m), not jnp.clip(x, m).
    "clamp_max_only": program(
        [((3, 4), F32)], "v1 = torch.clamp(v0, max=0.5)", "v2 = torch.clamp(v1, min=-0.5)"
    ),
    # Idioms (`render.rules.idioms`): each run of equations written as the one jnp expression that
    # stages it, re-traced to the same equations (in dataflow order) and the same bits.
    "idiom_indexing": program(
        [((6, 4), F32)],
        "v1 = v0[torch.tensor([0, -1, 2])]",
        "v2 = v0[:, torch.tensor([1, -3])]",
        "v3 = v1[:, 2] + v2[1:4, 0]",
    ),
    "idiom_index_put": program(
        [((6, 4), F32)],
        "v1 = v0.index_put((torch.tensor([1, -2]),), v0[:2] * 2.0)",
        "v2 = v1.index_put((torch.tensor([0, 0]),), v1[:2], accumulate=True)",
    ),
    "idiom_mean_softmax_repeat": program(
        [((2, 3, 5), F32)],
        "v1 = v0 - v0.mean(-1, keepdim=True)",
        "v2 = torch.softmax(v1, -1)",
        "v3 = v2.repeat_interleave(2, dim=1)",
    ),
    "idiom_einsum": program(
        [((2, 4, 3, 5), F32), ((2, 6, 3, 5), F32), ((4, 3), BF16), ((4, 3, 5), BF16)],
        "v4 = torch.einsum('bqhd,bkhd->bhqk', v0, v1)",
        "v5 = torch.einsum('bhqk,bkhd->bqhd', v4, v1)",
        "v6 = torch.einsum('ijkl,ijkl->jl', v5, v0)",
        "v7 = torch.einsum('te,ted->dt', v2, v3)",
        "v8 = v6.sum() + v7.float().sum()",
    ),
    "idiom_rank_promotion_and_stack": program(
        [((2, 3, 4, 8), F32), ((3, 4, 2), F32), ((8,), F32)],
        "v3 = v0.reshape(2, 3, 4, 4, 2)",
        "v4 = v1[:, None, :, 0]",
        "v5 = torch.stack([v3[..., 0] * v4 - v3[..., 1], torch.maximum(v3[..., 1], v4)], dim=-1)",
        "v6 = v5.flatten(-2) / v2 + (v2 > 0)",
    ),
    "idiom_split_and_unit_axes": program(
        [((2, 3, 8), F32), ((3,), F32), ((3,), F32)],
        "v3, v4, v5 = v0.split([4, 2, 2], dim=-1)",
        "v6, v7 = torch.chunk(v3, 2, dim=0)",
        "v8 = F.batch_norm(v4[..., None], v1, v2.abs() + 0.5, v1, v2, training=False)",
        "v9, v10, v11 = v5.unbind(1)",
        "v12 = v6 * v7 + v8.sum() + (v9 * v10 - v11).mean()",
    ),
    # torch.unbind's parts broadcast to a new axis: the pattern for `x[:, None]` over a squeeze
    # read `jnp.unstack`'s candidate (a rewrite, five fields) as a plain pair and crashed.
    "idiom_unbind_parts_new_axes": program(
        [((2, 3, 4), F32)],
        "v1, v2, v3 = v0.unbind(1)",
        "v4 = v1[:, None] * v2[:, None] + v3[:, None]",
    ),
    # HF's repeat_kv and repeat_interleave (two broadcasts and a reshape: `jnp.repeat`), torch's
    # decomposition of tril (`jnp.tril`), a causal mask among them; rewrites, held to the bits.
    "idiom_repeat_and_tril": program(
        [((2, 2, 5, 4), F32), ((3, 4, 6), F32), ((3, 4, 6), BOOL)],
        "v3 = v0[:, :, None, :, :].expand(2, 2, 3, 5, 4).reshape(2, 6, 5, 4)",
        "v4 = torch.repeat_interleave(v0, 3, dim=1)",
        "v5 = v1.tril(1) - v1.tril(-2) + v1.triu(-1) + v2.tril()",
        "v6 = torch.ones(5, 5, dtype=torch.bool).tril()",
        "v7 = (v3 @ v4.mT).masked_fill(~v6, 0.0).sum() + v5.sum()",
    ),
    # Index lists (nanoGPT's `x[:, [-1], :]`), read and written: torch makes a tensor of each list,
    # which the export writes back as the list where it is used (no module constant fixing a size).
    "idiom_index_lists": program(
        [((2, 5, 4), F32), ((2, 5, 4), F32)],
        "v2 = v0[:, [-1], :] + v0[:, [0, 3]].sum(1, keepdim=True)",
        "v3 = v1.clone()",
        "v3[:, [1, -2]] = v2 * 2.0",
        "v4 = v3 + v0[[1, 0]]",
    ),
    # Writes at integers and slices (torch's `x[:, 0] = 0.0`, `x[:, 1:3] = v`, `x[..., ::2, -1] += v`):
    # the constant start indices and the scatter jnp's `.at[...]` stages, written `x.at[:, 0].set(0.0)`.
    "idiom_basic_updates": program(
        [((3, 4, 5), F32), ((3, 4, 5), F32)],
        "v2 = v0.clone()",
        "v2[:, 0] = 0.0",
        "v2[1, 1:3] = v1[0, :2] * 2.0",
        "v2[..., ::2, -1] += 1.0",
        "v2[-1, :, 1:4:2] = v1[0, :, :2]",
        "v2[:, 2:] = v2[:, :2] - 1.0",
        "v3 = v2.clone()",
        "v3[torch.tensor([2, 0])] = v1[:2]",
        "v3[v1 > 0.5] = -1.0",
        "v4 = v3 + v2",
    ),
    # Integer and boolean chains, exact.
    "int_and_bool_chain": program(
        [((3, 4), I64), ((3, 4), BOOL)],
        "v2 = torch.div(v0, v0.abs() + 1, rounding_mode='floor')",
        "v3 = torch.where(v1, v2, v0 % 3)",
        "v4 = (v3 << 1) ^ v0",
    ),
}


TORCHAX_ISSUES: dict[str, Program] = {
    # Tensor.type_as converts the tensor it is called on, in place.
    "type_as_in_place": program([((3,), F32), ((3,), I64)], "v2 = v1.type_as(v0)", "v3 = v1 * 1"),
    # A 0-d float32 tensor times a bfloat16 tensor: torch keeps bfloat16, torchax promotes.
    "zero_dim_promotion": program([((), F32), ((4,), BF16)], "v2 = v0 * v1"),
    # Negative floats to uint8 wrap in torch (-1 -> 255) and clamp to 0 in XLA.
    "negative_to_uint8": program([((4,), F32)], "v1 = (v0 - 2.0).to(torch.uint8)"),
    # bool + bool is bool in torch (logical or), a weakly typed int32 in torchax.
    "bool_plus_bool": program([((3,), F32)], "v1 = v0 > 0", "v2 = torch.zeros_like(v1) + v1"),
    # Indexing a view (`v0[0]`) with a tensor fails inside torchax.
    "index_a_view_with_a_tensor": program([((2, 3), F32)], "v1 = v0[0]", "v2 = v1[torch.tensor([0])]"),
}
