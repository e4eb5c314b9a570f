"""Rolling repeated calls back into the loops the torch code had: `for layer in layers` (and,
through `comprehensions`, `[expert(x) for expert in experts]`).

A run of statements that are identical up to the names they bind, integers that step evenly
(`params["layers"][0]`, `[1]`, ...) and the def's arguments each reads its own of (a cache passed
in: `loop_inputs`) is the unrolled trace of one loop; writing the loop again runs the same
operations in the same order, so nothing changes but the length. What the code after the run reads
of every iteration the loop collects into lists (`loop_outputs`).
"""

from __future__ import annotations

import ast

from jaxside.render.ir import Function, Loop, Statement
from jaxside.render.lower.comprehensions import reroll_lists
from jaxside.render.lower.context import Context
from jaxside.render.lower.loop_inputs import call_statements, input_lengths, pass_as_list, read_outside
from jaxside.render.lower.loop_making import Plan, make_loop
from jaxside.render.lower.loop_match import match
from jaxside.render.lower.loop_outputs import adapt_callers, made_before, plain_callers, reorder_callers


def reroll(ctx: Context, function: Function, functions: list[Function]) -> None:
    """Roll runs of identical call statements (layer 0..N-1) back into loops, and lists of
    identical calls (`[expert(x) for expert in experts]`) back into comprehensions. A statement
    that holds a call of one of `functions` inside it (`x = block_forward(...) * gates[0]`) counts.

    Run on callees before their callers: a def whose returned run of per-segment values becomes
    one list changes how its callers (still unrolled then) unpack it."""
    defs = frozenset(f.name for f in functions)
    body = function.body
    done = 0
    first_extra = _first_extra(function, functions)
    params = function.params if function is not functions[0] else []  # the entry's are the user's
    while True:
        plan = _find_run(body, done, function.returns, defs, first_extra, params, function.value_shapes)
        if plan is None:
            break
        if plan.pattern.inputs is not None and not call_statements(functions, function):
            params = []  # a call the list cannot be passed to: no loop takes the inputs
            continue
        old_returns = function.returns
        loop, before = make_loop(ctx, function, body, plan, functions)
        body[plan.start : plan.end] = [*before, loop]
        done = plan.start + len(before) + 1
        for collected, base in zip(plan.pattern.collected, plan.bases):
            if collected.span is not None and isinstance(old_returns, ast.Tuple):
                reorder_callers(functions, function, collected)
                adapt_callers(functions, function, collected.span, plan.count + len(collected.prefix), base)
                first_extra = None  # the returned items are no longer the callers' flat run
        if plan.pattern.inputs is not None:
            lengths = input_lengths(functions[0], [i.name for i in ctx.trace.inputs if i.kind == "arg"])
            pass_as_list(functions, function, plan.pattern.inputs, functions[0], lengths)
    for statement in body:
        reroll_lists(ctx, function, statement)
    function.body = body


def _calls_of(statement: Statement, defs: frozenset[str]) -> str | None:
    if statement.when is not None:
        return None  # under a flag of its def: not rolled (a loop of it would need its `if`)
    if statement.call is not None and isinstance(statement.value, ast.Call):
        func = statement.value.func
    else:  # a call folded into the statement's expression
        inner = [n.func for n in ast.walk(statement.value) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id in defs]
        if not inner:
            return None
        func = inner[0]
    site = statement.site
    where = (site.file, site.line, site.col) if site else None
    return repr((ast.dump(func), where))


def _first_extra(function: Function, functions: list[Function]) -> int | None:
    """Where the values a def hands its callers beside what torch returned (`function.calling.
    out_slots`) start among its returned items, if every caller unpacks them to names."""
    slots = function.calling.out_slots
    returns = function.returns
    if not slots or not isinstance(returns, ast.Tuple) or not plain_callers(functions, function):
        return None
    return len(returns.elts) - len(slots)


def _find_run(
    body: list[Statement], done: int, returns: ast.expr | None, defs: frozenset[str], first_extra: int | None,
    params: list[str], shapes: dict[str, tuple[int, ...]],
) -> Plan | None:
    anchors: dict[str, list[int]] = {}
    for index in range(done, len(body)):
        key = _calls_of(body[index], defs)
        if key is not None:
            anchors.setdefault(key, []).append(index)
    for calls in sorted(anchors.values()):
        if len(calls) < 2:
            continue
        length = calls[1] - calls[0]
        if any(b - a != length for a, b in zip(calls, calls[1:])):
            continue
        for offset in range(length):
            start = calls[0] - offset
            if start < done or start + len(calls) * length > len(body):
                continue
            segments = [body[start + j * length : start + (j + 1) * length] for j in range(len(calls))]
            if any(s.when is not None or isinstance(s, Loop) for segment in segments for s in segment):
                continue  # a statement under a flag, or a loop already: the body would lose its `if`
            after = [s.node() for s in body[start + len(calls) * length :]]
            if returns is not None:
                after.append(ast.Return(returns))
            extra = None
            if returns is not None and first_extra is not None:
                extra = (first_extra, made_before(body, start, shapes))
            pattern = match(segments, after, extra, params)
            if pattern is not None and pattern.inputs is not None:
                if read_outside(pattern.inputs, [s.node() for s in body[:start]]):
                    continue
            if pattern is not None:
                return Plan(start, len(calls), length, offset, pattern)
    return None
