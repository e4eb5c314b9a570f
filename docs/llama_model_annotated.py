"""A gpt-fast-style Llama: RMSNorm, rotary embeddings, grouped-query attention with a KV cache and a
SwiGLU feed-forward. Built from a named config with random weights; rotary tables are real (cos, sin)."""

from dataclasses import dataclass
from typing import Self

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def find_multiple(n: int, k: int) -> int:
    """The smallest multiple of k that is >= n."""
    return -(-n // k) * k


@dataclass
class ModelArgs:
    block_size: int = 2048
    vocab_size: int = 32000
    n_layer: int = 2
    n_head: int = 32
    dim: int = 4096
    intermediate_size: int | None = None
    n_local_heads: int = -1
    head_dim: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        if self.n_local_heads == -1:
            self.n_local_heads = self.n_head
        if self.intermediate_size is None:
            self.intermediate_size = find_multiple(int(2 * 4 * self.dim / 3), 256)
        self.head_dim = self.dim // self.n_head

    @classmethod
    def from_name(cls, name: str) -> Self:
        return cls(**transformer_configs[name])


transformer_configs = {
    "tiny": dict(block_size=64, vocab_size=256, n_layer=2, n_head=4, n_local_heads=2, dim=64),
    "7B": dict(block_size=4096, n_layer=32, n_head=32, dim=4096),
    "70B": dict(block_size=4096, n_layer=80, n_head=64, n_local_heads=8, dim=8192, intermediate_size=28672),
}


class KVCache(nn.Module):
    def __init__(
        self, max_batch_size: int, max_seq_length: int, n_heads: int, head_dim: int, dtype=torch.float32
    ):
        super().__init__()
        shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(self, input_pos: Tensor, k_val: Tensor, v_val: Tensor) -> tuple[Tensor, Tensor]:
        # jax: def kv_cache_update(state, input_pos, k_val, v_val)  ×2
        """Write the new keys and values at `input_pos` (in place) and return the whole caches."""
        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, input_pos] = k_val
        # k_out = state["k_cache"].at[:, :, input_pos].set(k_val)  ×2
        v_out[:, :, input_pos] = v_val
        # v_out = state["v_cache"].at[:, :, input_pos].set(v_val)  ×2
        return k_out, v_out  # return ((k_out, v_out), {"k_cache": k_out, "v_cache": v_out})  ×2


class Transformer(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)

    def setup_caches(self, max_batch_size: int, max_seq_length: int):
        """Give every attention layer a KV cache and precompute the rotary table and causal mask."""
        config = self.config
        dtype = self.output.weight.dtype
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(
                max_batch_size, max_seq_length, config.n_local_heads, config.head_dim, dtype
            )
        freqs_cis = precompute_freqs_cis(max_seq_length, config.head_dim, config.rope_base)
        self.register_buffer("freqs_cis", freqs_cis.to(dtype))
        causal_mask = torch.tril(torch.ones(max_seq_length, max_seq_length, dtype=torch.bool))
        self.register_buffer("causal_mask", causal_mask)

    def forward(self, idx: Tensor, input_pos: Tensor) -> Tensor:
        # jax: def forward(params, state, idx, input_pos, *, config=Config())
        """idx: (batch, seq) token ids at positions input_pos: (seq,) -> logits (batch, seq, vocab)."""
        freqs_cis = self.freqs_cis[input_pos]  # freqs_cis = params["freqs_cis"][input_pos]
        mask = self.causal_mask[None, None, input_pos]
        # mask = params["causal_mask"][None, None, input_pos]
        x = self.tok_embeddings(idx)
        # x = jnp.take(params["tok_embeddings"]["weight"], idx, axis=0)
        for layer in self.layers:
            x = layer(x, input_pos, freqs_cis, mask)
            # x, new_layer_state = transformer_block_forward(
            #     layer, layer_state, x, input_pos, freqs_cis, mask, config=config
            # )  ×2
        return self.output(self.norm(x))
        # norm_x = rms_norm_forward(params["norm"], x, config=config)
        # return (norm_x @ params["output"]["weight"].T, {"layers": new_layer_states})


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x: Tensor, input_pos: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        # jax: def transformer_block_forward(params, state, x, input_pos, freqs_cis, mask, *, config)  ×2
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        # attention, new_attention_state = attention_forward(
        #     params["attention"],
        #     state["attention"],
        #     rms_norm_forward(params["attention_norm"], x, config=config),
        #     freqs_cis,
        #     mask,
        #     input_pos,
        #     config=config,
        # )  ×2
        # h = x + attention
        out = h + self.feed_forward(self.ffn_norm(h))
        # ffn_norm_h = rms_norm_forward(params["ffn_norm"], h, config=config)  ×2
        # out = h + feed_forward(params["feed_forward"], ffn_norm_h)
        return out  # return (out, {"attention": new_attention_state})  ×2


