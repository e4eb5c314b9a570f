"""A hand-written Elman RNN: one recurrent cell unrolled over time with a Python loop, then a Linear head."""

import math

import torch
import torch.nn as nn


class ElmanCell(nn.Module):
    """h' = tanh(W x + U h + b)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size).uniform_(-bound, bound))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(hidden_size).uniform_(-bound, bound))

    def forward(self, x_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        # jax: def elman_cell_forward(params, x_t, h)  ×5
        return torch.tanh(x_t @ self.weight_ih.T + h @ self.weight_hh.T + self.bias)
        # bias = x_t @ params["weight_ih"].T + h @ params["weight_hh"].T + params["bias"]  ×5
        # return jnp.tanh(bias)


class SequenceModel(nn.Module):
    def __init__(self, input_size: int = 8, hidden_size: int = 32, output_size: int = 4):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = ElmanCell(input_size, hidden_size)
        self.head = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # jax: def forward(params, x, *, config=Config())
        """x: (batch, time, input_size) -> (batch, time, output_size)."""
        h = x.new_zeros(x.shape[0], self.hidden_size)
        # h = jnp.zeros((x.shape[0], config.hidden_size), jnp.float32)
        outputs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)  # h = elman_cell_forward(params["cell"], x_t, h)  ×5
            outputs.append(h)
        hidden_states = torch.stack(outputs, dim=1)  # hidden_states = jnp.stack(outputs, axis=1)
        return self.head(hidden_states)
        # return hidden_states @ params["head"]["weight"].T + params["head"]["bias"]


def example():
    torch.manual_seed(0)
    model = SequenceModel().eval()
    return model, (torch.randn(2, 5, 8),)
