"""JAX for samples/llama_model.py: Transformer, exported by jaxside from one traced run
(torchax).

Traced with idx: int32[1,8], input_pos: int32[8]; non-tensor inputs are baked in as
they were then.

Generic sizes, read from the inputs' shapes (any value the torch code accepts):
`idx.shape[0]` (and the same size in 4 state buffers); `idx.shape[1]` =
`input_pos.shape[0]`; `layers.0.attention.kv_cache.k_cache.shape[2]` (and the same
size in 6 more buffers).

Fixed sizes: `layers.0.attention.kv_cache.k_cache.shape[1]` (and the same size in 4
more buffers) = 2: the torch code fails at
layers.0.attention.kv_cache.k_cache.shape[1] = 4 (Incompatible types for
broadcasting: input type=float32[1,2,8,16] and requested type=float32[1,4,8,16]);
`layers.0.attention.kv_cache.k_cache.shape[3]` (and the same size in 3 more buffers)
= 16: the torch code fails at layers.0.attention.kv_cache.k_cache.shape[3] = 32
(Incompatible types for broadcasting: input type=float32[1,2,8,16] and requested
type=float32[1,2,8,32]).

Call it:

    params, state = load_params(model)  # the torch module, or its state_dict
    outputs, new_state = forward(params, state, idx, input_pos)

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` (under `jax.jit`, as a static argument).

`params` nests the torch tensors by their dotted names, numbered children as lists:
`layers.0.feed_forward.w1.weight` is
`params["layers"][0]["feed_forward"]["w1"]["weight"]`.

State: the buffers the torch code writes in place are explicit. `state` holds their
values (`layers.*.attention.kv_cache.k_cache`, `layers.*.attention.kv_cache.v_cache`,
listed in `STATE_BUFFERS`); the new values come back as `new_state`, the same tree.
Nothing is mutated.

`forward` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with
respect to the float leaves of `params`, or pass `allow_int=True`).

Gradients are torch's: the float buffers the torch code only reads (`freqs_cis`) are
read through `lax.stop_gradient`, so `jax.grad` gives them zeros where torch gives no
gradient.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax

STATE_BUFFERS = (
    "layers.*.attention.kv_cache.k_cache",
    "layers.*.attention.kv_cache.v_cache",
)
"""Buffers the torch code writes in place: `state` in, new state out."""


@dataclasses.dataclass(frozen=True)
class Config:
    """The numbers the torch code read from its modules, as the traced model had them
    (`config.eps` for `self.eps`). `config_from(model)` reads them from a torch
    module; `dataclasses.replace(Config(), eps=...)` changes one."""

    eps: float = 1e-05
    split_sizes: tuple = (64, 32, 32)
    n_head: int = 4
    head_dim: int = 16
    n_local_heads: int = 2


def forward(params, state, idx, input_pos, *, config=Config()):
    """`Transformer.forward`, llama_model.py:90."""
    if input_pos.shape[0] != idx.shape[1]:
        raise ValueError("input_pos.shape[0] must equal idx.shape[1]")
    freqs_cis = lax.stop_gradient(params["freqs_cis"])[input_pos]
    mask = params["causal_mask"][None, None, input_pos]
    x = jnp.take(params["tok_embeddings"]["weight"], idx, axis=0)
    new_layer_states = []
    for layer, layer_state in zip(params["layers"], state["layers"]):
        x, new_layer_state = transformer_block_forward(
            layer, layer_state, x, input_pos, freqs_cis, mask, config=config
        )
        new_layer_states.append(new_layer_state)
    norm_x = rms_norm_forward(params["norm"], x, config=config)
    return norm_x @ params["output"]["weight"].T, {"layers": new_layer_states}


def transformer_block_forward(params, state, x, input_pos, freqs_cis, mask, *, config):
    """`TransformerBlock.forward`, llama_model.py:108.

    Shared by 2 calls: `layers.0` ... `layers.1`.
    """
    attention, new_attention_state = attention_forward(
        params["attention"],
        state["attention"],
        rms_norm_forward(params["attention_norm"], x, config=config),
        freqs_cis,
        mask,
        input_pos,
        config=config,
    )
    h = x + attention
    ffn_norm_h = rms_norm_forward(params["ffn_norm"], h, config=config)
    out = h + feed_forward(params["feed_forward"], ffn_norm_h)
    return out, {"attention": new_attention_state}


def rms_norm_forward(params, x, *, config):
    """`RMSNorm.forward`, llama_model.py:169.

    Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
    """
    return rms_norm(x, config=config) * params["weight"]


def rms_norm(x, *, config):
    """`RMSNorm._norm`, llama_model.py:166.

    Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
    """
    return x * lax.rsqrt(jnp.mean(x * x, axis=2, keepdims=True) + config.eps)


def attention_forward(params, state, x, freqs_cis, mask, input_pos, *, config):
    """`Attention.forward`, llama_model.py:127.

    Shared by 2 calls: `layers.0.attention` ... `layers.1.attention`.
    """
    bsz, seqlen, _ = x.shape
    q, k, v = jnp.split(
        x @ params["wqkv"]["weight"].T,
        [config.split_sizes[0], sum(config.split_sizes[:2])],
        axis=2,
    )
    q = jnp.reshape(q, (bsz, seqlen, config.n_head, config.head_dim))
    k = jnp.reshape(k, (bsz, seqlen, config.n_local_heads, config.head_dim))
    v = jnp.reshape(v, (bsz, seqlen, config.n_local_heads, config.head_dim))
    q = apply_rotary_emb(q, freqs_cis)
    k = apply_rotary_emb(k, freqs_cis)
    q = jnp.transpose(q, (0, 2, 1, 3))
    k = jnp.transpose(k, (0, 2, 1, 3))
    v = jnp.transpose(v, (0, 2, 1, 3))
    (k, v), new_kv_cache_state = kv_cache_update(state["kv_cache"], input_pos, k, v)
    groups = config.n_head // config.n_local_heads
    k = jnp.repeat(k, groups, axis=1)
    v = jnp.repeat(v, groups, axis=1)
    softmax = jax.nn.softmax(
        q @ k.mT * q.shape[-1] ** -0.5
        + jnp.where(~mask, -jnp.inf, jnp.zeros((seqlen, mask.shape[3]), jnp.float32)),
        axis=-1,
    )
    y = softmax @ v
    y = jnp.reshape(
        jnp.transpose(y, (0, 2, 1, 3)), (bsz, seqlen, config.n_head * config.head_dim)
    )
    return y @ params["wo"]["weight"].T, {"kv_cache": new_kv_cache_state}


def apply_rotary_emb(x, freqs_cis):
    """`apply_rotary_emb`, llama_model.py:180, for 4 calls."""
    pairs = jnp.reshape(x, (*x.shape[:3], -1, 2))
    x_re = pairs[..., 0]
    x_im = pairs[..., 1]
    cos = freqs_cis[:, None, :, 0]
    sin = freqs_cis[:, None, :, 1]
    rotated = jnp.stack([x_re * cos - x_im * sin, x_im * cos + x_re * sin], axis=4)
    return jnp.reshape(rotated, (*x.shape[:3], -1))


def kv_cache_update(state, input_pos, k_val, v_val):
    """`KVCache.update`, llama_model.py:59.

    Shared by 2 calls: `layers.0.attention.kv_cache` ... `layers.1.attention.kv_cache`.
    """
    k_out = state["k_cache"].at[:, :, input_pos].set(k_val)
    v_out = state["v_cache"].at[:, :, input_pos].set(v_val)
    return (k_out, v_out), {"k_cache": k_out, "v_cache": v_out}


def feed_forward(params, x):
    """`FeedForward.forward`, llama_model.py:156.

    Shared by 2 calls: `layers.0.feed_forward` ... `layers.1.feed_forward`.
    """
    silu = jax.nn.silu(x @ params["w1"]["weight"].T)
    silu_times_w3 = silu * (x @ params["w3"]["weight"].T)
    return silu_times_w3 @ params["w2"]["weight"].T


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
    # Positions are ASCII digits: a child named "²" or "١" is a name, not a list index.
    positions = node and all(k.isascii() and k.isdecimal() for k in node)
    keys = sorted(map(int, node)) if positions else None
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


def config_from(model):
    """The `Config` of a torch module built as the traced one, for
    `forward(..., config=config_from(model))`."""
    return Config(
        eps=model.layers[0].attention_norm.eps,
        split_sizes=tuple(model.layers[0].attention.split_sizes),
        n_head=model.layers[0].attention.n_head,
        head_dim=model.layers[0].attention.head_dim,
        n_local_heads=model.layers[0].attention.n_local_heads,
    )
