"""What `from_torch` builds for a numbered list attribute (`ModuleList`, `Sequential`): a list of
modules, of lists of modules (vit-pytorch's `[attention, feed_forward]` per layer), kept at torch's
positions (`None` where torch holds a module with neither tensors nor a def: a `GELU` in a
`Sequential`), and, where instances of one class hold other lists (T5's encoder blocks hold two
layers, its decoder blocks three), the layout each instance has, told apart by the tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxside.render.styles.tree import Child, Klass, Node, StyleError, members

__all__ = ["Build", "Choice", "child_value", "fixed", "list_value", "uniform"]

Choice = list[tuple[str | None, str]]
"""What the converter builds for one attribute: (test, expression) pairs, the first whose test
holds (the last's is None: `else`), written as an `if`/`else` before the class is made."""

_COUNTERS = "ijklmn"


@dataclass(frozen=True)
class Build:
    """How the converter builds one module: its builder's call given a path expression
    (`_attention(tensors, f"{path}layers.{i}.0.", config)`), and whether it holds a tensor."""

    call: Callable[[Node, str], str]
    holds: Callable[[Node], bool]


def uniform(child: list[Child | None], holds: Callable[[Node], bool] | None = None) -> bool:
    """Whether a list's items are all alike (one class, or alike lists), none missing: a list
    as long as the tensors say (`for i in range(_count(...))`), not one built item by item."""
    if not child or any(item is None for item in child):
        return False
    first = _shape(child[0])
    if any(_shape(item) != first for item in child[1:]):
        return False
    return holds is None or any(holds(n) for n in members(child[0]))


def fixed(child: Child | None) -> bool:
    """Whether a list is built item by item (its items differ, or some are missing)."""
    return isinstance(child, list) and not uniform(child)


def _shape(child: Child | None) -> Any:
    """The classes a child holds, where they are: equal for children built by one expression."""
    if child is None:
        return None
    if isinstance(child, Node):
        return child.cls, child.layer
    if uniform(child):
        return "each", _shape(child[0])
    return tuple(_shape(item) for item in child)


def list_value(klass: Klass, name: str, build: Build, inner: Callable[[list[str], bool], str]) -> Choice:
    """The expression building list attribute `name` of `klass` under `path`; `inner` writes a
    list inside another from its items, or (True) from the one comprehension that makes it."""
    variants: dict[Any, list[list[Child | None]]] = {}
    for node in klass.nodes:
        child = node.children.get(name)
        if isinstance(child, list):
            variants.setdefault(_shape(child), []).append(child)
    layouts = [found[0] for found in variants.values()]
    if len(layouts) == 1:
        return [(None, _expr(layouts[0], [name], build, inner, 0))]
    counts = [sum(1 for item in layout if any(build.holds(n) for n in members(item))) for layout in layouts]
    if len(set(counts)) == len(layouts):
        # told apart by how many items hold tensors (T5's blocks: 2 layers in the encoder, 3 in the decoder)
        tests: list[str | None] = [f'_count(tensors, path + "{name}.") == {count}' for count in counts[:-1]]
    else:  # by a tensor only that layout has (ParallelViT's attention branches, its feed-forward ones)
        held = [[_list_leaves(child, name) for child in found] for found in variants.values()]
        tests = []
        for k in range(len(layouts) - 1):
            elsewhere = {p for later in held[k + 1:] for leaves in later for p in leaves}
            telling = [p for p in held[k][0] if p not in elsewhere and all(p in h for h in held[k][1:])]
            if not telling:
                path = next(n.path for n in klass.nodes if name in n.children)
                raise StyleError(f"`{klass.name}.{name}` holds other modules in other instances, with no "
                                 "tensor telling them apart: not written as one class yet",
                                 f"{path}.{name}" if path else name)
            tests.append(f'path + "{telling[0]}" in tensors')
    pairs = zip([*tests, None], layouts, strict=True)
    return [(test, _expr(layout, [name], build, inner, 0)) for test, layout in pairs]


def _list_leaves(child: Child | None, prefix: str) -> list[str]:
    """The tensors under a list (`fns.0.norm.weight`), by path relative to its owner."""
    if isinstance(child, Node):
        return [f"{prefix}.{leaf}" for leaf in _leaf_paths(child)]
    if child is None:
        return []
    return [leaf for k, item in enumerate(child) for leaf in _list_leaves(item, f"{prefix}.{k}")]


def _expr(child: Child | None, parts: list[str], build: Build, inner: Callable[[list[str], bool], str],
          level: int) -> str:
    if child is None:
        return "None"
    if isinstance(child, Node):
        return build.call(child, _path(parts))
    if uniform(child, build.holds):
        counter = _COUNTERS[level % len(_COUNTERS)]
        item = _expr(child[0], [*parts, "{" + counter + "}"], build, inner, level + 1)
        listed = f"[{item} for {counter} in range(_count(tensors, {_path(parts)}))]"
        return listed if level == 0 else inner([listed], True)
    items = [_expr(item, [*parts, str(k)], build, inner, level + 1) for k, item in enumerate(child)]
    return f"[{', '.join(items)}]" if level == 0 else inner(items, False)


def _path(parts: list[str]) -> str:
    """`path + "layers.0."`, or `f"{path}layers.{i}.0."` where a part is a comprehension's counter."""
    joined = ".".join(parts) + "."
    if any(part.startswith("{") for part in parts):
        return 'f"{path}' + joined + '"'
    return f'path + "{joined}"'


def child_value(klass: Klass, name: str, build: Build) -> Choice:
    """The expression building child `name` of `klass` under `path`: where instances hold modules of
    other classes there (CaiT's `LayerScale.fn`, an `Attention` or a `FeedForward`), the one whose
    tensors are there, told apart by a tensor only its class has
    (`if path + "fn.norm.weight" in tensors: fn = _attention(...)`, `else: fn = _feed_forward(...)`)."""
    groups: dict[Any, list[Node]] = {}
    for node in klass.nodes:
        child = node.children.get(name)
        if isinstance(child, Node):
            groups.setdefault(_shape(child), []).append(child)
    if not groups:
        return [(None, "None")]
    kinds = list(groups.values())
    *others, last = kinds
    choice: Choice = [(None, build.call(last[0], f'path + "{name}."'))]
    for k in reversed(range(len(others))):
        held = [_leaf_paths(n) for n in kinds[k]]
        elsewhere = {p for g in kinds[k + 1:] for n in g for p in _leaf_paths(n)}
        telling = [p for p in held[0] if p not in elsewhere and all(p in h for h in held[1:])]
        if not telling:
            path = kinds[k][0].path
            raise StyleError(f"`{klass.name}.{name}` holds modules of other classes in other instances, "
                             "with no tensor telling them apart: not written as one class yet", path)
        test = f'path + "{name}.{telling[0]}" in tensors'
        choice.insert(0, (test, build.call(kinds[k][0], f'path + "{name}."')))
    return choice


def _leaf_paths(node: Node) -> list[str]:
    """The tensors under a module, by path relative to it (`to_q.weight`), its own first."""
    paths = list(node.leaves)
    for child in node.children.values():
        for held in members(child):
            prefix = held.path[len(node.path):].lstrip(".")
            paths += [f"{prefix}.{leaf}" for leaf in _leaf_paths(held)]
    return paths
