"""The Python API through `import jaxside` only: `export` (its function under jit, grad and vmap
against torch; `check` on a matching and on a broken export; `write`), `review` of a planted-bug
port, `annotate_source`, and how IPython displays each object."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from conftest import SAMPLES, load_sample

import jaxside

ROOT = Path(__file__).resolve().parents[1]
PORTS = ROOT / "tests" / "ports"


@pytest.fixture(scope="module")
def mlp():
    """samples/mlp.py's model, its input, and its export (traced once for the module)."""
    model, (x,) = load_sample("mlp").example()
    return model, x, jaxside.export(model, x)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().numpy()


def test_the_export_is_the_command_lines_module_compiled_in_memory(mlp):
    model, x, exported = mlp
    golden = (ROOT / "tests" / "golden" / "export" / "mlp.py").read_text(encoding="utf-8")
    # The same module `annotate --export` writes (the first line names the file as given).
    assert exported.source.partition("\n")[2] == golden.partition("\n")[2]
    assert exported.forward is exported.module.forward and callable(exported.load_params)
    assert exported.config == exported.Config(eps=model.norm.eps)
    assert {"forward", "load_params", "Config", "config_from"} <= set(dir(exported))
    with pytest.raises(AttributeError, match="defines no 'backward'"):
        exported.backward  # noqa: B018


def test_forward_under_jit_grad_and_vmap_matches_torch(mlp):
    model, x, exported = mlp
    params = exported.load_params(model)
    forward = jax.jit(exported.forward)
    np.testing.assert_allclose(forward(params, jnp.asarray(_numpy(x))), _numpy(model(x)),
                               rtol=1e-5, atol=1e-5)
    smaller = torch.randn(3, 32)  # the batch size is generic: another size, the same function
    np.testing.assert_allclose(forward(params, jnp.asarray(_numpy(smaller))), _numpy(model(smaller)),
                               rtol=1e-5, atol=1e-5)

    grads = jax.jit(jax.grad(lambda p: exported.forward(p, jnp.asarray(_numpy(x))).sum()))(params)
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    for name, parameter in model.named_parameters():
        module, leaf = name.split(".")
        np.testing.assert_allclose(grads[module][leaf], _numpy(parameter.grad), rtol=1e-4, atol=1e-5)
    model.zero_grad(set_to_none=True)

    batches = torch.randn(3, 5, 32)
    mapped = jax.vmap(exported.forward, in_axes=(None, 0))(params, jnp.asarray(_numpy(batches)))
    want = np.stack([_numpy(model(batch)) for batch in batches])
    np.testing.assert_allclose(mapped, want, rtol=1e-5, atol=1e-5)


def test_check_passes_on_the_export_and_fails_on_a_broken_one(mlp):
    model, x, exported = mlp
    report = exported.check()
    assert report.ok and report.comparisons and all(c.ok for c in report.comparisons)
    table = report.table()
    assert str(report) == table and repr(report) == "<CheckReport: 3 leaves compared, all match>"
    assert "on the example inputs" in table and "at a smaller shape" in table and "at a larger shape" in table
    assert "MISMATCH" not in table

    assert "approximate=False" in exported.source  # the exact GELU: planted as the tanh one
    broken = exported.edited(exported.source.replace("approximate=False", "approximate=True"))
    failed = broken.check()
    assert not failed.ok and failed.mismatches and failed.mismatches[0].what == "output"
    assert "MISMATCH" in failed.table() and "differ (rtol 1e-05, atol 1e-06" in failed.table()
    given = broken.check(torch.randn(2, 32))  # the inputs given, and only those
    assert not given.ok and "the inputs given" in given.table() and "larger" not in given.table()


def test_write_follows_the_command_lines_overwrite_rules(mlp, tmp_path):
    _, _, exported = mlp
    target = tmp_path / "mlp_jax.py"
    assert exported.write(target) is True and exported.write(target) is False  # unchanged: not rewritten
    assert target.read_text(encoding="utf-8").startswith(exported.source)
    theirs = tmp_path / "theirs.py"
    theirs.write_text("x = 1\n")
    with pytest.raises(Exception, match="without annotate's seal"):
        exported.write(theirs)
    assert theirs.read_text() == "x = 1\n"
    assert exported.write(theirs, force=True) is True
    with pytest.raises(Exception, match="never overwrites"):
        exported.write(SAMPLES / "mlp.py")


@pytest.fixture(scope="module")
def annotated(mlp):
    model, x, _ = mlp
    return jaxside.annotate_source(model, x)


def test_annotate_source_is_the_command_lines_comments_and_map(annotated):
    golden = (ROOT / "tests" / "golden" / "annotate" / "mlp.py").read_text(encoding="utf-8")
    assert annotated.text == golden and Path(annotated.file) == SAMPLES / "mlp.py"
    assert annotated.map["schema"] == "jaxside.map/1" and annotated.map["entry"] == "MLP"
    lines = {line["line"] for line in annotated.map["lines"]}
    assert lines == {17, 18, 19}  # forward's three lines
    assert annotated.texts() == {str(SAMPLES / "mlp.py"): golden}


@pytest.fixture(scope="module")
def port():
    sys.path.insert(0, str(PORTS))
    try:
        import mlp_port
    finally:
        sys.path.remove(str(PORTS))
    return mlp_port


