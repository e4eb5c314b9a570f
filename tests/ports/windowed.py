"""A linear layer that also returns its window size as a tensor, as Gemma 2's cache does, and sets a
flag buffer in place: the jaxpr returns both constants as literals (for tests/test_review_literals.py)."""

import torch
import torch.nn as nn


class Windowed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.window = 4
        self.register_buffer("ran", torch.tensor(0.0))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.ran.fill_(1.0)
        y = torch.tanh(self.proj(x)) * 2.0
        return {"y": y, "window": torch.tensor(self.window)}


def example():
    torch.manual_seed(0)
    return Windowed().eval(), (torch.randn(2, 8),)
