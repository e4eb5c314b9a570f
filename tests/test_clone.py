"""`render.lower.clone.clone` copies `ast` expressions as `copy.deepcopy` does."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from jaxside.render.ir import Fold, fold, fold_of
from jaxside.render.lower.clone import clone
from jaxside.tracing.trace import Call, Site

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


def test_a_copied_fold_shares_the_traces_call_and_site():
    """The trace is never changed, so its call (with its whole subtree) is shared, not copied: a
    copy per expression copied made lowering quadratic in a model's depth (`make bench` row 6)."""
    call = Call("Block.forward", "model.py", 3, children=[Call("Leaf.forward", "model.py", 9)])
    site = Site("model.py", 4, 4, 8, 20, "self.inner(x)")
    record = Fold("h", [3, 4], site, call)
    for copied in (fold_of(clone(fold(ast.Name("h", ast.Load()), record))), copy.deepcopy(record)):
        assert copied == record and copied is not record and copied.eqns is not record.eqns
        assert copied.call is call and copied.site is site
