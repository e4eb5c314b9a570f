"""Whether a program written from other sizes computes, at the traced sizes, what the traced one does.

A sequence traced at its bound (`T == block_size`) is fitted from programs at smaller sizes, and
the one at the first is written (`render.lower.merge.input_sizes`). Both are run under `jax.make_jaxpr` at
the traced shapes: where they stage the very same jaxpr (a slice that takes the whole buffer
binds nothing, so `bias[:, :, :T, :T]` stages what the traced program's `bias` does), the
written program is the traced one at that size. Where they differ (a Python branch on the size
that the smaller sizes all took the other way), it is not.
"""

from __future__ import annotations

import ast
from typing import Any

import jax

from jaxside.render.ir import Program

_IMPORTS = "import jax\nimport jax.numpy as jnp\nimport numpy as np\nfrom jax import lax\n"


def same_at_traced(traced: Program, written: Program) -> bool:
    """Whether `written` stages the jaxpr `traced` stages, at `traced`'s trace's input shapes."""
    staged = [_staged(program, traced) for program in (traced, written)]
    return staged[0] is not None and staged[0] == staged[1]


def _staged(program: Program, traced: Program) -> str | None:
    """The text of the jaxpr `program`'s entry stages at the traced shapes; None when it cannot
    be called so (an argument that is a pytree of a cache object, a random key)."""
    trace = traced.trace
    state = {s.input.name for s in trace.state}
    params: dict[str, Any] = {}
    held: dict[str, Any] = {}
    arguments: dict[str, Any] = {}
    for item in trace.inputs:
        struct = jax.ShapeDtypeStruct(tuple(item.var.aval.shape), item.var.aval.dtype)
        if item.kind == "arg":
            if not item.name.isidentifier():
                return None
            arguments[item.name] = struct
        else:
            _put(held if item.name in state else params, item.name, struct)
    trees = ((params, program.takes_params), (held, program.takes_state))
    given = [_lists(tree) for tree, takes in trees if takes]
    names = program.entry.params[len(given):]
    if any(name not in arguments for name in names):
        return None
    nodes: list[ast.stmt] = [
        ast.Assign([ast.Name(n, ast.Store())], v, lineno=0) for n, v in program.constants
    ]
    nodes += [f.node() for f in program.functions + program.helpers]
    source = _IMPORTS + ast.unparse(ast.fix_missing_locations(ast.Module(nodes, [])))
    namespace: dict[str, Any] = {}
    try:
        exec(compile(source, "<the program at the traced sizes>", "exec"), namespace)  # our own code
        return str(jax.make_jaxpr(namespace[program.entry.name])(*given, *(arguments[n] for n in names)))
    except Exception:  # it does not run at the traced sizes: not the traced program
        return None


def _put(tree: dict[str, Any], path: str, leaf: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[last] = leaf


def _lists(node: Any) -> Any:
    """Dicts keyed 0..n-1 as lists, as the export's `load_params` lays them out."""
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node) and sorted(map(int, node)) == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}
