"""Fit torch `state_dict` tensors to the named, shaped leaves of a Flax or Equinox port.

Each port leaf gets a `Recipe`: which torch tensor (or rows of one), and the layout change the shapes
prove (as is, transposed, a Flax `kernel` that is `weight.T` reshaped, a conv kernel). Names choose
among the tensors that fit (`review.mapping.similarity`); a fused torch tensor (`wqkv`) is split over
sibling leaves (`q_proj`, `k_proj`, `v_proj`) when their rows add up and the fused name orders them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from jaxside.annotate.review.mapping import ROLES, similarity, tokens

# Parts a fused torch name is made of, by the word that names them in the fused name.
_PARTS = {
    "q": {"q", "wq", "q_proj", "query"},
    "k": {"k", "wk", "k_proj", "key"},
    "v": {"v", "wv", "v_proj", "value"},
    "gate": {"gate", "w1", "gate_proj", "wi_0"},
    "up": {"up", "w3", "up_proj", "wi_1"},
}
_CODE = {word: code for code, words in _PARTS.items() for word in words}


@dataclass(frozen=True)
class Leaf:
    """One array of the port: its dotted path (`layers.0.attention.q_proj.kernel`), shape and dtype.
    `param` leaves (weights) must be mapped; others (caches, counters) keep the port's own value
    unless a torch buffer fits."""

    path: str
    shape: tuple[int, ...]
    dtype: Any
    param: bool

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Recipe:
    """A port leaf made from torch: rows `start:stop` of tensor `source` (or `source` with the
    `fused` tensors' rows after it), then `layout`."""

    source: str
    layout: str
    shape: tuple[int, ...]
    rows: tuple[int, int] | None = None
    fused: tuple[str, ...] = ()
    inout: bool = False
    """The sources are stored (in, out), as transformers' `Conv1D` keeps GPT-2's weights: fitted as
    their transpose, an (out, in) `nn.Linear` weight, and transposed back first when built."""

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source, *self.fused)

    def describe(self) -> str:
        """`layers.0.attention.wqkv.weight[0:64].T`, `wq.weight + wk.weight.T as [64, 4, 16]`."""
        text = " + ".join(self.sources) + (f"[{self.rows[0]}:{self.rows[1]}]" if self.rows else "")
        transposed = self.layout in ("transpose", "kernel")
        text += " (conv)" if self.layout == "conv" else (".T" if transposed != self.inout else "")
        reshaped = self.layout == "squeeze" or self.layout in ("kernel", "reshape") and len(self.shape) != 2
        return text + (f" as {list(self.shape)}" if reshaped else "")

    def build(self, state: dict[str, Any], dtype: Any) -> Any:
        import jax.numpy as jnp

        arrays = [state[name].T if self.inout else state[name] for name in self.sources]
        value = jnp.concatenate(arrays) if self.fused else arrays[0]
        if self.rows is not None:
            value = value[self.rows[0]:self.rows[1]]
        if self.layout in ("transpose", "kernel"):
            value = value.T
        elif self.layout == "conv":
            value = jnp.transpose(value, (*range(2, value.ndim), 1, 0))
        return jnp.reshape(value, self.shape).astype(dtype)


@dataclass
class Fit:
    recipes: dict[str, Recipe] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)
    """Port weights no torch tensor fits."""
    unused: list[str] = field(default_factory=list)
    """Torch tensors no port leaf reads."""


def layout(leaf: Leaf, shape: tuple[int, ...], transposed: bool | None = None) -> str | None:
    """How `leaf` holds a torch tensor of `shape`, if the shapes prove it. A Flax `kernel` (any leaf
    named `*kernel`) is (in, out): torch's (out, in) transposed, its in and out axes each possibly
    split (`DenseGeneral`); a conv kernel is (*window, in, out). Other leaves are as-is, without
    torch's axes of size 1 (a (1, 1, T, T) mask as (T, T)), transposed (when not square) or
    reshaped (out, in) -> (*out, *in). `transposed` forces the choice (a
    --params-map entry ending in `.T`)."""
    port = leaf.shape
    kernel = leaf.name.endswith("kernel") if transposed is None else transposed
    if kernel:
        if len(shape) == 2 and _splits(port, shape[1], shape[0]):
            return "kernel"
        if len(shape) > 2 and port == (*shape[2:], shape[1], shape[0]):
            return "conv"
        return None
    if port == shape:
        return "same"
    if len(port) != len(shape) and _squeezed(port) == _squeezed(shape):
        return "squeeze"  # torch's (1, 1, T, T) mask buffer as the port's (T, T)
    if len(shape) == 2 and port == shape[::-1]:
        return "transpose"
    if len(shape) == 2 and _splits(port, shape[0], shape[1]):
        return "reshape"
    return None


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(size for size in shape if size != 1)


def _splits(shape: tuple[int, ...], first: int, rest: int) -> bool:
    """Whether `shape` is (*a, *b) with prod(a) == first and prod(b) == rest."""
    return any(math.prod(shape[:k]) == first and math.prod(shape[k:]) == rest for k in range(1, len(shape)))


