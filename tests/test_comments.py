"""Placing JAX comments in a torch file: beside or below, counts, variants, code untouched."""

from __future__ import annotations

import ast
import textwrap
from types import SimpleNamespace

from render.comments import Note, SourceMap, notes_for, place, same_code
from render.ir import Statement
from tracing import Call, Site

SOURCE = textwrap.dedent('''\
    import torch


    def block(x, w):
        h = x @ w
        y = torch.nn.functional.silu(
            h
        )
        for _ in range(2):
            y = y * 2
            y = y + 1
        return y


    def unused(x):
        return x + 1
''')
PATH = "/models/block.py"


def statement(targets, code, line, col=8, end_col=20, end_line=None):
    site = Site(PATH, line, end_line or line, col, end_col, None)
    return Statement(targets, ast.parse(code, mode="eval").body, [0], site)


def program(calls=1, body=None):
    call = Call("block", PATH, 4)
    function = SimpleNamespace(
        name="block_fn", params=["x", "w"], calls=[call] * calls, returns=None,
        body=body if body is not None else [
            statement(["h"], "x @ w", 5),
            statement(["y"], "jax.nn.silu(h)", 6, end_line=8),
            statement(["y_1"], "y * 2", 10, col=12, end_col=17),
            statement(["y_2"], "y_1 + 1", 11, col=12, end_col=17),
            statement(["y_3"], "y_2 * 2", 10, col=12, end_col=17),
            statement(["y_4"], "y_3 + 1", 11, col=12, end_col=17),
        ],
    )
    return SimpleNamespace(functions=[function])


def annotate(prog, width=100):
    source_map = SourceMap(SOURCE)
    return place(source_map, notes_for(prog, None, PATH, source_map), width=width)


def test_comments_beside_below_with_counts_and_code_untouched():
    out = annotate(program(calls=3))
    assert same_code(SOURCE, out)
    lines = out.splitlines()
    assert lines[3] == "def block(x, w):  # jax: def block_fn(x, w)  ×3"
    assert lines[4] == "    h = x @ w  # h = x @ w  ×3"
    # A multi-line statement gets its comment below its last line, at its indentation.
    assert lines[5:9] == [
        "    y = torch.nn.functional.silu(", "        h", "    )", "    # y = jax.nn.silu(h)  ×3"
    ]
    # The loop body ran twice per call: shown once, counted.
    assert lines[10] == "        y = y * 2  # y_1 = y * 2  ×6"
    assert lines[11] == "        y = y + 1  # y_2 = y_1 + 1  ×6"
    # Lines that never ran are as they were.
    assert out.endswith("def unused(x):\n    return x + 1\n")


def test_long_comments_go_below_aligned():
    out = annotate(program(), width=20)
    assert same_code(SOURCE, out)
    assert "    h = x @ w\n    # h = x @ w\n" in out
    assert "def block(x, w):\n    # jax: def block_fn(x, w)\n" in out


def test_variants_are_reported():
    first, second = program().functions[0], program().functions[0]
    second.name = "block_fn_1"
    second.body = [statement(["h"], "jnp.matmul(x, w)", 5)]
    source_map = SourceMap(SOURCE)
    notes = notes_for(SimpleNamespace(functions=[first, second]), None, PATH, source_map)
    assert notes[5] == Note(["h = x @ w"], 2, 2)
    assert notes[4].variants == 2
    out = place(source_map, notes)
    assert "# h = x @ w  ×2  (2 forms: calls differ in shapes, dtypes or what they call)" in out


def test_line_with_backslash_continuation_gets_comment_below():
    source = "def f(x):\n    y = x + \\\n        1\n    return y\n"
    source_map = SourceMap(source)
    out = place(source_map, {2: Note(["y = x + 1"], 1)})
    assert same_code(source, out)
    assert out.splitlines()[3] == "    # y = x + 1"


def test_a_call_repeated_from_one_expression_counts_each_time():
    first = statement(["y"], "block_fn(x, w)", 10, col=12, end_col=17)
    again = statement(["y_1"], "block_fn(y, w)", 10, col=12, end_col=17)
    split = [statement([name], f"parts[{i}]", 5) for i, name in enumerate(("q", "k", "v"))]
    first.call = again.call = object()
    source_map = SourceMap(SOURCE)
    notes = notes_for(program(body=[*split, first, again]), None, PATH, source_map)
    assert notes[10].count == 2 and notes[10].texts == ["y = block_fn(x, w)"]
    assert notes[5].count == 1 and notes[5].texts == ["q = parts[0]", "k = parts[1]", "v = parts[2]"]
