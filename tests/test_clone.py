"""`render.lower.clone.clone` copies `ast` expressions as `copy.deepcopy` does."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from jaxside.render.ir import Fold, fold, fold_of
from jaxside.render.lower.clone import clone

ROOT = Path(__file__).resolve().parents[1]


def _expressions() -> list[ast.expr]:
    found = []
    for path in sorted((ROOT / "samples").glob("*.py")):
        found += [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.expr)]
    return found


def test_a_clone_is_what_deepcopy_makes_and_shares_nothing_with_the_original():
    expressions = _expressions()
    assert len(expressions) > 1000
    for node in expressions:
        copied, cloned = copy.deepcopy(node), clone(node)
        assert ast.dump(cloned, include_attributes=True) == ast.dump(copied, include_attributes=True)
        originals = {id(n) for n in ast.walk(node)}
        assert not originals & {id(n) for n in ast.walk(cloned)}


def test_marks_are_copied_and_a_node_met_twice_is_copied_once():
    shared = ast.Name("x", ast.Load())
    record = Fold("h", [3, 4], None)
    pair = [fold(ast.BinOp(shared, ast.Add(), shared), record), shared]
    cloned = clone(pair)
    assert fold_of(cloned[0]) == record and fold_of(cloned[0]) is not record
    assert cloned[0].left is cloned[0].right is cloned[1] and cloned[1] is not shared
