"""The `example()` file of tiny_gpt.py: the model lives in the module it imports."""

import torch
from tiny_gpt import GPT, GPTConfig


def example():
    torch.manual_seed(0)
    model = GPT(GPTConfig()).eval()
    return model, (torch.randint(0, 48, (1, 8)),)
