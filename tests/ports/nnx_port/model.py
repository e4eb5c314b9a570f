from flax import nnx

from nnx_port.layers import MLP, Attention, RMSNorm
from nnx_port.rotary import angles


class Block(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = RMSNorm(16)
        self.self_attn = Attention(16, 2, 8, rngs)
        self.post_attention_layernorm = RMSNorm(16)
        self.mlp = MLP(16, 40, rngs)

    def __call__(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(24, 16, rngs=rngs)
        self.layers = nnx.List([Block(rngs)])
        self.norm = RMSNorm(16)
        self.lm_head = nnx.Linear(16, 24, use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        cos, sin = angles(tokens.shape[1], 8)
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def build():
    return Decoder(nnx.Rngs(0))
