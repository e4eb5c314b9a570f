"""A small multi-layer perceptron: Linear layers with GELU and ReLU, and a LayerNorm."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, in_features: int = 32, hidden: int = 64, out_features: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        h = self.norm(h + F.relu(self.fc2(h)))
        return self.head(h)


def example():
    torch.manual_seed(0)
    model = MLP().eval()
    return model, (torch.randn(8, 32),)
