"""Which sizes move: the search `input_sizes.generalize` makes first, ordered so the first programs
that unify are the ones written.

A retrace the torch code refuses costs a fraction of one it takes (torch stops at the first op that
does not fit), and one it takes is a capture and a lowering. So when the sets of input dimensions
moved all together are refused (a KV cache's head count tied to the sequence by equal size, a head
width no argument has), the search asks for fewer of them to move, a step at a time, and takes the
first attempt that unifies: a set's state ties released (the sequence without the cache's heads),
a held set (a cache's length) left where traced, a set left fixed; refused attempts cost little.

What it finds is then checked the way the set-by-set way (`input_sizes`) decides: each part left
out must fail alone, and its failure alone is the reason the module gives for it. Where one does
not fail alone, or an attempt fails other than by a refusal (a branch on the size: two captures
and lowerings each), or too many are refused, the search gives up and the set-by-set way decides.
A part that moves in the attempt found is taken to move alone too (as it does with the others).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Protocol

from jaxside.render.ir import Dim
from jaxside.render.lower.merge.size_plans import REFUSED, Plan

Fixed = list[tuple[list[Dim], str]]
TRIED = 8
"""Refused attempts the search makes before the set-by-set way decides."""
ORDERED = 4096
"""Ways to move the parts beyond which the search is not made (models with dozens of cache widths)."""


class Attempts(Protocol):
    """`input_sizes._Tries`: the program at other sizes of some sets, unified, each attempt once."""

    def attempt(self, sets: list[list[Dim]], down: frozenset[int]) -> Plan | str: ...

    def either(self, dims: list[Dim], below: bool = True) -> Plan | str: ...


@dataclass
class _Part:
    """A set that may move: an argument set (level 0 all of it, 1 its arguments only, its state
    buffers fixed, 2 none of it) or a held set (0 moves, 1 fixed)."""

    dims: list[Dim]
    held: bool

    @property
    def arguments(self) -> list[Dim]:
        return [d for d in self.dims if not d.state]

    def levels(self) -> int:
        released = not self.held and len(self.arguments) < len(self.dims)
        return 3 if released else 2

    def moving(self, level: int) -> list[Dim] | None:
        if level == 0:
            return self.dims
        return self.arguments if level == 1 and self.levels() == 3 else None


def search(
    tries: Attempts, sets: list[list[Dim]], holds: list[list[Dim]], first: Plan | str, state: set[str]
) -> tuple[Plan, list[list[Dim]], Fixed] | None:
    """The plan, the sets it moves and the others fixed with why, as the set-by-set way finds them,
    or None where the search cannot tell (see the module docstring). `first` is the attempt of
    every set of `sets` together; `state`, the inputs the code writes (the held sets' other buffers
    it only reads)."""
    if isinstance(first, str) and not first.startswith(REFUSED) or not isinstance(first, str) and not holds:
        return None
    parts = [] if not isinstance(first, str) else [_Part(dims, False) for dims in sets]
    parts += [_Part(dims, True) for dims in holds]
    if math.prod(part.levels() for part in parts) > ORDERED:
        return None
    failed: list[tuple[int, ...]] = []
    if isinstance(first, str):  # every set but no held one: moving more than that is refused too
        failed.append(tuple(0 if not part.held else 1 for part in parts))
    for levels in _ordered(parts, state):
        if any(all(a <= b for a, b in zip(levels, refused)) for refused in failed):
            continue  # moves all that a refused attempt moved
        moving = [dims for part, level in zip(parts, levels) if (dims := part.moving(level))]
        if not isinstance(first, str):  # the arguments' sets all move (`first`), held ones after
            moving = sets + moving
        if not moving:
            return None
        found = tries.attempt(moving, frozenset()) if moving != sets else first
        if isinstance(found, Plan):
            fixed = _left_out(tries, parts, levels)
            return None if fixed is None else (found, moving, fixed)
        if not found.startswith(REFUSED) or len(failed) >= TRIED:
            return None
        failed.append(levels)
    return None


def _ordered(parts: list[_Part], state: set[str]) -> list[tuple[int, ...]]:
    """The levels of `parts` to try, fewest steps down first; among as many, a set's state ties
    released before a held set is left out, later sets before earlier ones (the first dimension
    of the first argument, its batch, is the one a cache is built for), a held set only the state
    has before one that buffers the code only reads share too (a causal mask of the cache's
    length), and a whole set left out last."""
    def rank(k: int, step: int) -> tuple[int, int]:
        part = parts[k]
        if part.held:
            kind = 1 if all(d.input in state for d in part.dims) else 2
        else:
            kind = 0 if step == 1 and part.levels() == 3 else 3
        return kind, -k

    def key(levels: tuple[int, ...]) -> tuple[int, list[tuple[int, int]]]:
        steps = [rank(k, step) for k, level in enumerate(levels) for step in range(1, level + 1)]
        return len(steps), sorted(steps)

    every = itertools.product(*(range(part.levels()) for part in parts))
    return sorted(every, key=key)


def _left_out(tries: Attempts, parts: list[_Part], levels: tuple[int, ...]) -> Fixed | None:
    """Each part `levels` leaves out with why, from its attempt alone (what the set-by-set way
    gives); None if one moves alone after all."""
    fixed: Fixed = []
    for part, level in zip(parts, levels):
        if level == 0:
            continue
        alone = tries.either(part.dims, below=not part.held)  # a held set: larger only, as there
        if not isinstance(alone, str):
            return None
        if level == 1 and part.levels() == 3:
            fixed.append(([d for d in part.dims if d.state], alone))
            continue
        if part.levels() == 3 and not isinstance(tries.either(part.arguments), str):
            return None
        fixed.append((part.dims, alone))
    return fixed