def fit(leaves: list[Leaf], shapes: dict[str, tuple[int, ...]],
        given: dict[str, Recipe] | None = None) -> Fit:
    """Recipes for the port's leaves: `given` ones first, then one-to-one by name among the torch
    tensors that fit (most alike first), then fused torch tensors split over sibling leaves, then
    fused leaves made of sibling torch tensors."""
    result = Fit(recipes=dict(given or {}))
    taken = {name for recipe in result.recipes.values() for name in recipe.sources}
    free = [leaf for leaf in leaves if leaf.path not in result.recipes]
    scored = []
    for leaf in free:
        for name, shape in shapes.items():
            how = layout(leaf, shape)
            score = similarity(leaf.path, name) if how else 0.0
            if _other_role(leaf.path, name):
                score /= 4  # only when nothing better fits (MaxText's mlp `wo` is torch's `w2`)
            if score > 0:
                scored.append((score, leaf.param, leaf.path, name, how))
    scored.sort(key=lambda s: (-s[0], not s[1]))
    by_path = {leaf.path: leaf for leaf in leaves}
    for _, _, path, name, how in scored:
        if path in result.recipes or name in taken:
            continue
        result.recipes[path] = Recipe(name, how, by_path[path].shape)
        taken.add(name)
    for name, shape in shapes.items():
        if name not in taken and len(shape) == 2:
            parts = _split(name, shape, [leaf for leaf in leaves if leaf.path not in result.recipes])
            if parts:
                result.recipes.update(parts)
                taken.add(name)
    for leaf in leaves:
        if leaf.path not in result.recipes:
            recipe = _fuse(leaf, {n: s for n, s in shapes.items() if n not in taken and len(s) == 2})
            if recipe is not None:
                result.recipes[leaf.path] = recipe
                taken.update(recipe.sources)
    result.unmapped = [leaf.path for leaf in leaves if leaf.param and leaf.path not in result.recipes]
    result.unused = [name for name in shapes if name not in taken]
    return result


def _other_role(port: str, torch_name: str) -> bool:
    """Both paths end in a word of known, different roles (`query` and `wo`)."""
    a, b = tokens(port), tokens(torch_name)
    return bool(a and b) and a[-1] in ROLES and b[-1] in ROLES and a[-1] != b[-1]


def _split(name: str, shape: tuple[int, ...], free: list[Leaf]) -> dict[str, Recipe]:
    """Sibling leaves that are row blocks of the fused torch tensor `name` (out, in), in the order
    the fused name spells their parts (`wqkv`: q, k, v) and adding up to all its rows."""
    words = name.split(".")
    if len(words) < 2:
        return {}
    fused = words[-2].lower()
    groups: dict[tuple[str, str], list[tuple[int, Leaf]]] = {}
    for leaf in free:
        steps = leaf.path.split(".")
        if len(steps) < 2:
            continue
        parent, part = steps[:-2], steps[-2]
        code = _CODE.get(part.lower())
        if code is None or fused.find(code) < 0 or similarity(leaf.path, name) <= 0:
            continue
        rows = math.prod(leaf.shape) // shape[1] if shape[1] else 0
        if rows and layout(leaf, (rows, shape[1])):
            groups.setdefault((".".join(parent), leaf.name), []).append((fused.find(code), leaf))
    for members in groups.values():
        positions = [position for position, _ in members]
        if len(set(positions)) != len(positions):
            continue
        members.sort(key=lambda m: m[0])
        sizes = [math.prod(leaf.shape) // shape[1] for _, leaf in members]
        if sum(sizes) != shape[0]:
            continue
        recipes, start = {}, 0
        for size, (_, leaf) in zip(sizes, members):
            how = layout(leaf, (size, shape[1]))
            recipes[leaf.path] = Recipe(name, how, leaf.shape, (start, start + size))
            start += size
        return recipes
    return {}


def _fuse(leaf: Leaf, free: dict[str, tuple[int, ...]]) -> Recipe | None:
    """The fused leaf (`qkv_proj`) as sibling torch tensors (`q_proj`, `k_proj`, `v_proj`) stacked by
    rows, in the order the leaf's name spells them, all of them adding up to its size."""
    steps = leaf.path.split(".")
    if len(steps) < 2:
        return None
    fused = steps[-2].lower()
    groups: dict[tuple[str, str, int], list[tuple[int, str]]] = {}
    for name, shape in free.items():
        words = name.split(".")
        code = _CODE.get(words[-2].lower()) if len(words) >= 2 else None
        if code is None or fused.find(code) < 0 or similarity(leaf.path, name) <= 0:
            continue
        groups.setdefault((".".join(words[:-2]), words[-1], shape[1]), []).append((fused.find(code), name))
    for (_, _, width), members in groups.items():
        positions = [position for position, _ in members]
        rows = sum(free[name][0] for _, name in members)
        if len(members) < 2 or len(set(positions)) != len(positions) or rows * width != math.prod(leaf.shape):
            continue
        how = layout(leaf, (rows, width))
        if how is not None:
            names = [name for _, name in sorted(members)]
            return Recipe(names[0], how, leaf.shape, fused=tuple(names[1:]))
    return None


_GIVEN = re.compile(r"(?P<name>.+?)(?:\[(?P<start>\d+):(?P<stop>\d+)\])?(?P<t>\.T)?")


def given_recipe(leaf: Leaf, text: str, shapes: dict[str, tuple[int, ...]]) -> Recipe | str:
    """A --params-map value (`name`, `name[a:b]` rows, either followed by `.T` to force a transpose)
    as a recipe for `leaf`, or what is wrong with it."""
    found = _GIVEN.fullmatch(text)
    name = found.group("name") if found else text
    if name not in shapes:
        return f"{text!r} names no torch tensor"
    shape = shapes[name]
    rows = (int(found.group("start")), int(found.group("stop"))) if found.group("start") else None
    if rows:
        if len(shape) != 2 or not 0 <= rows[0] < rows[1] <= shape[0]:
            return f"{text!r}: rows {rows[0]}:{rows[1]} are not rows of {name} {list(shape)}"
        shape = (rows[1] - rows[0], shape[1])
    how = layout(leaf, shape, True if found.group("t") else None)
    if how is None:
        return f"{text!r} is {list(shape)}, which does not fit {leaf.path} {list(leaf.shape)}"
    return Recipe(name, how, leaf.shape, rows)
