"""JAX for samples/llama_model.py: Transformer, exported by jaxside from one traced run
(torchax).

Traced with idx: int32[1,8], input_pos: int32[8]; shapes and non-tensor inputs are
baked in as they were then.

Call it:

    params, state = load_params(model)  # the torch module, or its state_dict
    outputs, new_state = forward(params, state, idx, input_pos)

`params` nests the torch tensors by their dotted names, numbered children as lists:
`layers.0.feed_forward.w1.weight` is
`params["layers"][0]["feed_forward"]["w1"]["weight"]`.

State: the buffers the torch code writes in place are explicit. `state` holds their
values (`layers.*.attention.kv_cache.k_cache`, `layers.*.attention.kv_cache.v_cache`,
listed in `STATE_BUFFERS`); the new values come back as `new_state`, the same tree.
Nothing is mutated.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).
"""

import jax
import jax.numpy as jnp
from jax import lax

STATE_BUFFERS = (
    "layers.*.attention.kv_cache.k_cache",
    "layers.*.attention.kv_cache.v_cache",
)
"""Buffers the torch code writes in place: `state` in, new state out."""


def forward(params, state, idx, input_pos):
    """`Transformer.forward`, llama_model.py:90."""
    freqs_cis_input_pos = lax.select(input_pos < 0, input_pos + 64, input_pos)[:, None]
    freqs_cis = lax.gather(
        params["freqs_cis"],
        freqs_cis_input_pos,
        dimension_numbers=jax.lax.GatherDimensionNumbers(
            offset_dims=(1, 2),
            collapsed_slice_dims=(0,),
            start_index_map=(0,),
            operand_batching_dims=(),
            start_indices_batching_dims=(),
        ),
        slice_sizes=(1, 8, 2),
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )
    mask = lax.gather(
        params["causal_mask"],
        freqs_cis_input_pos,
        dimension_numbers=jax.lax.GatherDimensionNumbers(
            offset_dims=(1,),
            collapsed_slice_dims=(0,),
            start_index_map=(0,),
            operand_batching_dims=(),
            start_indices_batching_dims=(),
        ),
        slice_sizes=(1, 64),
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )[None, None]
    x = jax.jit(_take)(params["tok_embeddings"]["weight"], idx)
    new_layer_states = []
    for layer, layer_state in zip(params["layers"], state["layers"]):
        x, new_layer_state = transformer_block_forward(
            layer, layer_state, x, input_pos, freqs_cis, mask
        )
        new_layer_states.append(new_layer_state)
    return lax.dot_general(
        rms_norm_forward(params["norm"], x),
        params["output"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    ), {"layers": new_layer_states}


def transformer_block_forward(params, state, x, input_pos, freqs_cis, mask):
    """`TransformerBlock.forward`, llama_model.py:108.

    Shared by 2 calls: `layers.0` ... `layers.1`.
    """
    attention, new_attention_state = attention_forward(
        params["attention"],
        state["attention"],
        rms_norm_forward(params["attention_norm"], x),
        freqs_cis,
        mask,
        input_pos,
    )
    h = x + attention * 1.0
    feed_forward = feed_forward_forward(
        params["feed_forward"], rms_norm_forward(params["ffn_norm"], h)
    )
    out = h + feed_forward * 1.0
    return out, {"attention": new_attention_state}


def rms_norm_forward(params, x):
    """`RMSNorm.forward`, llama_model.py:169.

    Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
    """
    return rms_norm_norm(x) * params["weight"][None, None]


def rms_norm_norm(x):
    """`RMSNorm._norm`, llama_model.py:166.

    Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
    """
    return x * lax.rsqrt(jnp.sum(x * x, axis=2)[..., None] / 64.0 + 1e-05)


def attention_forward(params, state, x, freqs_cis, mask, input_pos):
    """`Attention.forward`, llama_model.py:127.

    Shared by 2 calls: `layers.0.attention` ... `layers.1.attention`.
    """
    wqkv_x = lax.dot_general(
        x,
        params["wqkv"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    q = wqkv_x[:, :, :64]
    k = wqkv_x[:, :, 64:96]
    v = wqkv_x[:, :, 96:]
    q_1 = jnp.reshape(q, (1, 8, 4, 16))
    k_1 = jnp.reshape(k, (1, 8, 2, 16))
    v_1 = jnp.reshape(v, (1, 8, 2, 16))
    q_2 = apply_rotary_emb(q_1, freqs_cis)
    k_2 = apply_rotary_emb(k_1, freqs_cis)
    q_3 = jnp.transpose(q_2, (0, 2, 1, 3))
    k_3 = jnp.transpose(k_2, (0, 2, 1, 3))
    v_2 = jnp.transpose(v_1, (0, 2, 1, 3))
    (k_4, v_3), new_kv_cache_state = kv_cache_update(
        state["kv_cache"], input_pos, k_3, v_2
    )
    k_5 = jnp.reshape(
        lax.broadcast_in_dim(k_4, (1, 2, 2, 64, 16), (0, 1, 3, 4)), (1, 4, 64, 16)
    )
    v_4 = jnp.reshape(
        lax.broadcast_in_dim(v_3, (1, 2, 2, 64, 16), (0, 1, 3, 4)), (1, 4, 64, 16)
    )
    sdpa = (
        jnp.reshape(
            jnp.reshape(q_3, (4, 8, 16))
            @ jnp.reshape(jnp.transpose(k_5, (0, 1, 3, 2)), (4, 16, 64)),
            (1, 4, 8, 64),
        )
        * 0.25
        + jnp.where(~mask, -jnp.inf, jnp.zeros((8, 64), jnp.float32)) * 1.0
    )
    sdpa_1 = jnp.exp(
        sdpa
        - lax.stop_gradient(jnp.maximum(-jnp.inf, jnp.max(sdpa, axis=3))[..., None])
    )
    y = jnp.reshape(
        jnp.reshape(sdpa_1 / jnp.sum(sdpa_1, axis=3)[..., None], (4, 8, 64))
        @ jnp.reshape(v_4, (4, 64, 16)),
        (1, 4, 8, 16),
    )
    y_1 = jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (1, 8, 64))
    return lax.dot_general(
        y_1,
        params["wo"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    ), {"kv_cache": new_kv_cache_state}


def apply_rotary_emb(x, freqs_cis):
    """`apply_rotary_emb`, llama_model.py:180, for 4 calls."""
    pairs = jnp.reshape(x, (1, 8, x.shape[2], 8, 2))
    x_re = jnp.squeeze(pairs[:, :, :, :, :1], axis=4)
    x_im = jnp.squeeze(pairs[:, :, :, :, 1:], axis=4)
    cos = jnp.squeeze(freqs_cis[:, :, :1], axis=2)[:, None]
    sin = jnp.squeeze(freqs_cis[:, :, 1:], axis=2)[:, None]
    cos_1 = cos[None]
    sin_1 = sin[None]
    rotated = lax.stack(
        [x_re * cos_1 - x_im * sin_1 * 1.0, x_im * cos_1 + x_re * sin_1 * 1.0], axis=4
    )
    return jnp.reshape(rotated, (1, 8, x.shape[2], 16))


def kv_cache_update(state, input_pos, k_val, v_val):
    """`KVCache.update`, llama_model.py:59.

    Shared by 2 calls: `layers.0.attention.kv_cache` ... `layers.1.attention.kv_cache`.
    """
    k_out_input_pos = lax.select(input_pos < 0, input_pos + 64, input_pos)[:, None]
    k_out = lax.scatter(
        state["k_cache"],
        k_out_input_pos,
        k_val,
        jax.lax.ScatterDimensionNumbers(
            update_window_dims=(0, 1, 3),
            inserted_window_dims=(2,),
            scatter_dims_to_operand_dims=(2,),
            operand_batching_dims=(),
            scatter_indices_batching_dims=(),
        ),
        mode=jax.lax.GatherScatterMode.FILL_OR_DROP,
    )
    v_out = lax.scatter(
        state["v_cache"],
        k_out_input_pos,
        v_val,
        jax.lax.ScatterDimensionNumbers(
            update_window_dims=(0, 1, 3),
            inserted_window_dims=(2,),
            scatter_dims_to_operand_dims=(2,),
            operand_batching_dims=(),
            scatter_indices_batching_dims=(),
        ),
        mode=jax.lax.GatherScatterMode.FILL_OR_DROP,
    )
    return (k_out, v_out), {"k_cache": k_out, "v_cache": v_out}


def feed_forward_forward(params, x):
    """`FeedForward.forward`, llama_model.py:156.

    Shared by 2 calls: `layers.0.feed_forward` ... `layers.1.feed_forward`.
    """
    w1_x = lax.dot_general(
        x,
        params["w1"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    w3_x = lax.dot_general(
        x,
        params["w3"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    )
    return lax.dot_general(
        jax.nn.silu(w1_x) * w3_x,
        params["w2"]["weight"],
        (((2,), (1,)), ((), ())),
        preferred_element_type=jnp.float32,
    )


def _take(x, y):
    return lax.gather(
        x,
        jnp.where(y < 0, y + 256, y)[..., None],
        dimension_numbers=jax.lax.GatherDimensionNumbers(
            offset_dims=(2,),
            collapsed_slice_dims=(0,),
            start_index_map=(0,),
            operand_batching_dims=(),
            start_indices_batching_dims=(),
        ),
        slice_sizes=(1, 64),
        mode=jax.lax.GatherScatterMode.FILL_OR_DROP,
        fill_value=jnp.nan,
    )


def load_params(model):
    """`params, state` for `forward` from the torch module (or its `state_dict`).

    torch is imported here only. Every tensor becomes a `jnp` array of the dtype JAX
    traced (int64 -> int32 unless x64 is enabled); pass the module to include
    non-persistent buffers.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    path = f"{prefix}.{name}" if prefix else name
                    tensors.setdefault(path, value)
    else:
        tensors = dict(model)
    params, state = {}, {}
    for path, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            value = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
        else:
            value = jnp.asarray(tensor.numpy())
        node = state if _is_state(path) else params
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return _lists(params), _lists(state)


def _lists(node):
    """Dicts keyed 0..n-1 (a ModuleList) as lists, as in `params["layers"][3]`."""
    if not isinstance(node, dict):
        return node
    keys = sorted(map(int, node)) if node and all(k.isdigit() for k in node) else None
    if keys == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}


def _is_state(path):
    parts = path.split(".")
    for pattern in STATE_BUFFERS:
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(
            k in ("*", p) for k, p in zip(keys, parts, strict=True)
        ):
            return True
    return False
