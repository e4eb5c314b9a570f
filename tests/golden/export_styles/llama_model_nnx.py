"""Flax NNX for samples/llama_model.py: Transformer, exported by jaxside from one traced
run (torchax).

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

    model = from_torch(torch_model)  # the torch module, or its state_dict
    outputs = model(idx, input_pos)  # updates the model's nnx.Cache variables

One class per torch class, attributes named as in torch. `from_torch` is the one
place tensors change layout (`nnx.Linear` kernels are torch's weights transposed);
the other tensors keep torch's.

Config: the numbers the torch code read from its modules are the fields of `Config`,
the traced model's by default; for another model built the same way, pass
`config=config_from(model)` to `from_torch`.

Gradients are torch's: the buffers the torch code only reads are `nnx.Variable`s,
which `nnx.grad` does not differentiate (it takes `nnx.Param`s).
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax


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


class Transformer(nnx.Module):
    """`Transformer`: the traced torch module."""

    def __init__(self, tok_embeddings, layers, norm, output, freqs_cis, causal_mask):
        self.tok_embeddings = tok_embeddings
        self.layers = nnx.List(layers)
        self.norm = norm
        self.output = output
        self.freqs_cis = nnx.Variable(freqs_cis)
        self.causal_mask = nnx.Variable(causal_mask)

    def __call__(self, idx, input_pos):
        """`Transformer.forward`, llama_model.py:90."""
        if input_pos.shape[0] != idx.shape[1]:
            raise ValueError("input_pos.shape[0] must equal idx.shape[1]")
        freqs_cis = self.freqs_cis[input_pos]
        mask = self.causal_mask[None, None, input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, input_pos, freqs_cis, mask)
        return self.output(self.norm(x))


class TransformerBlock(nnx.Module):
    """`TransformerBlock`: the torch module at `layers.0` and 1 more."""

    def __init__(self, attention, feed_forward, attention_norm, ffn_norm):
        self.attention = attention
        self.feed_forward = feed_forward
        self.attention_norm = attention_norm
        self.ffn_norm = ffn_norm

    def __call__(self, x, input_pos, freqs_cis, mask):
        """`TransformerBlock.forward`, llama_model.py:108.

        Shared by 2 calls: `layers.0` ... `layers.1`.
        """
        attention = self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        h = x + attention
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class RMSNorm(nnx.Module):
    """`RMSNorm`: the torch module at `norm` and 4 more."""

    def __init__(self, weight, *, config):
        self.weight = nnx.Param(weight)
        self.config = config

    def __call__(self, x):
        """`RMSNorm.forward`, llama_model.py:169.

        Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
        """
        return self._norm(x) * self.weight[...]

    def _norm(self, x):
        """`RMSNorm._norm`, llama_model.py:166.

        Shared by 5 calls: `layers.0.attention_norm` ... `norm`.
        """
        return x * lax.rsqrt(jnp.mean(x * x, axis=2, keepdims=True) + self.config.eps)


class Attention(nnx.Module):
    """`Attention`: the torch module at `layers.0.attention` and 1 more."""

    def __init__(self, wqkv, wo, kv_cache, *, config):
        self.wqkv = wqkv
        self.wo = wo
        self.kv_cache = kv_cache
        self.config = config

    def __call__(self, x, freqs_cis, mask, input_pos):
        """`Attention.forward`, llama_model.py:127.

        Shared by 2 calls: `layers.0.attention` ... `layers.1.attention`.
        """
        bsz, seqlen, _ = x.shape
        q, k, v = jnp.split(
            self.wqkv(x),
            [self.config.split_sizes[0], sum(self.config.split_sizes[:2])],
            axis=2,
        )
        q = jnp.reshape(q, (bsz, seqlen, self.config.n_head, self.config.head_dim))
        k = jnp.reshape(
            k, (bsz, seqlen, self.config.n_local_heads, self.config.head_dim)
        )
        v = jnp.reshape(
            v, (bsz, seqlen, self.config.n_local_heads, self.config.head_dim)
        )
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        q = jnp.transpose(q, (0, 2, 1, 3))
        k = jnp.transpose(k, (0, 2, 1, 3))
        v = jnp.transpose(v, (0, 2, 1, 3))
        k, v = self.kv_cache.update(input_pos, k, v)
        groups = self.config.n_head // self.config.n_local_heads
        k = jnp.repeat(k, groups, axis=1)
        v = jnp.repeat(v, groups, axis=1)
        softmax = jax.nn.softmax(
            q @ k.mT * q.shape[-1] ** -0.5
            + jnp.where(
                ~mask, -jnp.inf, jnp.zeros((seqlen, mask.shape[3]), jnp.float32)
            ),
            axis=-1,
        )
        y = softmax @ v
        y = jnp.reshape(
            jnp.transpose(y, (0, 2, 1, 3)),
            (bsz, seqlen, self.config.n_head * self.config.head_dim),
        )
        return self.wo(y)


class KVCache(nnx.Module):
    """`KVCache`: the torch module at `layers.0.attention.kv_cache` and 1 more."""

    def __init__(self, k_cache, v_cache):
        self.k_cache = nnx.Cache(k_cache)
        self.v_cache = nnx.Cache(v_cache)

    def update(self, input_pos, k_val, v_val):
        """`KVCache.update`, llama_model.py:59.

        Shared by 2 calls: `layers.0.attention.kv_cache` ... `layers.1.attention.kv_cache`.
        """
        k_out = self.k_cache[...].at[:, :, input_pos].set(k_val)
        v_out = self.v_cache[...].at[:, :, input_pos].set(v_val)
        self.k_cache[...] = k_out
        self.v_cache[...] = v_out
        return k_out, v_out


class FeedForward(nnx.Module):
    """`FeedForward`: the torch module at `layers.0.feed_forward` and 1 more."""

    def __init__(self, w1, w3, w2):
        self.w1 = w1
        self.w3 = w3
        self.w2 = w2

    def __call__(self, x):
        """`FeedForward.forward`, llama_model.py:156.

        Shared by 2 calls: `layers.0.feed_forward` ... `layers.1.feed_forward`.
        """
        silu_times_w3 = jax.nn.silu(self.w1(x)) * self.w3(x)
        return self.w2(silu_times_w3)


def apply_rotary_emb(x, freqs_cis):
    """`apply_rotary_emb`, llama_model.py:180, for 4 calls."""
    pairs = jnp.reshape(x, (*x.shape[:3], -1, 2))
    x_re = pairs[..., 0]
    x_im = pairs[..., 1]
    cos = freqs_cis[:, None, :, 0]
    sin = freqs_cis[:, None, :, 1]
    rotated = jnp.stack([x_re * cos - x_im * sin, x_im * cos + x_re * sin], axis=4)
    return jnp.reshape(rotated, (*x.shape[:3], -1))


def _tensors(model):
    """Every tensor of a torch module (parameters, buffers, tensor attributes) or of a
    `state_dict` (of torch tensors, or of NumPy arrays: then torch is not needed), by
    dotted path, as `jnp` arrays."""
    if isinstance(model, dict):
        tensors = dict(model)
    else:
        import torch

        tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    tensors.setdefault(f"{prefix}.{name}" if prefix else name, value)
    arrays = {}
    for path, tensor in tensors.items():
        if hasattr(tensor, "detach"):  # a torch tensor
            tensor = tensor.detach().cpu()
            if str(tensor.dtype) == "torch.bfloat16":
                tensor = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
            else:
                tensor = tensor.numpy()
        arrays[path] = jnp.asarray(tensor)
    return arrays


def _count(tensors, prefix):
    """How many numbered children (a ModuleList) the tensors have under `prefix`."""
    numbers = {
        path[len(prefix) :].split(".")[0] for path in tensors if path.startswith(prefix)
    }
    return len(numbers)


def _embed_layer(tensors, path):
    """A torch `Embedding` as an `nnx.Embed`: its `weight` (num_embeddings, features) is
    NNX's `embedding`, in the same layout."""
    weight = tensors[path + "weight"]
    layer = nnx.Embed(
        weight.shape[0], weight.shape[1], param_dtype=weight.dtype, rngs=nnx.Rngs(0)
    )
    layer.embedding[...] = weight
    return layer


