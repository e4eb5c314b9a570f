"""The `example()` file of an installed library's model: transformers' Llama, tiny, random weights."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def example():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval(), (torch.randint(0, 64, (1, 6)),), dict(use_cache=False)