def test_review_of_a_correct_port_passes(mlp, port):
    model, x, _ = mlp
    report = jaxside.review(model, port.forward, x)
    assert report.ok and report.first_divergence is None
    assert report.weights["params['fc1']['weight']"] == "fc1.weight" and len(report.weights) == 8
    assert report.rows and all(row.ok for row in report.rows)
    assert report.text().endswith("outputs match\n")


@pytest.fixture(scope="module")
def broken_review(mlp, port):
    model, x, _ = mlp
    return jaxside.review(model, port.forward_relu, x)


def test_review_of_a_planted_bug_names_its_line_first(broken_review):
    report = broken_review
    assert not report.ok
    first = report.first_divergence
    port_lines = (PORTS / "mlp_port.py").read_text().splitlines()
    (bug,) = [n for n, line in enumerate(port_lines, 1) if "h = jax.nn.relu(linear(" in line]
    torch_lines = (SAMPLES / "mlp.py").read_text().splitlines()
    (gelu,) = [n for n, line in enumerate(torch_lines, 1) if "F.gelu" in line]
    assert first.port == (str(PORTS / "mlp_port.py"), bug) and first.torch == (str(SAMPLES / "mlp.py"), gelu)
    assert first.error > 0.1 and first.torch_text == "F.gelu(self.fc1(x))"
    text = report.text()
    assert f"  port  mlp_port.py:{bug} " in text and text.endswith("outputs DIVERGE\n")
    assert [row.ok for row in report.rows if row.torch[1] == gelu] == [False]


def test_ipython_shows_each_object_as_a_page_and_a_line(mlp, annotated, broken_review):
    from IPython.core.formatters import DisplayFormatter

    exported = mlp[2]
    shown = DisplayFormatter().format
    objects = {"Export": exported, "Annotated": annotated, "Review": broken_review}
    for kind, value in objects.items():
        formats, _ = shown(value)
        plain, page = formats["text/plain"], formats["text/html"]
        assert plain.startswith(f"<{kind} of ") or plain.startswith(f"<{kind} mlp.py"), plain
        assert "\n" not in plain and page.startswith("<iframe srcdoc=") and len(page) > 2000, kind
    assert "1 defs, 8 weights, generic sizes" in repr(exported)
    assert "outputs DIVERGE, first divergence at mlp.py:17" in repr(objects["Review"])
    # The page is the module's own statements beside the torch lines.
    page = html.unescape(objects["Export"]._repr_html_().partition('srcdoc="')[2])
    assert page.startswith(exported.page())  # the page --html writes, in a frame
    text = html.unescape(re.sub("<[^>]+>", "", page))
    assert 'h @ params["head"]["weight"].T + params["head"]["bias"]' in text


def test_importing_jaxside_and_its_api_imports_neither_torch_nor_jax():
    code = ("import sys, jaxside\n"
            "names = [jaxside.export, jaxside.review, jaxside.annotate_source, jaxside.Export,\n"
            "         jaxside.Review, jaxside.Options]\n"
            "assert not {'torch', 'jax'} & set(sys.modules), sorted({'torch', 'jax'} & set(sys.modules))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_api_and_the_command_line_share_one_set_of_option_names():
    """Every keyword option of the API is a field of the options the command line builds, and every
    such field (but the pipe's `shown_file`) is a flag of the command line: one name for each. The
    fields are read through the records they are grouped in (`Options.source.entry` is ``--entry``),
    and `of` builds the options from exactly those names."""
    import dataclasses
    import inspect
    import typing

    from jaxside.annotate.cli import build_parser
    from jaxside.annotate.options import flag_names
    from jaxside.annotate.review.command import build_parser as build_review_parser

    def leaves(record: type) -> list[str]:
        hints = typing.get_type_hints(record)
        return [name for f in dataclasses.fields(record) for name in (
            leaves(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else [f.name])]

    for options, parser, functions in [
        (jaxside.Options, build_parser(), [jaxside.export, jaxside.annotate_source]),
        (jaxside.ReviewOptions, build_review_parser(), [jaxside.review]),
    ]:
        named = leaves(options)
        assert len(named) == len(set(named)), named  # no name in two records
        fields = set(named) - {"shown_file"}
        flags = {action.dest for action in parser._actions} - {"help", "version"}
        assert fields == flags, fields ^ flags
        assert flag_names(options) == set(named)
        with pytest.raises(TypeError, match="no option colour"):
            options.of(file="m.py", port="p.py", colour=True)
        for function in functions:
            keywords = {p.name for p in inspect.signature(function).parameters.values()
                        if p.kind is p.KEYWORD_ONLY}
            assert keywords and keywords <= fields, (function.__name__, keywords - fields)


def test_review_takes_the_weight_mapping_as_a_dict(mlp, port):
    """`params_map` (``--params-map FILE``) given as the dict itself: the two hidden biases swapped
    make the port diverge at the first layer, and the mapping says so."""
    model, x, _ = mlp
    swapped = {"params['fc1']['bias']": "fc2.bias", "params['fc2']['bias']": "fc1.bias"}
    report = jaxside.review(model, port.forward, x, params_map=swapped)
    assert not report.ok and report.weights["params['fc1']['bias']"] == "fc2.bias"
    assert report.weights["params['fc1']['weight']"] == "fc1.weight"  # the others still guessed
    lines = (SAMPLES / "mlp.py").read_text().splitlines()
    gelu = next(n for n, line in enumerate(lines, 1) if "F.gelu" in line)
    assert report.first_divergence.torch == (str(SAMPLES / "mlp.py"), gelu)
