"""A small mixture-of-experts layer: top-2 of 4 SwiGLU experts, mixed densely (no data-dependent branches)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    """A SwiGLU feed-forward network."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64, n_experts: int = 4, top_k: int = 2):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        logits = self.router(tokens)
        topk_logits, topk_idx = torch.topk(logits, self.top_k, dim=-1)
        topk_w = F.softmax(topk_logits, dim=-1)
        # Dense (tokens, n_experts) routing weights: zero for every expert outside a token's top-k.
        weights = torch.zeros_like(logits).scatter(1, topk_idx, topk_w)
        expert_out = torch.stack([expert(tokens) for expert in self.experts], dim=1)
        out = torch.einsum("te,ted->td", weights, expert_out)
        return out.reshape(x.shape)


def example():
    torch.manual_seed(0)
    model = MoE().eval()
    return model, (torch.randn(2, 6, 32),)
