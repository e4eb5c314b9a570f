"""Ports that keep their weights in module objects: Flax NNX, Flax Linen and Equinox.

Each becomes a `ModulePort`: its arrays as `Leaf`s under dotted paths (`layers.0.attention.q_proj.kernel`)
and a pure function from leaf values and the torch inputs to the output and the new state (KV caches).
A framework is looked at only when the port file imported it, so review never needs one installed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxside.annotate.review.fit import Leaf

FRAMEWORKS = ("flax", "equinox")
"""Top-level packages of the frameworks review adapts (the `review` extra installs them)."""


@dataclass
class ModulePort:
    framework: str
    name: str
    leaves: list[Leaf]
    own: dict[str, Any]
    """Every leaf's value in the port as built: what unmapped state (caches, counters) keeps."""
    call: Callable[[dict[str, Any], tuple], Any]
    """(leaf values by path, torch inputs) -> (output, new state leaves by path)."""


def module_port(value: Any, data: tuple) -> ModulePort | None:
    """The port `value` is: an NNX or Equinox module, a Linen module (initialised on `data` when
    no variables come with it), or a pair (Linen module, variables) / (Equinox module, state)."""
    first, second = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and second is None and isinstance(first, nnx.Module):
        return _nnx_port(nnx, first)
    linen = sys.modules.get("flax.linen")
    if linen is not None and isinstance(first, linen.Module):
        import jax

        variables = second if second is not None else first.init(jax.random.key(0), *data)
        return _linen_port(first, variables)
    eqx = sys.modules.get("equinox")
    if eqx is not None and isinstance(first, eqx.Module):
        return _equinox_port(eqx, first, second)
    return None


def _is_float(value: Any) -> bool:
    import jax.numpy as jnp

    dtype = getattr(value, "dtype", None)
    return dtype is not None and hasattr(value, "shape") and jnp.issubdtype(dtype, jnp.inexact)


def _leaf(path: str, value: Any, param: bool) -> Leaf:
    return Leaf(path, tuple(value.shape), value.dtype, param)


def _dotted(keys: Any) -> str:
    """A pytree key path or a tuple of names as `a.0.b`."""
    words = []
    for key in keys:
        for attr in ("name", "key", "idx"):
            if hasattr(key, attr) and not isinstance(key, (str, int)):
                key = getattr(key, attr)
                break
        words.append(str(key))
    return ".".join(words)


def _state_leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    import jax

    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {prefix + _dotted(path): value for path, value in flat if _is_float(value)}


def _nnx_port(nnx: Any, model: Any) -> ModulePort:
    graphdef, state = nnx.split(model)
    variables = list(nnx.to_flat_state(state))
    own = {_dotted(path): var.get_value() for path, var in variables}
    leaves = [_leaf(_dotted(path), own[_dotted(path)], isinstance(var, nnx.Param))
              for path, var in variables if _is_float(own[_dotted(path)])]

    def call(values: dict[str, Any], data: tuple) -> Any:
        rebuilt = [(path, var.replace(values.get(_dotted(path), own[_dotted(path)])))
                   for path, var in variables]
        model = nnx.merge(graphdef, nnx.from_flat_state(rebuilt))
        out = model(*data)
        after = nnx.to_flat_state(nnx.state(model, nnx.Not(nnx.Param)))
        return out, {_dotted(path): var.get_value() for path, var in after if _is_float(var.get_value())}

    return ModulePort("Flax NNX", type(model).__name__, leaves, own, call)


def _linen_port(module: Any, variables: Any) -> ModulePort:
    from flax import traverse_util
    from flax.core import unfreeze

    flat = traverse_util.flatten_dict(unfreeze(variables))
    own = {_dotted(keys): value for keys, value in flat.items()}
    leaves = [_leaf(_dotted(keys), value, keys[0] == "params") for keys, value in flat.items()
              if _is_float(value)]
    mutable = [name for name in variables if name != "params"]

    def call(values: dict[str, Any], data: tuple) -> Any:
        rebuilt = traverse_util.unflatten_dict({keys: values.get(_dotted(keys), value)
                                                for keys, value in flat.items()})
        if not mutable:
            return module.apply(rebuilt, *data), {}
        out, changed = module.apply(rebuilt, *data, mutable=mutable)
        return out, _state_leaves(unfreeze(changed))

    return ModulePort("Flax Linen", type(module).__name__, leaves, own, call)


def _equinox_port(eqx: Any, model: Any, state: Any) -> ModulePort:
    import jax

    arrays, static = eqx.partition(model, eqx.is_inexact_array)
    flat, treedef = jax.tree_util.tree_flatten_with_path(arrays)
    paths = [_dotted(path) for path, _ in flat]
    own = dict(zip(paths, (value for _, value in flat)))
    leaves = [_leaf(path, own[path], True) for path in paths]
    if state is not None:
        state_flat, state_def = jax.tree_util.tree_flatten_with_path(state)
        state_paths = ["state." + _dotted(path) for path, _ in state_flat]
        own.update(zip(state_paths, (value for _, value in state_flat)))
        leaves += [_leaf(path, own[path], False) for path in state_paths if _is_float(own[path])]

    def call(values: dict[str, Any], data: tuple) -> Any:
        rebuilt = eqx.combine(treedef.unflatten([values.get(p, own[p]) for p in paths]), static)
        if state is None:
            return rebuilt(*data), {}
        out, after = rebuilt(*data, state_def.unflatten([values.get(p, own[p]) for p in state_paths]))
        return out, _state_leaves(after, "state.")

    return ModulePort("Equinox", type(model).__name__, leaves, own, call)
