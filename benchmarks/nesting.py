"""Row 6: export time against module nesting depth (a module wrapping itself N times).

Rendering must grow linearly with the program: the time per nesting level at the deepest case
is compared with the time per level at the shallowest (a ratio near 1 is linear).
"""

from __future__ import annotations

import torch

from benchmarks._common import Result, judge, medians

ROW = "6 render vs depth"
LIMIT = 2.0
"""Time per level at the deepest case over time per level at the shallowest."""


class _Leaf(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class _Wrap(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * self.scale + 1.0


def nested(depth: int) -> torch.nn.Module:
    model: torch.nn.Module = _Leaf()
    for _ in range(depth):
        model = _Wrap(model)
    return model


def run(smoke: bool = False) -> list[Result]:
    from jaxside.render.lower import lower
    from jaxside.render.module import render_program
    from jaxside.tracing import capture

    depths = (5, 10) if smoke else (10, 25, 50)
    traces = {depth: capture(nested(depth), torch.randn(2, 4)) for depth in depths}
    cases = {
        str(depth): (lambda t=trace: render_program(lower(t), source="benchmarks"))
        for depth, trace in traces.items()
    }
    times = medians(cases, runs=1 if smoke else 3)
    shallow = times[str(depths[0])] / depths[0]
    results = []
    for depth in depths:
        per_level = times[str(depth)] / depth
        ratio = per_level / shallow
        verdict = judge(ratio, LIMIT, smoke) if depth != depths[0] else "n/a"
        results.append(Result(ROW, f"export_module, depth {depth}", f"{times[str(depth)]:.2f} s",
                              f"{shallow * depth:.2f} s", ratio, f"<= {LIMIT:g}x per level", verdict))
    return results
