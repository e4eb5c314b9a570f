"""`annotate --json`: the torch line -> JAX statements map, checked against the trace it came from."""

from __future__ import annotations

import ast
import json

from conftest import SAMPLES, load_sample

from jaxside.annotate.cli import main
from jaxside.render.json_map import SCHEMA, line_map
from jaxside.render.lower import lower
from jaxside.render.source import python_lines
from jaxside.tracing import capture


def test_map_names_each_value_as_the_trace_does():
    fn, args, *_ = load_sample("mlp").example()
    trace = capture(fn, *args)
    data = json.loads(json.dumps(line_map(lower(trace))))
    assert data["schema"] == SCHEMA and data["entry"] == trace.entry
    source = (SAMPLES / "mlp.py").read_text(encoding="utf-8").splitlines()
    origins = {(o.function, o.module_path, o.name, o.line) for o in trace.origins.values()}
    seen = 0
    for line in data["lines"]:
        assert line["file"] == str(SAMPLES / "mlp.py")
        assert line["torch"] and line["torch"].splitlines()[0] in source[line["line"] - 1]
        for statement in line["jax"]:
            ast.parse(statement["code"])  # each is a statement of the exported module
            for value in statement["values"]:
                assert (value["function"], value["module_path"], value["name"], value["line"]) in origins
                assert all(isinstance(d, int) for d in value["shape"]) and value["dtype"]
                seen += 1
    assert seen > 5
    assert any(v["name"] for line in data["lines"] for s in line["jax"] for v in s["values"])


def test_cli_json_to_stdout(capsys):
    assert main([str(SAMPLES / "seed_example.py"), "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == SCHEMA and data["lines"]


def test_cli_refuses_json_with_export(capsys):
    assert main([str(SAMPLES / "seed_example.py"), "--json", "--export"]) == 2
    assert "--json" in capsys.readouterr().err


MULTI_LINE = '''\
import torch


def block(x, w):
    h = torch.matmul(
        x,
        w,
    )
    g = (h
         + 1.0)  # é: columns count UTF-8 bytes
    é = 2.0
    return torch.tanh(
        g * é
    ) - h


def example():
    return block, (torch.ones(2, 3), torch.ones(3, 3))
'''


def test_lines_and_columns_span_the_torch_text_of_multi_line_statements(tmp_path, capsys):
    """Each entry's `line`..`end_line` and `columns` cut exactly its `torch` text out of the file
    (an `end_line` one too high, or a column off, fails), `return` lines included."""
    file = tmp_path / "multi.py"
    file.write_text(MULTI_LINE, encoding="utf-8")
    assert main([str(file), "--json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    source = [line.encode("utf-8") for line in python_lines(MULTI_LINE)]
    spans = []
    for line in data["lines"]:
        for statement in line["jax"]:
            col, end_col = statement["columns"]
            cut = b"\n".join(source[line["line"] - 1:line["end_line"]])
            cut = cut[col:len(cut) - len(source[line["end_line"] - 1]) + end_col]
            assert cut.decode("utf-8") == line["torch"], (line["line"], line["end_line"], col, end_col)
        spans.append((line["line"], line["end_line"], [s["code"] for s in line["jax"]]))
    assert spans == [(5, 8, ["h = x @ w"]), (9, 10, ["g = h + 1.0"]),
                     (12, 14, ["return jnp.tanh(g * 2.0) - h"])]
