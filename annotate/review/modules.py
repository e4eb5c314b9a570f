"""Trace a Flax or Equinox port on torch's weights: fit the tensors to its leaves, then capture a
function of the torch tensors that lays them out as the port holds them and runs the port."""

from __future__ import annotations

from collections import Counter, abc
from typing import Any

from jaxside.annotate.errors import Failure
from jaxside.annotate.options import ReviewOptions
from jaxside.annotate.review.fit import Leaf, Recipe, fit, given_recipe
from jaxside.annotate.review.frameworks import ModulePort
from jaxside.annotate.review.mapping import Mapping, read_params_map


class _Run:
    """The traced entry: `state` holds torch tensors by state_dict name; the layout changes run in
    this (library) file, so only the port's own lines are the port's sites."""

    def __init__(self, port: ModulePort, recipes: dict[str, Recipe]) -> None:
        self.port, self.recipes = port, recipes
        self.dtypes = {leaf.path: leaf.dtype for leaf in port.leaves}
        self.__name__ = self.__qualname__ = port.name

    def __call__(self, state: dict[str, Any], *data: Any) -> Any:
        values = {path: recipe.build(state, self.dtypes[path]) for path, recipe in self.recipes.items()}
        return self.port.call(values, data)


def trace_module(options: ReviewOptions, port: ModulePort, state: dict[str, Any], data: tuple,
                 files: list[str], loaded: Any = None, inout: frozenset[str] = frozenset()
                 ) -> tuple[Any, list, Mapping]:
    """The port traced on torch's weights as fitted to its leaves; `files` are the port's files.
    With `loaded` (`--port-weights`: where the loader made each array), the port runs on the
    weights its loader gave it, each checked against the fit. `inout`: torch weights stored
    (in, out) (transformers' `Conv1D`), fitted as the (out, in) weights they stand for."""
    import dataclasses

    import jax

    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.tracing import Capture

    shapes = {name: tuple(value.shape)[::-1] if name in inout else tuple(value.shape)
              for name, value in state.items()}
    given = _given(options.params_map, port.leaves, shapes) if options.params_map else {}
    kept = {path for path, recipe in given.items() if recipe is None}
    result = fit([leaf for leaf in port.leaves if leaf.path not in kept], shapes,
                 {path: recipe for path, recipe in given.items() if recipe is not None})
    result.recipes = {path: dataclasses.replace(recipe, inout=True) if recipe.source in inout else recipe
                      for path, recipe in result.recipes.items()}
    if result.unmapped and loaded is None:
        shown = ", ".join(result.unmapped[:3]) + (", ..." if len(result.unmapped) > 3 else "")
        raise Failure(f"no torch weight fits the {port.framework} weights {shown}",
                      "map them in a --params-map file (to None: keep the port's own, a table it "
                      "computes)", file=options.port)
    weights = {name: state[name] for name in sorted({n for r in result.recipes.values() for n in r.sources})}
    recipes: dict[str, Any] = dict(result.recipes)
    checked: list[str] = []
    if loaded is not None:
        from jaxside.annotate.review.loader import Loaded, check, lines

        dtypes = {leaf.path: loaded[2].get(leaf.path, leaf.dtype) for leaf in port.leaves}
        checked = lines(check(port.own, result.recipes, state, dtypes, loaded[0], loaded[3]),
                        options.port_weights)
        recipes = {leaf.path: Loaded(port.own[leaf.path]) for leaf in port.leaves}
        weights = {}
    try:
        trace = Capture(watch=files)(_Run(port, recipes), weights, *data)
    except Exception as error:
        raise UserCodeRaised(f"tracing {port.name}", error) from error
    mapping = Mapping(pairs={leaf.path: result.recipes[leaf.path].describe() for leaf in port.leaves
                             if leaf.path in result.recipes},
                      unused_torch=result.unused, inputs={f"state[{name!r}]": name for name in weights},
                      note=_note(port, result.recipes), module_port=True, checked=checked)
    if loaded is not None:
        mapping.note += f"; the port runs on the weights {options.port_weights} gave it instead"
    return trace, jax.tree_util.tree_leaves([weights, *data]), mapping


def _note(port: ModulePort, recipes: dict[str, Recipe]) -> str:
    """` into a Flax NNX Llama (12 transposed, 6 split from 2 fused tensors)`."""
    kinds = Counter("split" if r.rows else r.layout + ("/in-out" if r.inout else "")
                    for r in recipes.values())
    fused = len({r.source for r in recipes.values() if r.rows})
    joined = [r for r in recipes.values() if r.fused]
    named = (("kernel", "kernels transposed"), ("transpose", "transposed"), ("conv", "conv kernels"),
             ("reshape", "reshaped"), ("kernel/in-out", "kernels as Conv1D keeps them, (in, out)"),
             ("same/in-out", "transposed from Conv1D's (in, out)"),
             ("transpose/in-out", "as Conv1D keeps them, (in, out)"),
             ("squeeze", "without torch's axes of size 1"))
    words = [f"{kinds[k]} {w}" for k, w in named if kinds[k]]
    if fused:
        words.append(f"{kinds['split']} split from {fused} fused tensor{'s' if fused > 1 else ''}")
    if joined:
        words.append(f"{len(joined)} fused from {sum(len(r.sources) for r in joined)} tensors")
    kept = len([leaf for leaf in port.leaves if leaf.path not in recipes])
    if kept:
        words.append(f"{kept} port state kept as built")
    article = "an" if port.framework[0] in "AEIOU" else "a"
    return f" into {article} {port.framework} {port.name}" + (f" ({', '.join(words)})" if words else "")


def _given(given: str | abc.Mapping[str, str | None], leaves: list[Leaf], shapes: dict[str, tuple[int, ...]]
           ) -> dict[str, Recipe | None]:
    """The recipes PARAMS_MAP gives; None for a leaf it keeps as the port built it."""
    by_path = {leaf.path: leaf for leaf in leaves}
    recipes: dict[str, Recipe | None] = {}
    path = given if isinstance(given, str) else None  # a dict from Python has no file
    for port, text in read_params_map(given).items():
        if port not in by_path:
            raise Failure(f"PARAMS_MAP names {port}, which is not a leaf of the port",
                          f"use a dotted path such as {next(iter(by_path), 'layers.0.kernel')}", file=path)
        if text is None:
            recipes[port] = None
            continue
        recipe = given_recipe(by_path[port], text, shapes)
        if isinstance(recipe, str):
            raise Failure(f"PARAMS_MAP maps {port} to {recipe}", "give a state_dict name, rows [a:b], .T",
                          file=path)
        recipes[port] = recipe
    return recipes
