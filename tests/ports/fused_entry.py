"""An NNX port of tiny_decoder.py whose attention weights are one library call, as Hugging Face's
Flax ports write it (`dot_product_attention_weights`: scores, scale, mask and softmax in one
expression, the shape of torch's scores), reusing nnx_port's other layers."""

import jax.numpy as jnp
from flax import nnx
from flax.linen import dot_product_attention_weights
from nnx_port import layers
from nnx_port.model import Decoder
from nnx_port.rotary import rotate


class FusedAttention(layers.Attention):
    def __call__(self, x, cos, sin):
        batch, seq, _ = x.shape
        q = self.q_proj(x).reshape(batch, seq, self.heads, self.head_dim)
        k = self.k_proj(x).reshape(batch, seq, self.heads, self.head_dim)
        v = self.v_proj(x).reshape(batch, seq, self.heads, self.head_dim)
        cos, sin = cos[:, None, :], sin[:, None, :]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
        weights = dot_product_attention_weights(q, k, mask=causal)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return self.o_proj(out.reshape(batch, seq, -1))


def build():
    model = Decoder(nnx.Rngs(0))
    for block in model.layers:
        block.self_attn = FusedAttention(16, 2, 8, nnx.Rngs(1))
    return model
