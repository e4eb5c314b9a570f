"""Retraces the size search leaves out (`render.lower.merge.input_sizes._Tries.attempt`'s
`plan_only`): where a caller reads only whether an attempt unifies (a set tried below its traced
size, after it failed above), the last size is not traced once the programs at the others cannot
be one whatever it gives. The export is the same as with every size traced.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from jaxside.annotate.check import check, load_module
from jaxside.render.lower import lower
from jaxside.render.lower.merge import input_sizes
from jaxside.render.module import render_program
from jaxside.tracing import Capture


class Cubed(torch.nn.Module):
    """A number no shape expression gives (the rows cubed): the rows stay fixed, the columns move."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=0) * float(x.shape[0] ** 3)


def exported(every_size: bool) -> tuple[Any, list[dict[str, tuple[int, ...]]]]:
    model, x = Cubed(), torch.randn(8, 5)
    asked: list[dict[str, tuple[int, ...]]] = []

    def retrace(resize: dict[str, tuple[int, ...]]) -> Any:
        asked.append(resize)
        return Capture(resize=resize)(model, x)

    with pytest.MonkeyPatch.context() as patch:
        if every_size:
            whole = input_sizes._Tries._unify
            patch.setattr(input_sizes._Tries, "_unify", lambda tries, sets, rows, plan_only=False:
                          whole(tries, sets, rows))
        program = lower(Capture()(model, x), retrace)
    return program, asked


def test_a_set_below_its_size_is_not_traced_at_its_last_size_once_two_cannot_be_one():
    program, asked = exported(every_size=False)
    every, asked_every = exported(every_size=True)
    assert render_program(program, source="test") == render_program(every, source="test")
    rows = sorted(r["x"][0] for r in asked if r["x"][1] == 5)
    # above: 16, 24; below: 4 (8 and 4 cannot be one), then 4, 6, 2 from 4: 6 (4 and 6 cannot be one)
    assert rows == [4, 6, 16, 24], asked
    assert sorted(r["x"][0] for r in asked_every if r["x"][1] == 5) == [2, 4, 6, 16, 24], asked_every
    (dims, why), = program.sizes.fixed
    assert [str(d) for d in dims] == ["x.shape[0]"] and "512.0 in `forward` follows the size" in why, why
    assert [[str(d) for d in dims] for dims in program.sizes.generic] == [["x.shape[1]"]]


def test_the_export_runs_at_other_columns():
    program, _ = exported(every_size=False)
    module = load_module(render_program(program, source="test"))
    comparisons = check(module, program, Cubed(), (torch.randn(8, 7),), {})
    assert comparisons and all(c.ok for c in comparisons), [c.line() for c in comparisons]
