"""Programs the fuzzer's quick profile always runs, so that it binds every reduction, indexing
and layout primitive torch code reaches through torchax at least once (`tests/test_fuzz.py`
checks that it does).  Each returns every value it computes.

Not reachable from torch code, and so proven by the op catalog only (`tests/fuzzing/catalog.py`):
`reduce_and` (torchax writes `all` as `not` + `reduce_or`), `reduce_xor`, the `cummax` and
`cummin` primitives (torchax writes them as a pad-and-select loop), `dynamic_slice` and
`dynamic_update_slice` (indices are static in torch code), `scatter-sub`, `unstack`.
"""

from __future__ import annotations

import torch

from fuzzing.programs import InputSpec, Program

F32 = torch.float32


def _all(inputs: list[tuple[tuple[int, ...], torch.dtype]], *lines: str) -> Program:
    names = [line.split(" = ")[0] for line in lines]
    return Program([InputSpec(shape, dtype) for shape, dtype in inputs], list(lines), names, seed=1)


COVERAGE: dict[str, Program] = {
    "reductions": _all(
        [((3, 5), F32)],
        "v1 = v0.sum(1)", "v2 = v0.amax(0, keepdim=True)", "v3 = v0.amin(1)", "v4 = v0.prod(0)",
        "v5 = v0.min(1).indices", "v6 = v0.argmax(0)", "v7 = (v0 > 0).any(1)",
        "v8 = torch.cumsum(v0, 0)", "v9 = torch.cumprod(torch.clamp(v0, -1.5, 1.5), 1)",
        "v10 = torch.logcumsumexp(v0, 1)",
    ),
    "sorting_and_windows": _all(
        [((2, 3, 6), F32)],
        "v1 = torch.sort(v0, 2).values", "v2 = torch.topk(v0, 2, -1).values",
        "v3 = F.max_pool1d(v0, 2)", "v4 = F.avg_pool1d(v0, 3, 2)",
    ),
    "indexing": _all(
        [((4, 5), F32)],
        "v1 = v0[torch.tensor([0, 2, 1])]", "v2 = torch.gather(v0, 1, torch.tensor([[0], [1], [2], [4]]))",
        "v3 = _setitem(v0, 1)", "v4 = torch.scatter_add(v0, 0, torch.tensor([[0, 1, 2, 0, 1]]), v0[:1])",
        "v5 = torch.ones(4, 5).scatter_reduce(0, torch.tensor([[0, 1, 2, 0, 1]]), v0[:1], 'prod')",
        "v6 = torch.zeros(4, 5).scatter_reduce(0, torch.tensor([[0, 1, 2, 0, 1]]), v0[:1], 'amin')",
        "v7 = torch.zeros(4, 5).scatter_reduce(0, torch.tensor([[0, 1, 2, 0, 1]]), v0[:1], 'amax')",
        "v8 = torch.where(v0 > 0, v0, 0.0)", "v9 = torch.arange(5) + v0", "v10 = torch.narrow(v0, 1, 1, 2)",
        "v11 = torch.unbind(v0)[1] * 2",
    ),
    "layout": _all(
        [((3, 4), F32)],
        "v1 = v0.reshape(2, 6)", "v2 = v0.transpose(0, 1) * 2", "v3 = v0.unsqueeze(0) * 2",
        "v4 = v0[:1].squeeze(0) * 2", "v5 = torch.flip(v0, (1,))", "v6 = torch.cat([v0, v0])",
        "v7 = F.pad(v0, (1, 1))", "v8 = torch.stack([v0, v0])", "v9 = v0.repeat(2, 1)",
    ),
}
