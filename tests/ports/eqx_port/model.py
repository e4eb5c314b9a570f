import equinox as eqx
import jax
import jax.numpy as jnp

from eqx_port.attention import Attention, dense
from eqx_port.norm import RMSNorm


class MLP(eqx.Module):
    gate_proj: eqx.nn.Linear
    up_proj: eqx.nn.Linear
    down_proj: eqx.nn.Linear

    def __call__(self, x):
        return dense(self.down_proj, jax.nn.silu(dense(self.gate_proj, x)) * dense(self.up_proj, x))


class Block(eqx.Module):
    input_layernorm: RMSNorm
    self_attn: Attention
    post_attention_layernorm: RMSNorm
    mlp: MLP

    def __call__(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(eqx.Module):
    embed_tokens: eqx.nn.Embedding
    layers: list[Block]
    norm: RMSNorm
    lm_head: eqx.nn.Linear

    def __call__(self, tokens):
        seq = tokens.shape[1]
        inv_freq = 1.0 / 10000.0 ** (jnp.arange(0, 8, 2, dtype=jnp.float32) / 8)
        angles = jnp.outer(jnp.arange(seq, dtype=jnp.float32), inv_freq)
        angles = jnp.concatenate([angles, angles], axis=-1)
        x = self.embed_tokens.weight[tokens]
        for layer in self.layers:
            x = layer(x, jnp.cos(angles), jnp.sin(angles))
        return dense(self.lm_head, self.norm(x))


def build():
    keys = iter(jax.random.split(jax.random.key(0), 10))

    def linear(n_in, n_out):
        return eqx.nn.Linear(n_in, n_out, use_bias=False, key=next(keys))

    attention = Attention(linear(16, 16), linear(16, 16), linear(16, 16), linear(16, 16))
    mlp = MLP(linear(16, 40), linear(16, 40), linear(40, 16))
    block = Block(RMSNorm(jnp.ones(16)), attention, RMSNorm(jnp.ones(16)), mlp)
    return Decoder(eqx.nn.Embedding(24, 16, key=next(keys)), [block], RMSNorm(jnp.ones(16)), linear(16, 24))
