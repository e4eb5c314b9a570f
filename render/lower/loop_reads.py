"""Values made before a rolled run that its iterations each read a different one of: Gemma 2's
layers alternate a sliding-window mask and a full one (`causal_mask_mapping[decoder_layer.
attention_type]`), so layer 0 reads `sliding_mask`, layer 1 `causal_mask`, .... The loop goes over
one list of them, built before it and zipped with the layers (`attention_masks = [sliding_mask,
causal_mask, ...]`, `for decoder_layer, attention_mask in zip(params["layers"], attention_masks)`):
each iteration reads exactly the value its segment read, so nothing changes but the length.
"""

from __future__ import annotations

import ast

from jaxside.render.ir import Function, Statement, named
from jaxside.render.lower.loop_inputs import Inputs, zip_with
from jaxside.render.names import Scope
from jaxside.tracing.trace import Site

Uses = list[tuple[str, str]]
"""A segment's name uses in order: `("def", position)` for a name it bound, `("ext", name)` else."""


def own_reads(
    uses: list[Uses], defined: list[list[str]], carries: dict[int, str], inputs: Inputs | None
) -> dict[str, list[str]] | None:
    """By the name segment 0 reads, the name each segment reads in its place, for the names read
    differently across the segments; None if a difference is none of: a carry (segment j reads
    what segment j - 1 bound), one of the def's own `inputs`, or a value bound before the run
    each segment reads consistently in one place of segment 0's."""
    bound = {name for names in defined for name in names}
    inits = set(carries.values())
    taken = {name for names in inputs.slots for name in names} if inputs is not None else set()
    reads: dict[str, list[str]] = {}
    for j in range(1, len(uses)):
        previous = set(defined[j - 1])
        for (kind, value), (kind0, value0) in zip(uses[j], uses[0]):
            if kind0 != "ext" or value0 in taken:
                continue
            if value0 in inits:
                if value != value0 and value not in previous:
                    return None  # (checked by the caller: the carry's own read)
                continue
            if kind != "ext" or value in bound:
                return None
            names = reads.setdefault(value0, [value0] + [""] * (len(uses) - 1))
            if names[j] not in ("", value):
                return None
            names[j] = value
    return {first: names for first, names in reads.items() if any(n != first for n in names)}


def zip_reads(
    function: Function, reads: dict[str, list[str]], module: ast.Module, header: tuple[ast.expr, ast.expr],
    argument_names: dict[str, str], site: Site | None,
) -> tuple[ast.expr, ast.expr, list[Statement]]:
    """The loop's header with one list per value read differently zipped in, the statements that
    build the lists (before the loop); in `module` (segment 0's body) each such read reads the
    loop's element of the list. An element is named as the parameter it is passed as
    (`argument_names`: by segment 0's name), if any."""
    target, iterable = header
    lists: list[Statement] = []
    scope: Scope = function.scope
    for first, names in reads.items():
        element = scope.fresh(argument_names.get(first) or first, "loop")
        name = scope.fresh(f"{element}s", "local")
        lists.append(Statement([name], ast.List([named(n) for n in names], ast.Load()), [], site))
        target, iterable = zip_with(target, iterable, named(element, ast.Store()), named(name))
        for node in ast.walk(module):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id == first:
                node.id = element
    return target, iterable, lists


def argument_names(call: ast.expr, callee: Function | None) -> dict[str, str]:
    """The parameter of `callee` each name `call` passes it is passed as (`attention_mask` for
    `sliding_mask`)."""
    if callee is None or not isinstance(call, ast.Call):
        return {}
    found = {a.id: p for a, p in zip(call.args, callee.params) if isinstance(a, ast.Name)}
    found.update({k.value.id: k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.arg})
    return found
