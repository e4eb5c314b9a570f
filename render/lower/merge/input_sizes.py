"""Sizes that follow the inputs: an export that runs at every shape the torch model accepts.

`generalize(program, relower)` takes the program lowered from the example inputs and asks for
the same torch code lowered again with the inputs' sizes changed (`relower(resize)`, traced
abstractly, so no value is needed). Where the programs differ only in numbers, each number is
fitted to an expression of its def's arguments' shapes (`x.shape[1]`, `x.shape[0] * 4`,
`x.shape[0] * x.shape[1]`, `x.shape[1] // 2`, `x.shape[1] + 1`) and written with the name the
torch code gave it (`bsz, seqlen, _ = x.shape`); a size the torch code did not name is read
where it is used (`x.shape[2]`).

Input dimensions of equal size move together (the batch of the arguments and of a KV cache).
A set whose change makes the torch code fail, changes the program's structure (a Python branch
or loop on the size) or gives a number no shape explains stays fixed: `Sizes` says why, the
module docstring lists it, and unless the torch code itself refuses other sizes there (a Linear's
features), the entry raises a `ValueError` for another size.

Which sets move is searched for first (`size_search`: fewer parts asked to move, a step at a time,
from every set together, as a refused retrace costs little); where the search cannot tell, each
set is tried alone first (`_set_by_set`). Unifying the programs of an attempt is `size_plans`'s job.
Comparing programs and fitting numbers (`parallel_diff`, `fit`) is `render.lower.merge.fitting`'s
job, shared with `shared_defs`, which does the same for the defs of one function called at other sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxside.render.ir import Dim, Program, Sizes
from jaxside.render.lower.context import LoweringError
from jaxside.render.lower.merge.same_size import same_at_traced
from jaxside.render.lower.merge.size_guards import guard_sizes
from jaxside.render.lower.merge.size_plans import REFUSED, Plan, Unfit, unify
from jaxside.render.lower.merge.size_search import Fixed, search
from jaxside.tracing.trace import Trace

Resize = dict[str, tuple[int, ...]]


def generalize(program: Program, relower: Callable[[Resize], Program]) -> None:
    """Make `program` (lowered from the example inputs) read its sizes from its inputs' shapes,
    where `relower` (the program traced at other sizes) shows they follow them."""
    trace = program.trace
    sets = dim_sets(trace)
    if not sets:  # no tensor argument: nothing to follow
        return
    tries = _Tries(program, relower)
    fixed: Fixed = []
    first = tries.attempt(sets, frozenset())
    holds = held_sets(trace)
    found = search(tries, sets, holds, first, {s.input.name for s in trace.state})
    plan: Plan | str | None
    if found is not None:
        plan, sets, fixed = found
    else:
        plan, sets = _set_by_set(tries, sets, holds, first, fixed)
    if isinstance(plan, str):
        fixed += [(dims, plan) for dims in sets]
        sets = []
    bounded: list[tuple[list[Dim], str]] = []
    if isinstance(plan, Plan):
        sets, plan = _untie(tries, sets, plan)
        plan.apply()
        if plan.below and not same_at_traced(program, plan.program):  # not the traced program at its size
            sets, plan = _without_bounds(tries, sets, plan, fixed)
    if isinstance(plan, Plan):
        bounded = [(sets[k], why) for k, why in sorted(plan.bounded.items())]
        if plan.program is not program:
            _adopt(program, plan.program)
    kept = [dims for dims, why in fixed if not why.startswith(REFUSED)]
    guarded = [d for dims in kept for d in dims if not d.state] + [dims[0] for dims in kept if dims[0].state]
    at_most = [d for dims, _ in bounded for d in dims if not d.state]
    guard_sizes(program, guarded, [[d for d in dims if not d.state] for dims in sets], at_most)
    program.sizes = Sizes(generic=sets, fixed=fixed, bounded=bounded)


def _set_by_set(
    tries: _Tries, sets: list[list[Dim]], holds: list[list[Dim]], first: Plan | str, fixed: Fixed
) -> tuple[Plan | str | None, list[list[Dim]]]:
    """The plan and the sets it moves, each set (and each held set) tried alone first where `first`,
    every set together, is no plan or held sets may join it; the sets left out into `fixed`."""
    plan: Plan | str | None = first
    movable = [(dims, False) for dims in sets] if not isinstance(plan, str) else _alone(tries, sets, fixed)
    held = []  # a cache's length: it moves with no argument, so alone
    for dims in holds:
        alone = tries.either(dims, below=False)  # larger only: a head count torch refuses is no bound
        if isinstance(alone, str):
            fixed.append((dims, alone))
        else:
            held.append((dims, bool(alone.bounded)))
    if isinstance(plan, str) or held:
        every = movable + held
        down = frozenset(k for k, (_, lower) in enumerate(every) if lower)
        together = tries.attempt([dims for dims, _ in every], down) if every else None
        if isinstance(together, str) and not isinstance(plan, str):  # the arguments' sizes, at least
            fixed += [(dims, together) for dims, _ in held]
        else:
            plan, movable = together, every
    return plan, [dims for dims, _ in movable]


def _without_bounds(
    tries: _Tries, sets: list[list[Dim]], plan: Plan, fixed: list[Any]
) -> tuple[list[Any], Any]:
    """The sets `plan` fitted below their traced size fixed (the program written from smaller
    sizes is not the traced one at its size: a branch on the size), the others as the program
    at larger sizes follows them."""
    below = "the program at the traced size is not the one at smaller sizes"
    fixed += [(sets[k], f"{below}; {why}" if why else below) for k, why in plan.bounded.items()]
    sets = [dims for k, dims in enumerate(sets) if k not in plan.bounded]
    again = tries.attempt(sets, frozenset()) if sets else None
    if not isinstance(again, Plan):
        fixed += [(dims, again) for dims in sets if again is not None]
        return [], None
    again.apply()
    return sets, again


def _alone(tries: _Tries, sets: list[list[Dim]], fixed: list[Any]) -> list[tuple[list[Dim], bool]]:
    """Each set tried alone: those the program follows (and whether below their traced size); the
    others into `fixed`, with why. A set whose state buffers keep it fixed (a cache's batch)
    may follow without them."""
    movable = []
    for dims in sets:
        alone = tries.either(dims)
        arguments = [d for d in dims if not d.state]
        if isinstance(alone, str) and arguments and len(arguments) < len(dims):
            apart = tries.either(arguments)
            if not isinstance(apart, str):
                fixed.append(([d for d in dims if d.state], alone))
                dims, alone = arguments, apart
        if isinstance(alone, str):
            fixed.append((dims, alone))
        else:
            movable.append((dims, bool(alone.bounded)))
    return movable


def _untie(tries: _Tries, sets: list[list[Dim]], plan: Plan) -> tuple[list[list[Dim]], Plan]:
    """Every argument dimension a set of its own, when the program follows each alone (a
    non-square image); else the sets as they are, the entry checking that tied sizes are equal."""
    split: list[list[Dim]] = []
    down: set[int] = set()
    for k, dims in enumerate(sets):
        arguments = [d for d in dims if not d.state]
        parts = [[*arguments[:1], *(d for d in dims if d.state)], *([d] for d in arguments[1:])]
        down |= {len(split) + j for j in range(len(parts))} if k in plan.bounded else set()
        split += parts
    if len(split) == len(sets):
        return sets, plan
    alone = tries.attempt(split, frozenset(down))
    return (sets, plan) if isinstance(alone, str) else (split, alone)


def dim_sets(trace: Trace) -> list[list[Dim]]:
    """The entry's argument dimensions by size (in order of first appearance), each with the
    dimensions of state buffers of that size (a KV cache's batch)."""
    state = {s.input.name for s in trace.state}
    arguments = [
        Dim(i.name, axis, int(n)) for i in trace.inputs if i.kind == "arg"
        for axis, n in enumerate(i.var.aval.shape)
    ]
    buffers = [
        Dim(i.name, axis, int(n), state=True) for i in trace.inputs if i.name in state
        for axis, n in enumerate(i.var.aval.shape)
    ]
    sizes = list(dict.fromkeys(d.size for d in arguments if d.size))
    return [[d for d in arguments + buffers if d.size == n] for n in sizes]


def held_sets(trace: Trace) -> list[list[Dim]]:
    """The dimensions of state buffers (a KV cache) of a size no argument has (its length), by size,
    each with the dimensions of that size of buffers the code only reads (the causal mask of that
    length): the model built with a longer cache has them all longer."""
    sizes = {int(n) for i in trace.inputs if i.kind == "arg" for n in i.var.aval.shape}
    state = {s.input.name for s in trace.state}
    held = [
        Dim(i.name, axis, int(n), state=True) for i in trace.inputs
        if i.name in state or i.kind == "buffer" for axis, n in enumerate(i.var.aval.shape)
    ]
    lengths = [d.size for d in held if d.input in state and d.size > 1 and d.size not in sizes]
    lengths = list(dict.fromkeys(lengths))
    held.sort(key=lambda d: d.input not in state)  # a cache's before a mask's
    return [[d for d in held if d.size == n] for n in lengths]


def resized(trace: Trace, sets: list[list[Dim]], sizes: list[int]) -> Resize:
    """Each input's shape with every dimension of `sets[k]` at `sizes[k]`."""
    shapes = {i.name: list(i.var.aval.shape) for i in trace.inputs}
    changed: set[str] = set()
    for dims, size in zip(sets, sizes):
        for d in dims:
            shapes[d.input][d.axis] = size
            changed.add(d.input)
    return {name: tuple(shapes[name]) for name in changed}


def smaller(n: int) -> list[int]:
    """Sizes below `n` to try (none of 1: a size of 1 broadcasts where no other does), halves and
    quarters first (a size the torch code takes in patches of some width keeps its multiples)."""
    found: list[int] = []
    for size in (n // 2, n - n // 4, n // 4, n - 1, n - 2):
        if 1 < size < n and size not in found:
            found.append(size)
    return found[:3]


class _Tries:
    """Attempts at unifying the program at other sizes of sets of its inputs' dimensions, each
    made once (a retrace costs a run of the torch code)."""

    def __init__(self, program: Program, relower: Callable[[Resize], Program]) -> None:
        self.program, self.relower = program, relower
        self.made: dict[tuple[Any, ...], Plan | str] = {}
        self.unfit: dict[tuple[Any, ...], str] = {}
        """Attempts asked only whether they unify, that do not: why, maybe from fewer sizes."""
        self.programs: dict[tuple[Any, ...], Program | str] = {}

    def either(self, dims: list[Dim], below: bool = True) -> Plan | str:
        """The plan for one set at larger sizes, else (`below`) at smaller ones (its traced size is
        a bound, as a sequence traced at a model's `block_size`: the plan says why in `bounded`)."""
        up = self.attempt([dims], frozenset())
        if not isinstance(up, str) or not below or len(smaller(dims[0].size)) < 2:
            return up
        down = self.attempt([dims], frozenset({0}), plan_only=True)  # why not: `up` says
        return up if isinstance(down, str) else down

    def attempt(self, sets: list[list[Dim]], down: frozenset[int], plan_only: bool = False) -> Plan | str:
        """The plan unifying the program at three sizes of `sets`, or why there is none.

        A set goes up from its traced size n (n, 2n, (3 + k)n; the k-th set) or, in `down`, below
        it (n and two of `smaller(n)`; when the program at n is not the one at smaller sizes, as
        a slice `bias[:, :, :T, :T]` that takes everything is no equation, three smaller sizes
        and the program at the first is written: it computes the same at n, which `--check`
        compares). A size of 1 broadcasts where no other does (torch and jnp bind nothing for an
        identity broadcast), so sets traced at 1 are unified at 2, 3 and 4, ..., and the program
        at 2 is the one written: it computes the same at 1.

        With `plan_only` (the caller reads no reason), the last size is not traced where the
        programs at the others already cannot be one (`Unfit.more`): the reason is theirs."""
        key = (tuple(tuple(map(str, dims)) for dims in sets), down)
        if key in self.made or plan_only and key in self.unfit:
            return self.made[key] if key in self.made else self.unfit[key]
        plan = self._unify(sets, _rows(sets, down, False), plan_only)
        if isinstance(plan, str) and down and all(len(smaller(sets[k][0].size)) == 3 for k in down):
            below = self._unify(sets, _rows(sets, down, True), plan_only)
            if isinstance(below, Plan):
                plan, below.below = below, True
        if not isinstance(plan, str):
            ups = {k: self.attempt([sets[k]], frozenset()) for k in down}
            plan.bounded = {k: up if isinstance(up, str) else "" for k, up in ups.items()}
        if plan_only and isinstance(plan, str):
            self.unfit[key] = plan
        else:
            self.made[key] = plan
        return plan

    def _unify(self, sets: list[list[Dim]], rows: list[list[int]], plan_only: bool = False) -> Plan | str:
        programs: list[Program] = []
        for row in rows:
            if plan_only and len(programs) == len(rows) - 1 > 1:
                try:  # the programs so far: not one with any other either
                    unify(programs[0], programs[1:])
                except Unfit as error:
                    if error.more:
                        return str(error)
            found = self._at(sets, row)
            if isinstance(found, str):
                return found
            programs.append(found)
        try:
            return unify(programs[0], programs[1:])
        except Unfit as error:
            return str(error)

    def _at(self, sets: list[list[Dim]], row: list[int]) -> Program | str:
        """The program with each set at its size in `row`, or why there is none."""
        if all(size == dims[0].size for dims, size in zip(sets, row)):
            return self.program
        traced = {i.name: tuple(i.var.aval.shape) for i in self.program.trace.inputs}
        # Only what changes: the same sizes asked for by other sets (an attempt of the arguments'
        # sets and one with a cache's length too, both at its traced length) are one retrace.
        resize = {name: shape for name, shape in resized(self.program.trace, sets, row).items()
                  if shape != traced[name]}
        key = tuple(sorted(resize.items()))
        if key not in self.programs:
            sizes = ", ".join(f"{dims[0]} = {size}" for dims, size in zip(sets, row) if size != dims[0].size)
            try:
                self.programs[key] = self.relower(resize)
            except LoweringError as error:
                self.programs[key] = f"the program at {sizes} cannot be written ({_first_line(error)})"
            except Exception as error:  # the torch code (or JAX) refused the sizes: they are fixed
                self.programs[key] = f"{REFUSED} {sizes} ({_refusal(self.program.trace, sets, error)})"
        return self.programs[key]


def _rows(sets: list[list[Dim]], down: frozenset[int], below: bool) -> list[list[int]]:
    """The size of each set in the three programs unified, the first the one written (see
    `_Tries.attempt`)."""
    columns = []
    for k, dims in enumerate(sets):
        n = dims[0].size
        if k in down:
            columns.append(smaller(n) if below else [n, *smaller(n)[:2]])
        else:
            columns.append([2, 3, 4 + k] if n == 1 else [n, 2 * n, (3 + k) * n])
    return [list(row) for row in zip(*columns)]


def _refusal(trace: Trace, sets: list[list[Dim]], error: Exception) -> str:
    """Why the torch code refused the sizes, in plain words where a parameter has the size (a
    Linear's `in_features`, an RNN's hidden size), else the error's first line."""
    if len(sets) == 1:
        size = sets[0][0].size
        for item in trace.inputs:
            shape = tuple(item.var.aval.shape) if item.kind == "param" else ()
            if size > 1 and size in shape:
                return f"{size} is the size of a parameter, `{item.name}.shape[{shape.index(size)}]`"
    return _first_line(error)


def _first_line(error: Exception, limit: int = 160) -> str:
    line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0] + " ..."


def _adopt(program: Program, other: Program) -> None:
    """`program` written as `other` (the same code traced at other sizes), still of its own trace."""
    for name in ("functions", "helpers", "constants", "entry", "arg_names", "param_paths", "state_paths"):
        setattr(program, name, getattr(other, name))
