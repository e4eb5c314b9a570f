"""Random torch programs through `capture` and the op renderer: exact to the jaxpr, close to torch.

A quick profile (30 programs, fixed seeds) runs by default; a long one on request:

    JAXSIDE_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/test_fuzz.py -s

Programs torchax cannot trace, or traces into something other than what torch computes, are
set aside (`hypothesis.reject`) and counted: those are torchax's, not the renderer's.  The
summary line (shown with `-s`) gives the numbers.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator

import pytest
from fuzzing.programs import Program, programs
from fuzzing.regressions import REGRESSIONS, TORCHAX_ISSUES
from fuzzing.roundtrip import TorchaxDivergence, TorchaxError, roundtrip
from hypothesis import HealthCheck, given, reject, settings

QUICK = 30
EXAMPLES = int(os.environ.get("JAXSIDE_FUZZ_EXAMPLES", QUICK))

_tally: collections.Counter[str] = collections.Counter()


@pytest.fixture(scope="module", autouse=True)
def summary() -> Iterator[None]:
    yield
    if _tally:
        print(
            f"\nfuzz: {_tally['ok']} programs round-tripped ({_tally['equations']} equations); "
            f"set aside {_tally['torchax_error']} torchax could not trace and "
            f"{_tally['torchax_divergence']} where torchax departs from torch"
        )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES == QUICK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(program=programs())
def test_random_program_round_trips(program: Program) -> None:
    try:
        outcome = roundtrip(program)
    except TorchaxDivergence:
        _tally["torchax_divergence"] += 1
        reject()
    except TorchaxError:
        _tally["torchax_error"] += 1
        reject()
    _tally["ok"] += 1
    _tally["equations"] += outcome.equations


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(name: str) -> None:
    roundtrip(REGRESSIONS[name])


@pytest.mark.parametrize("name", sorted(TORCHAX_ISSUES))
def test_torchax_issue_still_there(name: str) -> None:
    """When one of these starts passing, torchax fixed it: move the program to REGRESSIONS."""
    with pytest.raises(TorchaxError):
        roundtrip(TORCHAX_ISSUES[name])
