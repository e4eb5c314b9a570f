"""Lower a `Trace` to a `Program`: one def per distinct call of user code, values named after torch.

    program = lower(trace)
    program.functions            # entry first, then in call order; each with `.body` statements

Calls of the same code with the same structure (layer 0..N-1) share one `Function`; module
methods read their module's params subtree (`params["wqkv"]["weight"]`), buffers written in
place come in as `state` and go out as new state.  Runs of identical calls become loops, so
the program does not grow with the number of layers.  Every equation is rendered by
`render.rules`; nothing here changes what is computed, only where and under which name.

The steps, each in its module: `context` (cleaned equations, uses, roles), `calltree` (nodes,
hoisting, grouping by signature), `calldef` (one def per group, on the base writer in `body`),
`merge.shared_defs` (defs that differ only in numbers or branches merged), `loops` (runs of calls
rolled back), and with a way to trace again, `merge.input_sizes` (sizes as expressions of the inputs'
shapes), then `unfold`
(a call that makes its statement sprawl named on a line of its own), and last `rebinding` (a
rebound name reused where its old value is dead: `k = k.reshape(...)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from jaxside.render import names as naming
from jaxside.render.ir import Function, Program
from jaxside.render.lower.attributes import name_config
from jaxside.render.lower.calldef import CallDef
from jaxside.render.lower.calltree import CallTree
from jaxside.render.lower.context import Context
from jaxside.render.lower.loops import reroll
from jaxside.render.lower.merge.input_sizes import Resize, generalize
from jaxside.render.lower.merge.shared_defs import merge_variants
from jaxside.render.lower.rebinding import reuse_names
from jaxside.render.lower.unfold import unfold
from jaxside.tracing.trace import Trace

Progress = Callable[[str], None]
"""Told how far a lowering has got (``def 12 of 30``), often: it decides what to show."""


def lower(
    trace: Trace, retrace: Callable[[Resize], Trace] | None = None, progress: Progress | None = None
) -> Program:
    """The program for `trace`: defs for its call tree, statements for its equations.

    With `retrace` (the same torch code traced with some inputs resized), sizes that follow the
    inputs are written as expressions of their shapes (`render.lower.merge.input_sizes`).
    `progress`, if given, hears each step of each lowering."""
    program = _lower(trace, progress)
    if retrace is not None and trace.frontend == "torch":
        generalize(program, lambda resize: _lower(retrace(resize), progress))
    if trace.frontend == "torch":
        program.config = name_config(program, naming.function_name)
    for function in program.functions:
        unfold(function)
    for function in program.functions + program.helpers:
        reuse_names(function)
    return program


def _lower(trace: Trace, progress: Progress | None = None) -> Program:
    say = progress or (lambda text: None)
    equations = f"{len(trace.jaxpr.jaxpr.eqns):,} equations"
    say(f"reading {equations}")
    ctx = Context(trace, say)
    say(f"the call tree of {equations}")
    tree = CallTree(ctx)
    root = tree.root
    say("values computed for several calls, hoisted")
    tree.hoist(root)
    say("calls grouped by what they compute")
    groups = tree.group(root)
    built = 0
    entry_base = "forward" if ctx.roles.module_entry else naming.function_name(root.call.function)
    entry_name = ctx.module.scope.fresh(entry_base, "local")
    for height in sorted({g.height for g in groups}):
        level = [g for g in groups if g.height == height]
        for group in level:
            built += 1
            say(f"def {built} of {len(groups)} ({equations})")
            CallDef(ctx, tree, group).build()
        kinds = merge_variants(level)
        for group in level:
            function = group.function
            assert function is not None
            if function.name == "":
                is_entry = group.nodes[0] is root
                function.name = (
                    entry_name
                    if is_entry
                    else ctx.module.scope.fresh(
                        naming.function_name(group.nodes[0].call.function) + kinds.get(id(function), ""),
                        "local",
                    )
                )
    functions: list[Function] = []
    for node in root.walk():
        function = node.group.function if node.group else None
        if function is not None and function not in functions:
            functions.append(function)
    say(f"loops in {len(functions)} defs")
    for function in reversed(functions):  # callees first: a rolled def may return a list to its callers
        reroll(ctx, function, functions)
        function.doc = _docstring(function)
    entry = root.group.function if root.group is not None else None
    assert entry is not None  # the root's group is written first
    arg_names = entry.params[int(entry.calling.uses_params) + int(entry.calling.uses_state) :]
    return Program(
        trace=trace,
        functions=functions,
        helpers=ctx.module.helpers,
        constants=ctx.module.constants,
        entry=entry,
        arg_names=arg_names,
        param_paths=[
            i.name for i in trace.inputs if i.kind != "arg" and i.name not in ctx.roles.state_final
        ],
        state_paths=list(ctx.roles.state_final),
        fallbacks=ctx.module.fallbacks,
    )


def _docstring(function: Function) -> str:
    first = function.calls[0]
    where = f"`{first.function}`, {os.path.basename(first.file)}"  # `we\ird.py` is one name on POSIX
    if first.line:  # line 0: a transformation of the code (`jax.grad(f)`), not a def of its own
        where += f":{first.line}"
    paths = [c.module_path for c in function.calls if c.module_path]
    if len(function.calls) == 1:
        return where + (f", for `{paths[0]}`." if paths else ".")
    span = ""
    if len(paths) == len(function.calls):
        span = f" of `{paths[0]}`" if len(set(paths)) == 1 else f": `{paths[0]}` ... `{paths[-1]}`"
    text = f"{where}, for {len(function.calls)} calls{span}."
    if len(text) <= 80:
        return text
    return f"{where}.\n\nShared by {len(function.calls)} calls{span}."
