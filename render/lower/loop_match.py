"""How the segments of a run of statements are one loop body: the names each binds and the next
reads (carried), the integers that step evenly along it, what the code after it reads of every
segment (`loop_outputs`), the def's arguments (`loop_inputs`) and earlier values (`loop_reads`)
each segment reads its own of. Only matching: `loop_making` writes the loop.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import cast

from jaxside.render.ir import Statement
from jaxside.render.lower.clone import clone
from jaxside.render.lower.loop_headers import counting_ints, even_steps
from jaxside.render.lower.loop_inputs import Inputs, layout, own_inputs, read_outside
from jaxside.render.lower.loop_outputs import Collected, Earlier, collected_lists, returned_spans
from jaxside.render.lower.loop_reads import own_reads
from jaxside.render.lower.places import positions


@dataclass
class Pattern:
    """How the segments of a run are one loop body."""

    defined: list[list[str]]
    """The names each segment binds, in order; a name's position `m` is the same in each."""
    carries: dict[int, str]
    """A name the next segment reads (`hidden_states`), by position: the name the first segment
    reads instead (what the loop starts from)."""
    progressions: list[tuple[int, int]]
    """Each integer of a segment (in `counting_ints` order) as (first value, step)."""
    collected: list[Collected]
    """What the code after the run reads of every segment, as one list each (`torch.stack(outputs)`,
    a def's returned run of per-layer cache entries): the lists the loop fills."""
    inputs: Inputs | None = None
    """Parameters of the def each segment reads its own of (a cache passed in): one list zipped in."""
    reads: dict[str, list[str]] = field(default_factory=dict)
    """Values bound before the run each segment reads a different one of (`loop_reads`)."""


def _form(statements: list[Statement]) -> tuple[str, list[tuple[str, str]], list[int], list[str]]:
    """A segment as (skeleton, name uses, integers, names it defines)."""
    module = ast.Module([clone(s.node()) for s in statements], [])
    uses: list[tuple[str, str]] = []
    ints: list[int] = []
    defined: list[str] = []
    counted = {id(node) for node in counting_ints(module)}
    for _, _, _, node in list(positions(module)):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                if node.id != "_":
                    defined.append(node.id)
                    uses.append(("def", str(defined.index(node.id))))
                node.id = "_"
            else:
                uses.append(("def", str(defined.index(node.id))) if node.id in defined else ("ext", node.id))
                node.id = "_"
        elif isinstance(node, ast.Constant) and id(node) in counted:
            ints.append(cast(int, node.value))
            node.value = 0
    return ast.dump(module), uses, ints, defined


def match(
    segments: list[list[Statement]], after: list[ast.stmt], extra: tuple[int, Earlier] | None,
    params: list[str],
) -> Pattern | None:
    """How the segments are one loop body: carried names, integer progressions, the lists the
    code after them reads (`after` ends in the def's return; from `first_extra` on, its items may
    be a run of every segment's values), the `params` each segment reads its own of."""
    forms = [_form(s) for s in segments]
    skeleton, _, ints0, _ = forms[0]
    if any(f[0] != skeleton or len(f[1]) != len(forms[0][1]) or len(f[2]) != len(ints0) for f in forms):
        return None
    defined = [f[3] for f in forms]
    carries: dict[int, str] = {}
    varying: dict[str, list[str]] = {}
    for j in range(1, len(forms)):
        previous = {name: m for m, name in enumerate(defined[j - 1])}
        for k, (use, use0) in enumerate(zip(forms[j][1], forms[0][1])):
            kind, value = use
            if kind == "ext" and value in previous:
                m = previous[value]
                if use0[0] != "ext" or carries.setdefault(m, use0[1]) != use0[1]:
                    return None
                if j > 1 and forms[1][1][k] != ("ext", defined[0][m]):
                    return None
            elif use != use0:
                if kind != "ext" or use0[0] != "ext":
                    return None
                if value not in params or use0[1] not in params:
                    continue  # a value bound before the run (`own_reads`)
                names = varying.setdefault(use0[1], [use0[1]] + [""] * (len(forms) - 1))
                if names[j] not in ("", value):
                    return None
                names[j] = value
    inputs = layout(varying, params)
    if varying and (inputs is None or not own_inputs([f[1] for f in forms], inputs)):
        inputs = None  # then they are values read differently (`own_reads`), or no loop
    reads = own_reads([f[1] for f in forms], defined, carries, inputs)
    if reads is None:
        return None
    progressions = even_steps([f[2] for f in forms])
    if progressions is None:
        return None
    # After the run: only the last segment's values by name, earlier ones only through lists.
    later = ast.Module(after, [])
    bound = {n.id for n in ast.walk(later) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound.update(name for names in defined for name in names)
    collected = collected_lists(later, defined, lambda name: name not in bound)  # read before the run
    last = after[-1] if after else None
    if extra is not None and isinstance(last, ast.Return) and last.value is not None:
        if not any(node is last.value for c in collected for node in c.nodes):
            collected += returned_spans(last.value, *extra[:1], defined, extra[1])
    earlier = {name: m for d in defined[:-1] for m, name in enumerate(d)}
    allowed = {id(n) for c in collected for e in c.elements for n in ast.walk(e)}
    for node in ast.walk(later):
        if isinstance(node, ast.Name) and node.id in earlier and id(node) not in allowed:
            return None
    init_uses = {name for name in carries.values()}
    for f in forms[1:]:
        if any(kind == "ext" and value in init_uses for kind, value in f[1]):
            return None
    if any(isinstance(n, ast.Name) and n.id in init_uses for n in ast.walk(later)):
        return None
    if inputs is not None and read_outside(inputs, after):
        return None
    return Pattern(defined, carries, progressions, collected, inputs, reads)