def _linear_layer(tensors, path):
    """A torch `Linear` as an `nnx.Linear`: torch keeps `weight` as (out, in), NNX's `kernel`
    is (in, out), so it is transposed; the bias is the same."""
    weight = tensors[path + "weight"]
    bias = tensors.get(path + "bias")
    layer = nnx.Linear(
        weight.shape[1],
        weight.shape[0],
        use_bias=bias is not None,
        param_dtype=weight.dtype,
        rngs=nnx.Rngs(0),
    )
    layer.kernel[...] = weight.T
    if bias is not None:
        layer.bias[...] = bias
    return layer


def _transformer(tensors, path, config):
    """`Transformer` from the tensors under `path`."""
    return Transformer(
        tok_embeddings=_embed_layer(tensors, path + "tok_embeddings."),
        layers=[
            _transformer_block(tensors, f"{path}layers.{i}.", config)
            for i in range(_count(tensors, path + "layers."))
        ],
        norm=_rms_norm(tensors, path + "norm.", config),
        output=_linear_layer(tensors, path + "output."),
        freqs_cis=tensors[path + "freqs_cis"],
        causal_mask=tensors[path + "causal_mask"],
    )


def _transformer_block(tensors, path, config):
    """`TransformerBlock` from the tensors under `path`."""
    return TransformerBlock(
        attention=_attention(tensors, path + "attention.", config),
        feed_forward=_feed_forward(tensors, path + "feed_forward."),
        attention_norm=_rms_norm(tensors, path + "attention_norm.", config),
        ffn_norm=_rms_norm(tensors, path + "ffn_norm.", config),
    )


def _rms_norm(tensors, path, config):
    """`RMSNorm` from the tensors under `path`."""
    return RMSNorm(weight=tensors[path + "weight"], config=config)


def _attention(tensors, path, config):
    """`Attention` from the tensors under `path`."""
    return Attention(
        wqkv=_linear_layer(tensors, path + "wqkv."),
        wo=_linear_layer(tensors, path + "wo."),
        kv_cache=_kv_cache(tensors, path + "kv_cache."),
        config=config,
    )


def _kv_cache(tensors, path):
    """`KVCache` from the tensors under `path`."""
    return KVCache(k_cache=tensors[path + "k_cache"], v_cache=tensors[path + "v_cache"])


def _feed_forward(tensors, path):
    """`FeedForward` from the tensors under `path`."""
    return FeedForward(
        w1=_linear_layer(tensors, path + "w1."),
        w3=_linear_layer(tensors, path + "w3."),
        w2=_linear_layer(tensors, path + "w2."),
    )


def from_torch(model, *, config=Config()):
    """The `Transformer` holding a torch module's weights (the module, or its
    `state_dict`): every layout change is made here, in the helpers it calls.
    """
    tensors = _tensors(model)
    return _transformer(tensors, "", config)


def config_from(model):
    """The `Config` of a torch module built as the traced one, for
    `from_torch(..., config=config_from(model))`."""
    return Config(
        eps=model.layers[0].attention_norm.eps,
        split_sizes=tuple(model.layers[0].attention.split_sizes),
        n_head=model.layers[0].attention.n_head,
        head_dim=model.layers[0].attention.head_dim,
        n_local_heads=model.layers[0].attention.n_local_heads,
    )
