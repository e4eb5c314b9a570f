"""The nnx_port package with its own converter from a torch state_dict, as real ports ship one."""

import jax.numpy as jnp
from nnx_port import build

__all__ = ["build", "load_from_torch"]


def load_from_torch(model, state_dict):
    def weight(name):
        return jnp.asarray(state_dict[name].numpy())

    model.embed_tokens.embedding[...] = weight("embed_tokens.weight")
    for i, block in enumerate(model.layers):
        prefix = f"layers.{i}."
        block.input_layernorm.weight[...] = weight(prefix + "input_layernorm.weight")
        block.post_attention_layernorm.weight[...] = weight(prefix + "post_attention_layernorm.weight")
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(block.self_attn, name).kernel[...] = weight(f"{prefix}self_attn.{name}.weight").T
        block.self_attn.o_proj.kernel[...] = weight(prefix + "self_attn.o_proj.weight").T
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(block.mlp, name).kernel[...] = weight(f"{prefix}mlp.{name}.weight").T
    model.norm.weight[...] = weight("norm.weight")
    model.lm_head.kernel[...] = weight("lm_head.weight").T
    return model
