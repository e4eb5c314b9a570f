"""`annotate.compare`: --check's leaf-by-leaf verdicts, including the cases that must fail."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxside.annotate.compare import compare


def verdicts(got, want, **options):
    return [(c.what, c.ok) for c in compare(got, want, **options)]


def test_equal_trees_pass_leaf_by_leaf_with_paths():
    want = (torch.ones(2, 3), {"logits": torch.arange(4.0), "n": 3}, [torch.zeros(1, dtype=torch.bool)])
    got = (jnp.ones((2, 3)), {"logits": jnp.arange(4.0), "n": 3}, [jnp.zeros(1, bool)])
    assert verdicts(got, want) == [
        ("[0]", True), ("[1]['logits']", True), ("[1]['n']", True), ("[2][0]", True)
    ]


def test_a_value_beyond_tolerance_fails_with_its_error():
    [comparison] = compare(jnp.array([1.0, 2.0]), torch.tensor([1.0, 2.001]))
    assert not comparison.ok
    assert comparison.max_abs == pytest.approx(0.001, rel=1e-3)
    assert "MISMATCH" in comparison.line()


def test_identical_nans_and_infinities_are_equal_but_nan_against_a_number_is_not():
    nan = torch.full((3,), float("nan"))
    assert verdicts(jnp.full((3,), jnp.nan), nan) == [("output", True)]
    inf = torch.tensor([float("inf"), -float("inf"), 1.0])
    assert verdicts(jnp.array([jnp.inf, -jnp.inf, 1.0]), inf) == [("output", True)]
    assert verdicts(jnp.array([jnp.nan, 1.0]), torch.tensor([0.0, 1.0])) == [("output", False)]
    assert verdicts(jnp.array([jnp.inf, 1.0]), torch.tensor([-jnp.inf, 1.0])) == [("output", False)]


def test_complex_values_compare_both_parts():
    want = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert verdicts(jnp.array([1 + 2j, 3 - 1j], jnp.complex64), want) == [("output", True)]
    assert verdicts(jnp.array([1 + 2.5j, 3 - 1j], jnp.complex64), want) == [("output", False)]


def test_dtypes_are_compared_as_jax_holds_them():
    assert verdicts(jnp.array([1, 0], jnp.int32), torch.tensor([True, False])) == [("output", False)]
    # torch's int64 is JAX's int32 unless x64 is on
    assert verdicts(jnp.array([1, 2], jnp.int32), torch.tensor([1, 2])) == [("output", True)]
    [comparison] = compare(jnp.array([1.0], jnp.float16), torch.tensor([1.0]))
    assert not comparison.ok and "float16" in comparison.problem


def test_shapes_are_compared():
    [comparison] = compare(jnp.ones((8, 4)), torch.ones(1, 8, 4))
    assert not comparison.ok and "float32[8,4]" in comparison.problem


def test_structure_mismatches_are_reported_at_their_path():
    assert verdicts(jnp.ones(2), (torch.ones(2),)) == [("output", False)]  # a one-tuple stays a tuple
    assert verdicts((jnp.ones(2),), [torch.ones(2)]) == [("output", False)]
    assert verdicts({"a": jnp.ones(1)}, {"a": torch.ones(1), "b": torch.ones(1)}) == [
        ("['a']", True), ("['b']", False)
    ]
    assert verdicts({"a": jnp.ones(1), "c": 1}, {"a": torch.ones(1)}) == [("['a']", True), ("['c']", False)]


def test_constant_leaves_compare_by_equality():
    assert verdicts(("relu", None, 2.5), ("relu", None, 2.5)) == [("[0]", True), ("[1]", True), ("[2]", True)]
    assert verdicts(("relu", None), ("gelu", None)) == [("[0]", False), ("[1]", True)]
    assert verdicts((None,), (torch.ones(1),)) == [("[0]", False)]


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: tuple


def test_named_tuples_and_dataclasses_compare_field_by_field():
    want = Pair(torch.ones(2), torch.zeros(3))
    assert verdicts({"first": jnp.ones(2), "second": jnp.zeros(3)}, want) == [
        ("['first']", True), ("['second']", True)
    ]
    assert verdicts({"first": jnp.ones(2), "second": jnp.ones(3)}, want) == [
        ("['first']", True), ("['second']", False)
    ]
    want = Output(torch.ones(2), (torch.ones(1),))
    assert verdicts({"logits": jnp.ones(2), "hidden": (jnp.ones(1),)}, want) == [
        ("['logits']", True), ("['hidden'][0]", True)
    ]


def test_random_leaves_compare_by_shape_and_dtype_only():
    random = frozenset({"[0]"})
    assert verdicts((jnp.ones(2), jnp.ones(1)), (torch.zeros(2), torch.ones(1)), random=random) == [
        ("[0]", True), ("[1]", True)
    ]
    assert verdicts((jnp.ones(3), jnp.ones(1)), (torch.zeros(2), torch.ones(1)), random=random) == [
        ("[0]", False), ("[1]", True)
    ]


def test_bfloat16_uses_its_own_tolerance():
    want = torch.tensor([1.0, 100.0], dtype=torch.bfloat16)
    got = jnp.array(np.array([1.0, 100.5]), jnp.bfloat16)
    [comparison] = compare(got, want)
    assert comparison.ok and comparison.rtol == 1e-2


@pytest.mark.parametrize("got, want, ok", [
    (complex(float("nan"), 1), complex(float("nan"), 5), False),  # issue 33 row 11
    (complex(float("nan"), 1), complex(1, float("nan")), False),
    (complex(float("nan"), 1), complex(float("nan"), 1), True),
    (complex(1, float("nan")), complex(1, float("nan")), True),
])
def test_nan_in_a_complex_matches_only_nan_in_the_same_part(got, want, ok):
    g = jnp.array([got, 2 + 0j], jnp.complex64)
    w = torch.tensor([want, 2 + 0j], dtype=torch.complex64)
    assert verdicts(g, w) == [("output", ok)]


def test_a_tensor_with_the_negative_bit_is_compared():
    """`x.conj().imag` is a view with torch's negative bit set, which `numpy()` refuses (row 10)."""
    want = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64).conj().imag
    assert want.is_neg()
    assert verdicts(jnp.array([-2.0, 1.0], jnp.float32), want) == [("output", True)]
    assert verdicts(jnp.array([2.0, 1.0], jnp.float32), want) == [("output", False)]
