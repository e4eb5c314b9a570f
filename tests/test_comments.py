"""Placing JAX comments in a torch file: beside or below, counts, variants, code untouched."""

from __future__ import annotations

import ast
import textwrap
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxside.render.comments import Note, SourceMap, check_same_code, notes_for, place, same_code
from jaxside.render.ir import Statement
from jaxside.render.text import CommentsChangeCode
from jaxside.tracing import Call, Site

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
        name="block_fn", params=["x", "w"], keywords=[], calls=[call] * calls, returns=None,
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


# -- place(): the edges a mutation run found unguarded (docs/testing.md) ------------------------------


def test_a_comment_goes_beside_exactly_while_it_fits_the_width():
    source = "x = 1\n"
    note = {1: Note(["x = 1"], 1)}
    fits = len("x = 1  # x = 1")
    assert place(SourceMap(source), note, width=fits) == "x = 1  # x = 1\n"
    assert place(SourceMap(source), note, width=fits - 1) == "x = 1\n# x = 1\n"


def test_notes_without_a_statement_or_text_are_skipped_and_the_rest_placed():
    source = "a = 1\n\nb = 2\nc = 3\n"
    notes = {1: Note([], 1), 2: Note(["nothing here"], 1), 3: Note(["b = 2"], 1), 4: Note(["c = 3"], 2)}
    assert place(SourceMap(source), notes) == "a = 1\n\nb = 2  # b = 2\nc = 3  # c = 3  ×2\n"
    source_map = SourceMap(source)
    assert source_map.statement_at(2) is None and source_map.statement_at(3).lineno == 3


def test_line_endings_are_kept_and_a_last_line_without_one_gets_one():
    source = "a = 1\r\nb = [\r\n    2]\nc = 3"
    notes = {1: Note(["a = 1"], 1), 2: Note(["b = [2]"], 1), 4: Note(["c = 3", "d = c"], 1)}
    out = place(SourceMap(source), notes, width=14)
    assert out == "a = 1  # a = 1\r\nb = [\r\n    2]\n# b = [2]\nc = 3\n# c = 3\n# d = c\n"


def test_below_a_header_the_comment_takes_the_body_indent_and_the_header_end():
    source = "for i in range(\n    3,\n):\n        y = i\n\n\n@property\ndef f():\n    return 1\n"
    source_map = SourceMap(source)
    assert source_map.header_end(source_map.statement_at(1)) == 3
    out = place(source_map, {1: Note(["for i in range(3):"], 1)})
    assert out.splitlines()[:4] == ["for i in range(", "    3,", "):", "        # for i in range(3):"]
    nested = "if x:\n    @dec\n    def g():\n        pass\n"
    assert SourceMap(nested).header_end(SourceMap(nested).statement_at(1)) == 1


def test_a_long_comment_below_is_wrapped_under_its_indent():
    source = "def f(x):\n    y = g(x)\n"
    parts = "x_first_part, x_second_part, x_third_part, x_fourth_part, x_fifth"
    text = f"y = jnp.concatenate([{parts}], axis=0) * 2"
    out = place(SourceMap(source), {2: Note([text], 3)}).splitlines()
    assert out[:2] == ["def f(x):", "    y = g(x)"] and len(out) > 3
    assert all(line.startswith("    # ") and len(line) <= 100 for line in out[2:])
    assert out[2] == "    # y = (" and out[-1].endswith("  ×3")  # laid out as ruff lays it out
    code = " ".join(line.removeprefix("    # ") for line in out[2:]).removesuffix("  ×3")
    assert ast.dump(ast.parse(code)) == ast.dump(ast.parse(text))


def test_a_line_with_a_comment_of_its_own_or_trailing_spaces_keeps_them():
    source = "x = 1  # mine\ny = X   \nz = [\r2]\r"
    notes = {1: Note(["x = 1"], 1), 2: Note(["y = X"], 1), 3: Note(["z = [2]"], 1)}
    out = place(SourceMap(source), notes)
    assert out == "x = 1  # mine\n# x = 1\ny = X     # y = X\nz = [\r2]\r# z = [2]\r"


def test_a_comment_below_wraps_exactly_when_it_passes_the_width():
    # Below `def f(x):`, the comment is `    # ` + text: 100 characters fit, 101 do not.
    for size, lines in ((100 - 6, 1), (101 - 6, 3)):
        text = f"y = g({'a' * (size - len('y = g(, b)'))}, b)"
        out = place(SourceMap("def f(x):\n    y = g(x)\n"), {2: Note([text], 1)}, width=100)
        below = out.splitlines()[2:]
        assert len(below) == lines and all(len(line) <= 100 for line in below), below


# -- the writer never changes the code, whatever it says and wherever ------------------------------

# Layouts where a comment can go wrong: a header with its body on one line, statements after `;`
# with a string running on, a backslash continuation, brackets over lines, a form feed and U+2028
# (line breaks to `str.splitlines`, not to Python), CRLF and CR-only files.
LAYOUTS = [
    "def f(x):\n    if x: y = 1\n    return y\n",
    'def f(x):\n    y = 1; s = """a\n  b"""\n    return y\n',
    "def f(x):\n    y = x + \\\n        1\n    return y\n",
    "def f(x):\n    y = g(\n        x,\n    )\n    return y\n",
    "def f(x):\n    y = 1\n\x0c\n    s = 'a\u2028b'; t = 2\n    return y\n",
    "def f(x):\r\n    y = (x\r\n         + 1)\r\n    return y\r\n",
    "def f(x):\r    y = 1\r    return y\r",
    "class A:\n    def f(self, x):\n        for i in range(2): x = x + i\n        return x\n",
]

TEXTS = st.sampled_from([
    "y = x + 1",
    'if downsample:\n    x = layer_norm(params["downsample"][0], x)',
    "for i in range(3):\n    x = x * 2\nelse:\n    pass",
    's = "a\\u2028b"',
    "h = jnp.reshape(x, (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22))",
    "def body(c, v):\n    return c + v, None",
])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(LAYOUTS), st.data())
def test_comments_never_change_the_code_for_any_count_text_or_layout(layout, data):
    """Property: notes of any repeat count, any number of forms, multi-line texts (a statement
    under a flag, a loop), any width, at any line of any layout leave the file's AST as it was."""
    source_map = SourceMap(layout)
    lines = len(source_map.lines)
    notes = data.draw(st.dictionaries(
        st.integers(1, lines),
        st.builds(Note, st.lists(TEXTS, min_size=1, max_size=3), st.integers(0, 10**6), st.integers(1, 5)),
        max_size=lines,
    ))
    width = data.draw(st.sampled_from([20, 60, 100, 400]))
    out = place(source_map, notes, width=width)
    check_same_code(layout, out, "layout.py")
    assert same_code(layout, out)
    for line, note in notes.items():  # and each note that has a statement is there, counted
        if note.texts and source_map.statement_at(line) is not None:
            assert f"# {note.texts[0]}"[:8] in out
            assert note.count <= 1 or f"×{note.count}" in out


def test_a_break_in_the_code_is_named_at_its_line():
    source = "def f(x):\n    y = 1\n    return y\n"
    broken = "def f(x):\n    y = 1\n    # z = 2\n    z = 2  ×3\n    return y\n"
    with pytest.raises(CommentsChangeCode) as caught:
        check_same_code(source, broken, "m.py")
    assert (caught.value.file, caught.value.line) == ("m.py", 4) and "break" in caught.value.detail
    with pytest.raises(CommentsChangeCode) as caught:
        check_same_code(source, source.replace("y = 1", "y = 2"), "m.py")
    assert caught.value.line == 2
