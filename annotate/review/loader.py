"""`--port-weights NAME`: the port's own loader fills the port, then review's own mapping checks it.

`NAME(port_model, torch_state_dict)` returns the loaded port (or fills it in place and returns
None); the port then runs on what the loader put in it. Each leaf is then held against what review's
mapping (`review.fit`) proves it must be: a leaf that differs is named with what it holds instead
(torch's `weight` where the mapping proves `weight.T`, another leaf's tensor, a scaled copy, another
dtype) and the loader line that made it, found by watching the loader's lines run: the first line
after which the leaf's final array is in the loader's locals or in the port's variables.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxside.annotate.review.fit import Recipe


@dataclass
class LeafCheck:
    path: str
    expected: str
    """How review's mapping makes the leaf (`layers.0.wo.weight.T`)."""
    holds: str
    """What the loader put there instead."""
    line: tuple[str, int] | None
    """The loader's line that made it, when seen."""


class Loaded:
    """A leaf's value as the loader left it: a recipe that ignores torch's tensors."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def build(self, state: dict[str, Any], dtype: Any) -> Any:
        return self.value


def run_loader(loader: Callable[..., Any], built: Any, state: dict[str, Any], data: tuple,
               files: list[str], before: list[Any]) -> tuple[Any, dict[int, tuple[str, int]], list[Any]]:
    """The loaded port (a Linen module is given as `(module, variables)`, initialised; its loader
    may return the variables alone), for each array id the loader made the line of `files` that
    made it, and those arrays (kept alive so that their ids stay theirs)."""
    import torch

    target = built
    linen = sys.modules.get("flax.linen")
    if linen is not None and isinstance(built, linen.Module):
        import jax

        target = (built, built.init(jax.random.key(0), *data))
    torch_state = {name: torch.from_numpy(np.array(value)) for name, value in state.items()}
    watched = set(files)
    made: dict[int, tuple[str, int]] = {}
    alive: list[Any] = list(before)  # ids of freed arrays are reused: keep every array seen alive
    untouched = {id(value) for value in before}
    last: dict[Any, int] = {}
    variables = _variables(target)

    def note(frame: Any) -> None:
        line = last.get(frame)
        if line is None:
            return
        for value in _arrays(frame.f_locals, variables):
            if id(value) not in made and id(value) not in untouched:
                made[id(value)] = (frame.f_code.co_filename, line)
                alive.append(value)

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event in ("line", "return"):
            note(frame)
            last[frame] = frame.f_lineno
        return local

    def calls(frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and str(Path(frame.f_code.co_filename).resolve()) in watched:
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        result = loader(target, torch_state)
    finally:
        sys.settrace(previous)
    if result is None:
        result = target
    elif target is not built and not isinstance(result, tuple):
        result = (built, result)  # a Linen loader may return the variables alone
    return result, made, alive


def _variables(target: Any) -> list[Any]:
    """An NNX port's variables: a loader that sets `layer.kernel.value` changes what they hold."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is None or not isinstance(target, nnx.Module):
        return []
    return [var for _, var in nnx.to_flat_state(nnx.state(target))]


def _arrays(scope: dict[str, Any], variables: list[Any]) -> list[Any]:
    import jax

    found = [var.get_value() for var in variables]
    for value in scope.values():
        if isinstance(value, (jax.Array, np.ndarray)):
            found.append(value)
        elif isinstance(value, (dict, list, tuple)) or hasattr(value, "__dataclass_fields__"):
            try:
                found += [leaf for leaf in jax.tree_util.tree_leaves(value)
                          if isinstance(leaf, (jax.Array, np.ndarray))]
            except Exception:  # a container JAX cannot flatten: its arrays are not the port's
                continue
    return found


def check(own: dict[str, Any], recipes: dict[str, Recipe], state: dict[str, Any], dtypes: dict[str, Any],
          made: dict[int, tuple[str, int]], before: set[int]) -> list[LeafCheck]:
    """Every leaf the mapping makes, against what the loader put there (`before`: ids of the
    arrays the port held before the loader ran)."""
    expected = {path: np.asarray(recipe.build(state, dtypes[path])) for path, recipe in recipes.items()}
    found = []
    for path, recipe in recipes.items():
        value = own.get(path)
        if value is None:
            continue
        got, want = np.asarray(value), expected[path]
        if got.shape == want.shape and got.dtype == want.dtype and np.allclose(got, want, rtol=1e-6, atol=0):
            continue
        holds = ("the value the port was built with (the loader left it)" if id(value) in before
                 else _holds(got, want, path, expected, state))
        found.append(LeafCheck(path, recipe.describe(), holds, made.get(id(value))))
    return found


def _holds(got: np.ndarray, want: np.ndarray, path: str, expected: dict[str, np.ndarray],
           state: dict[str, Any]) -> str:
    """What a leaf holds, said in torch's names: a tensor as is or transposed, another leaf's value,
    a scaled copy, another dtype."""
    if got.shape != want.shape:
        return f"an array of shape {list(got.shape)}, not {list(want.shape)}"
    if got.dtype != want.dtype:
        close = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-3)
        return f"{got.dtype} values" + (" (the right ones, in another dtype)" if close else "")
    flat = got.reshape(-1)
    for name, tensor in state.items():
        tensor = np.asarray(tensor)
        if tensor.size != got.size or tensor.dtype != got.dtype:
            continue
        if np.array_equal(tensor.reshape(-1), flat):
            return name + (f" as {list(got.shape)}" if tensor.shape != got.shape else "")
        if tensor.ndim == 2 and np.array_equal(tensor.T.reshape(-1), flat):
            return name + ".T" + (f" as {list(got.shape)}" if tensor.shape[::-1] != got.shape else "")
    for other, value in expected.items():
        if other != path and value.shape == got.shape and np.array_equal(value, got):
            return f"what the mapping makes for {other}"
    nonzero = np.abs(want) > 0
    if nonzero.any():
        ratio = got[nonzero] / want[nonzero]
        if np.allclose(ratio, ratio.reshape(-1)[0], rtol=1e-5) and np.allclose(got[~nonzero], 0):
            return f"the right values times {float(ratio.reshape(-1)[0]):.6g}"
    error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return f"other values (max error {error:.3g})"


def lines(checks: list[LeafCheck], loader: str) -> list[str]:
    """The report's lines: each leaf the loader filled otherwise than the mapping proves."""
    out = []
    for item in checks:
        where = f" (made at {Path(item.line[0]).name}:{item.line[1]})" if item.line else ""
        out.append(f"  {item.path} holds {item.holds} where review's mapping makes {item.expected}{where}")
    head = (f"{loader}: every leaf as review's mapping makes it" if not checks else
            f"{loader}: {len(checks)} {'leaves' if len(checks) > 1 else 'leaf'} unlike review's mapping:")
    return [head, *out]
