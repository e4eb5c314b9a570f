"""A loop over a list of lists of modules unpacked as torch unpacked it: vit-pytorch's
`for attn, ff in self.layers:`, which the functional export writes `for item in params["layers"]:`
reading `item[0]` and `item[1]`, or already unpacked as `for attn, ff in params["layers"]:`
(`packed` takes that back to one element, whose items the class styles then name from the module
tree)."""

from __future__ import annotations

import ast
import copy

from jaxside.render import source as torch_source
from jaxside.render.ir import Loop, Statement
from jaxside.render.styles.reading import all_statements
from jaxside.render.styles.tree import Child

__all__ = ["packed", "unpack"]


def packed(loop: Loop, taken: set[str]) -> Loop:
    """`loop` reading one element `item` as `item[0]`, `item[1]` where the functional export
    unpacked each element of one list (`for attn, ff in params["layers"]:`); else `loop`."""
    target, iterable = loop.loop_target, loop.iterable
    if not isinstance(target, ast.Tuple) or isinstance(iterable, ast.Call):  # `zip(...)`, `enumerate(...)`
        return loop
    names = [e.id for e in target.elts if isinstance(e, ast.Name)]
    if len(names) != len(target.elts) or len(set(names)) != len(names):
        return loop
    element = next(n for n in ("item", *(f"item_{k}" for k in range(1, len(taken) + 2))) if n not in taken)

    class Pack(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in names and isinstance(node.ctx, ast.Load):
                position = ast.Constant(names.index(node.id))
                return ast.Subscript(ast.Name(element, ast.Load()), position, ast.Load())
            return node

    def fix(tree: ast.expr | None) -> ast.expr | None:
        return Pack().visit(copy.deepcopy(tree)) if tree is not None else None

    def repacked(statement: Statement) -> Statement:
        new = copy.copy(statement)
        new.value = fix(statement.value) or statement.value
        new.when = fix(statement.when)
        if isinstance(new, Loop):
            new.iterable = fix(new.iterable)
            new.body = [repacked(s) for s in new.body]
        return new

    new = copy.copy(loop)
    new.loop_target = ast.Name(element, ast.Store())
    new.body = [repacked(s) for s in loop.body]
    return new


def unpack(loop: Loop, name: str, items: list[Child | None], taken: set[str]
           ) -> tuple[list[str], list[Statement]] | None:
    """Torch's names for the items of each element `name` takes (`attn`, `ff`) and the loop's body
    reading them instead of `name[0]`, `name[1]`; None where torch's loop does not unpack its
    elements to as many names, the body reads `name` otherwise, or a name is `taken`."""
    sizes = {len(item) if isinstance(item, list) else -1 for item in items}
    if len(sizes) != 1 or (size := sizes.pop()) < 1:
        return None
    source = torch_source.around(loop.site, torch_source.LOOPS) if loop.site is not None else None
    target = source.target if isinstance(source, ast.For) else None
    if not isinstance(target, ast.Tuple) or len(target.elts) != size:
        return None
    names = [e.id for e in target.elts if isinstance(e, ast.Name)]
    if len(names) != size or len(set(names)) != size or set(names) & taken:
        return None
    statements = all_statements(loop.body)
    reads = [n for s in statements for tree in _trees(s) for n in ast.walk(tree)]
    indexed = {id(n.value) for n in reads
               if isinstance(n, ast.Subscript) and _position(n, name, size) is not None}
    if any(isinstance(n, ast.Name) and n.id == name and id(n) not in indexed for n in reads):
        return None
    return names, [_renamed(s, name, names) for s in loop.body]


def _trees(statement: Statement) -> list[ast.AST]:
    trees: list[ast.AST] = [statement.value]
    if statement.when is not None:
        trees.append(statement.when)
    if isinstance(statement, Loop) and statement.iterable is not None:
        trees.append(statement.iterable)
    return trees


def _position(node: ast.Subscript, name: str, size: int) -> int | None:
    """k for `name[k]` (a constant position within the element)."""
    value, index = node.value, node.slice
    if not (isinstance(value, ast.Name) and value.id == name and isinstance(index, ast.Constant)):
        return None
    k = index.value
    return k % size if type(k) is int and -size <= k < size else None


def _renamed(statement: Statement, name: str, names: list[str]) -> Statement:
    class Rename(ast.NodeTransformer):
        def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
            k = _position(node, name, len(names))
            return ast.Name(names[k], ast.Load()) if k is not None else self.generic_visit(node)

    def fix(tree: ast.expr | None) -> ast.expr | None:
        return Rename().visit(copy.deepcopy(tree)) if tree is not None else None

    new = copy.copy(statement)
    new.value = fix(statement.value) or statement.value
    new.when = fix(statement.when)
    if isinstance(new, Loop):
        new.iterable = fix(new.iterable)
        new.body = [_renamed(s, name, names) for s in new.body]
    return new
