"""`annotate --json`: the torch line -> JAX statements map, checked against the trace it came from."""

from __future__ import annotations

import ast
import json

from conftest import SAMPLES, load_sample

from jaxside.annotate.cli import main
from jaxside.render.json import SCHEMA, line_map
from jaxside.tracing import capture


def test_map_names_each_value_as_the_trace_does():
    fn, args, *_ = load_sample("mlp").example()
    trace = capture(fn, *args)
    data = json.loads(json.dumps(line_map(trace)))
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
