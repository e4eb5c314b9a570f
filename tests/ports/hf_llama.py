"""transformers' Llama as the review tests meet it: a tiny config with random weights, grouped
queries, eager attention (its scores, scale and mask each a line of `eager_attention_forward`),
one-shot (no cache). Its port, written by hand in plain JAX, is hf_llama_port.py."""

from __future__ import annotations

import torch
import transformers


def example() -> tuple[torch.nn.Module, tuple[torch.Tensor], dict[str, bool]]:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).eval()
    return model, (torch.randint(0, 64, (1, 7)),), {"use_cache": False}
