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
        # jax: def forward(params, x, *, config=Config())
        h = F.gelu(self.fc1(x))
        # h = jax.nn.gelu(x @ params["fc1"]["weight"].T + params["fc1"]["bias"], approximate=False)
        h = self.norm(h + F.relu(self.fc2(h)))
        # relu = jax.nn.relu(h @ params["fc2"]["weight"].T + params["fc2"]["bias"])
        # h_plus_relu = h + relu
        # h = (h_plus_relu - jnp.mean(h_plus_relu, axis=1, keepdims=True)) * lax.rsqrt(
        #     jnp.var(h_plus_relu, axis=1, keepdims=True, ddof=0) + config.eps
        # ) * params["norm"]["weight"] + params["norm"]["bias"]
        return self.head(h)  # return h @ params["head"]["weight"].T + params["head"]["bias"]


def example():
    torch.manual_seed(0)
    model = MLP().eval()
    return model, (torch.randn(8, 32),)
