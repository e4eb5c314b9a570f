"""`tracing._source`: from an instruction to its source span, text and AST expression."""

from __future__ import annotations

import ast
import dis

from jaxside.tracing._source import SourceIndex


def test_non_ascii_source_keeps_its_spans_and_nodes(tmp_path):
    # Positions count UTF-8 bytes: `é` is two, `—` three, so every span after them is shifted.
    file = tmp_path / "model.py"
    file.write_text('def f(x, y):\n    é = "—"; return (x +\n        y) * 2\n', encoding="utf-8")
    module = compile(file.read_text(encoding="utf-8"), str(file), "exec")
    code = next(c for c in module.co_consts if hasattr(c, "co_code"))
    offsets = {(i.opname, i.argrepr): i.offset for i in dis.get_instructions(code)}
    sources = SourceIndex()

    add = sources.site(code, offsets["BINARY_OP", "+"])
    assert (add.line, add.end_line, add.text) == (2, 3, "x +\n        y")
    node = sources.expression(add)
    assert isinstance(node, ast.BinOp) and ast.unparse(node) == "x + y"

    dash = sources.site(code, offsets["LOAD_CONST", "'—'"])
    assert dash.text == '"—"'
    assert ast.literal_eval(sources.expression(dash)) == "—"

    statement = sources.site(code, offsets["RETURN_VALUE", ""])
    assert statement.text == "return (x +\n        y) * 2"
    assert sources.expression(statement) is None  # a statement, not an expression
