"""Which port value stands for a torch value that no port value equals: of the port's values
computed from its nearest paired ancestors, the first that is neither another torch value nor
a later step's mask; the port's value before its mask where the port skipped a step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def fill_limit(dtype: np.dtype[Any]) -> float:
    """How large a value is a mask's fill rather than a number: 1e9, or half a narrow float's range."""
    return min(1e9, float(np.finfo(dtype).max) / 2) if dtype.kind == "f" else np.inf


def constant(value: np.ndarray) -> bool:
    """Every element the same number (all zeros after a relu of negatives): equal to too much."""
    flat = value.reshape(-1)
    return flat.size > 1 and bool(np.all(flat == flat[0]))


class TorchValues:
    """Whether a port value equals some value torch computed, a checkpoint or not (the halves of
    transformers' `rotate_half`, which torchax slices again inside the `cat` that reads them): such
    a value is that torch value, a step that agrees, never the counterpart of another that differs."""

    def __init__(self, values: dict[Any, np.ndarray], equal: Callable[[np.ndarray, np.ndarray], bool],
                 rtol: float, atol: float):
        self.equal, self.rtol, self.atol = equal, rtol, atol
        self.groups: dict[tuple[int, str], list[tuple[float, np.ndarray]]] = {}
        for value in values.values():
            if value.dtype.kind in "fc" and not constant(value):
                self.groups.setdefault((value.size, value.dtype.str), []).append((_magnitude(value), value))
        self.known: dict[int, bool] = {}

    def holds(self, value: np.ndarray) -> bool:
        """`value` equals a torch value (in row-major order or with its axes reordered)."""
        if id(value) not in self.known:
            self.known[id(value)] = self._find(value)
        return self.known[id(value)]

    def _find(self, value: np.ndarray) -> bool:
        total = _magnitude(value)
        for other, theirs in self.groups.get((value.size, value.dtype.str), []):
            # Equal within tolerance element by element, in any order of the axes, bounds how far the
            # sums of magnitudes part: most values are told apart by that alone.
            slack = value.size * self.atol + (self.rtol + 1e-9) * (other + total)
            if abs(other - total) <= slack and self.equal(theirs, value):
                return True
        return False


def choose(var: Any, torch: Any, port: Any, below: list[Any], known: TorchValues, before: list[Any],
           following: Callable[[Any], set[Any]]) -> Any | None:
    """The counterpart of torch's `var` among `below` (unpaired port values computed from the port
    partners of its nearest paired ancestors, in the port's order): the first that is no torch value
    (`known`). One with more mask fills than torch's, as many as a torch value it `following`ly
    makes has (the scores masked where torch has yet to scale them, then masks them), holds that
    next step: the port skipped this one, and its value before the mask, the last of `before` (the
    ancestors' partners, in the port's order) of `var`'s size and dtype, stands for it."""
    value = torch.values[var]
    for candidate in below:
        theirs = port.values[candidate]
        if known.holds(theirs):
            continue
        count = _fills(theirs)
        if count > _fills(value) and count in {_fills(torch.values[t]) for t in following(var)
                                               if torch.values[t].size == value.size}:
            skipped = [p for p in before if port.values[p].size == value.size
                       and port.values[p].dtype == value.dtype and _fills(port.values[p]) <= _fills(value)]
            return skipped[-1] if skipped else candidate
        return candidate
    return None


def following(var: Any, eqns: Any, consumers: dict[Any, list[int]], checkpoints: set[Any]) -> set[Any]:
    """The checkpoints torch computes from `var` next: reached through no other checkpoint (the
    masked scores after the scaled ones, never a later layer's)."""
    found: set[Any] = set()
    stack, seen = [var], {var}
    while stack:
        for index in consumers.get(stack.pop(), ()):
            for out in eqns[index].outvars:
                if out in seen:
                    continue
                seen.add(out)
                (found.add if out in checkpoints else stack.append)(out)
    return found


def _fills(value: np.ndarray) -> int:
    """How many elements are a mask's fill: infinities, or beyond `fill_limit`."""
    if value.dtype.kind != "f":
        return 0
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(np.abs(value) >= fill_limit(value.dtype)))


def _magnitude(value: np.ndarray) -> float:
    """The sum of the magnitudes of the numbers that are no mask's fill (NaN left out too)."""
    flat = np.abs(value.reshape(-1).astype(np.float64))
    with np.errstate(invalid="ignore"):
        return float(flat[flat < fill_limit(value.dtype)].sum())
