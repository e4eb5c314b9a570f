"""Random torch programs through `capture` and the op renderer: exact to the jaxpr, close to torch.

A quick profile (30 programs, fixed seeds) runs by default; a long one on request:

    JAXSIDE_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest tests/test_fuzz.py -s

Programs torchax cannot trace, or traces into something other than what torch computes, are
set aside (`hypothesis.reject`) and counted: those are torchax's, not the renderer's.  An
exception jaxside raises during capture is not set aside: it fails the test (see
`fuzzing.roundtrip.capture_failure`).  The quick profile must bind every primitive of
`COVERED` at least once: a generator change that stops drawing one fails here.  The summary
line (shown with `-s`) gives the numbers.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator

import pytest
from fuzzing.coverage import COVERAGE
from fuzzing.draw import programs
from fuzzing.programs import Program
from fuzzing.regressions import F32, REGRESSIONS, TORCHAX_ISSUES, program
from fuzzing.roundtrip import Crash, TorchaxDivergence, TorchaxError, roundtrip
from hypothesis import HealthCheck, example, given, reject, settings

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

QUICK = 30
EXAMPLES = int(os.environ.get("JAXSIDE_FUZZ_EXAMPLES", QUICK))


_tally: collections.Counter[str] = collections.Counter()
_bound: set[str] = set()

# The reduction, indexing and layout primitives torch code reaches through torchax: the quick
# profile (its random programs and `fuzzing.coverage.COVERAGE`) binds each at least once.
COVERED = {
    "reductions": {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_or", "argmax", "argmin",
                   "cumsum", "cumprod", "cumlogsumexp", "sort", "top_k", "reduce_window",
                   "reduce_window_max", "reduce_window_sum"},
    "indexing": {"gather", "scatter", "scatter-add", "scatter-mul", "scatter-min", "scatter-max", "slice",
                 "split", "select_n", "iota"},
    "layout": {"reshape", "transpose", "broadcast_in_dim", "squeeze", "rev", "concatenate", "pad", "stack",
               "tile"},
}


def _with_coverage_examples(test: Callable[..., None]) -> Callable[..., None]:
    for covering in COVERAGE.values():
        test = example(program=covering)(test)
    return test


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
@_with_coverage_examples
def _round_trips(program: Program) -> None:
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
    _bound.update(outcome.primitives)


def test_random_programs_round_trip() -> None:
    _bound.clear()
    _round_trips()
    if EXAMPLES == QUICK:
        missing = {family: sorted(names - _bound) for family, names in COVERED.items() if names - _bound}
        assert not missing, f"the quick profile no longer binds {missing}"


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(name: str) -> None:
    roundtrip(REGRESSIONS[name])


@pytest.mark.parametrize("name", sorted(TORCHAX_ISSUES))
def test_torchax_issue_still_there(name: str) -> None:
    """When one of these starts passing, torchax fixed it: move the program to REGRESSIONS."""
    with pytest.raises(TorchaxError):
        roundtrip(TORCHAX_ISSUES[name])


def test_a_jaxside_crash_during_capture_fails_and_a_torchax_failure_is_set_aside(monkeypatch):
    import jaxside.tracing._capture

    tanh = program([((3,), F32)], "v1 = torch.tanh(v0)")
    assemble = jaxside.tracing._capture.assemble

    def broken(entry, closed, *rest):
        if any(eqn.primitive.name == "tanh" for eqn in closed.jaxpr.eqns):
            raise RuntimeError("a jaxside bug")
        return assemble(entry, closed, *rest)

    monkeypatch.setattr(jaxside.tracing._capture, "assemble", broken)
    with pytest.raises(Crash, match="jaxside raised during capture .*a jaxside bug"):
        roundtrip(tanh)
    roundtrip(program([((3,), F32)], "v1 = torch.sin(v0)"))
    # torchax raising while the program runs stays torchax's.
    with pytest.raises(TorchaxError) as raised:
        roundtrip(program([((3,), F32)], "v1 = v0.nonzero()"))
    assert not isinstance(raised.value, Crash)
