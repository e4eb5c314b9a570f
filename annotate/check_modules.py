"""``--check`` of a class-style export (``--style nnx``, ``--style equinox``): the module is built with
its own `from_torch` from the torch module, called under `jax.jit`, and its outputs and new state
(NNX `Cache` variables, Equinox `State`) come back in the shape `annotate.check.check` compares.
"""

from __future__ import annotations

import types
from typing import Any

from jaxside.annotate.check import Runner, entry_inputs, run_jitted
from jaxside.render.ir import Program

__all__ = ["runner"]


def runner(style: str) -> Runner | None:
    """How ``--check`` runs an export of `style` (None: the functional export's own way)."""
    return {"nnx": _run_nnx, "equinox": _run_equinox}.get(style)


def _inputs(module: types.ModuleType, program: Program, fn: Any, args: tuple, kwargs: dict) -> list[Any]:
    return entry_inputs(module, program, fn, args, kwargs, weights=False)


def _at(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = model[int(part)] if part.isdecimal() and not hasattr(model, part) else getattr(model, part)
    return model


def _tree(values: dict[str, Any]) -> dict[str, Any]:
    """Values by dotted path as nested dicts (list positions as string keys, read back by `_at_dotted`)."""
    tree: dict[str, Any] = {}
    for path, value in values.items():
        *parents, leaf = path.split(".")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return _lists(tree)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdecimal() for k in node) and sorted(map(int, node)) == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}


def _run_nnx(module: types.ModuleType, program: Program, fn: Any, args: tuple,
             kwargs: dict) -> tuple[Any, Any]:
    from flax import nnx

    model = module.from_torch(fn)  # before torch runs: it may write its buffers
    inputs = _inputs(module, program, fn, args, kwargs)
    graphdef, state = nnx.split(model)

    def call(state: Any, *inputs: Any) -> Any:
        model = nnx.merge(graphdef, state)
        return model(*inputs), nnx.state(model)

    outputs, after = run_jitted(call, [state, *inputs])
    if not program.takes_state:
        return outputs, None
    model = nnx.merge(graphdef, after)
    return outputs, _tree({path: _at(model, path)[...] for path in program.state_paths})


def _run_equinox(module: types.ModuleType, program: Program, fn: Any, args: tuple,
                 kwargs: dict) -> tuple[Any, Any]:
    import equinox as eqx

    built = module.from_torch(fn)
    inputs = _inputs(module, program, fn, args, kwargs)
    model, state = built if isinstance(built, tuple) else (built, None)
    arrays, static = eqx.partition(model, eqx.is_array)

    def call(arrays: Any, state: Any, *inputs: Any) -> Any:
        model = eqx.combine(arrays, static)
        return model(*inputs) if state is None else model(*inputs, state)

    result = run_jitted(call, [arrays, state, *inputs])
    if state is None:
        return result, None
    outputs, after = result
    return outputs, _tree({path: after.get(_at(model, path)) for path in program.state_paths})