class Attention(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        self.n_head = config.n_head
        self.n_local_heads = config.n_local_heads
        self.head_dim = config.head_dim
        q_size = config.n_head * config.head_dim
        kv_size = config.n_local_heads * config.head_dim
        self.split_sizes = [q_size, kv_size, kv_size]
        self.wqkv = nn.Linear(config.dim, q_size + 2 * kv_size, bias=False)
        self.wo = nn.Linear(q_size, config.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        # jax: def attention_forward(params, state, x, freqs_cis, mask, input_pos, *, config)  ×2
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split(self.split_sizes, dim=-1)
        # q, k, v = jnp.split(
        #     x @ params["wqkv"]["weight"].T,
        #     [config.split_sizes[0], sum(config.split_sizes[:2])],
        #     axis=2,
        # )  ×2
        q = q.view(bsz, seqlen, self.n_head, self.head_dim)
        # q = jnp.reshape(q, (x.shape[0], x.shape[1], config.n_head, config.head_dim))  ×2
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        # k = jnp.reshape(k, (x.shape[0], x.shape[1], config.n_local_heads, config.head_dim))  ×2
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        # v = jnp.reshape(v, (x.shape[0], x.shape[1], config.n_local_heads, config.head_dim))  ×2

        q = apply_rotary_emb(q, freqs_cis)  # q = apply_rotary_emb(q, freqs_cis)  ×2
        k = apply_rotary_emb(k, freqs_cis)  # k = apply_rotary_emb(k, freqs_cis)  ×2
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        # q = jnp.transpose(q, (0, 2, 1, 3))  ×2
        # k = jnp.transpose(k, (0, 2, 1, 3))
        # v = jnp.transpose(v, (0, 2, 1, 3))

        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)
            # (k, v), new_kv_cache_state = kv_cache_update(state["kv_cache"], input_pos, k, v)  ×2

        groups = self.n_head // self.n_local_heads
        k = k.repeat_interleave(groups, dim=1)  # k = jnp.repeat(k, groups, axis=1)  ×2
        v = v.repeat_interleave(groups, dim=1)  # v = jnp.repeat(v, groups, axis=1)  ×2
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        # softmax = jax.nn.softmax(
        #     q @ k.mT * q.shape[-1] ** (-0.5)
        #     + jnp.where(~mask, -jnp.inf, jnp.zeros((8, 64), jnp.float32)),
        #     axis=-1,
        # )  ×2
        # y = softmax @ v
        y = y.transpose(1, 2).reshape(bsz, seqlen, self.n_head * self.head_dim)
        # y = jnp.reshape(
        #     jnp.transpose(y, (0, 2, 1, 3)),
        #     (x.shape[0], x.shape[1], config.n_head * config.head_dim),
        # )  ×2
        return self.wo(y)
        # return (y @ params["wo"]["weight"].T, {"kv_cache": new_kv_cache_state})  ×2


class FeedForward(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:  # jax: def feed_forward(params, x)  ×2
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
        # silu = jax.nn.silu(x @ params["w1"]["weight"].T)  ×2
        # silu_times_w3 = silu * (x @ params["w3"]["weight"].T)
        # return silu_times_w3 @ params["w2"]["weight"].T


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x: Tensor) -> Tensor:  # jax: def rms_norm(x, *, config)  ×5
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        # return x * lax.rsqrt(jnp.mean(x * x, axis=2, keepdims=True) + config.eps)  ×5

    def forward(self, x: Tensor) -> Tensor:  # jax: def rms_norm_forward(params, x, *, config)  ×5
        return self._norm(x.float()).type_as(x) * self.weight
        # return rms_norm(x, config=config) * params["weight"]  ×5


def precompute_freqs_cis(seq_len: int, n_elem: int, base: float = 10000.0) -> Tensor:
    """Rotary table of shape (seq_len, n_elem // 2, 2): the (cos, sin) of each position's angles."""
    inv_freq = 1.0 / base ** (torch.arange(0, n_elem, 2).float() / n_elem)
    angles = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    # jax: def apply_rotary_emb(x, freqs_cis)  ×4
    """Rotate consecutive pairs of x: (batch, seq, heads, head_dim) by freqs_cis: (seq, head_dim // 2, 2)."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    # pairs = jnp.reshape(x, (1, 8, x.shape[2], 8, 2))  ×4
    x_re, x_im = pairs[..., 0], pairs[..., 1]
    # x_re = pairs[..., 0]  ×4
    # x_im = pairs[..., 1]
    cos = freqs_cis[:, None, :, 0]  # cos = freqs_cis[:, None, :, 0]  ×4
    sin = freqs_cis[:, None, :, 1]  # sin = freqs_cis[:, None, :, 1]  ×4
    rotated = torch.stack([x_re * cos - x_im * sin, x_im * cos + x_re * sin], dim=-1)
    # rotated = jnp.stack([x_re * cos - x_im * sin, x_im * cos + x_re * sin], axis=4)  ×4
    return rotated.flatten(-2).type_as(x)  # return jnp.reshape(rotated, (1, 8, x.shape[2], -1))  ×4


def build(name: str = "tiny", device: str | torch.device | None = None) -> Transformer:
    """A random-weight model with caches for batch 1 and the config's block size.

    With device="meta" nothing is allocated, so even "70B" builds instantly."""
    config = ModelArgs.from_name(name)
    with torch.device(device if device is not None else torch.get_default_device()):
        model = Transformer(config)
        model.setup_caches(max_batch_size=1, max_seq_length=config.block_size)
    return model.eval()


def example():
    torch.manual_seed(0)
    model = build("tiny")
    idx = torch.randint(0, model.config.vocab_size, (1, 8))
    input_pos = torch.arange(8)
    return model, (idx, input_pos)
