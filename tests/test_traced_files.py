"""The main job as users run it: an `example()` file whose model lives in another module, or in an
installed library; comments go where the code is, every output comes from one trace, no engine noise."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import html
import importlib
import io
import json
import re
import shutil
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from jaxside.annotate import cli, files
from jaxside.annotate.check import load_module
from jaxside.annotate.cli import main
from jaxside.annotate.errors import Failure
from jaxside.annotate.seal import unsealed
from jaxside.render.comments import same_code
from jaxside.tracing import Site

MODELS = Path(__file__).resolve().parent / "models"


@pytest.fixture(autouse=True)
def fresh_imports(monkeypatch):
    """The project's `import tiny_gpt` finds its own file, as in a new process: other tests import
    tests/models/tiny_gpt.py under that name (`conftest.load_model`), and it is forgotten here."""
    monkeypatch.delitem(sys.modules, "tiny_gpt", raising=False)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """tests/models/ copied to a temporary directory: runs there may write, and must not write over it."""
    root = tmp_path_factory.mktemp("project")
    for name in ("tiny_gpt.py", "run_tiny_gpt.py", "run_hf_llama.py"):
        shutil.copy(MODELS / name, root / name)
    return root


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def gpt_comments(project):
    """`annotate run_tiny_gpt.py`: exit code, stdout and stderr, run once for the tests below (a module
    fixture cannot take capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("always")  # and printed on stderr, as outside pytest (which records them)
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: print(
            warnings.formatwarning(message, category, filename, lineno, line), file=sys.stderr)
        code = main([str(project / "run_tiny_gpt.py")])
    return code, out.getvalue(), err.getvalue()


def test_two_files_stdout_holds_the_model_files_comments(project, gpt_comments):
    code, out, err = gpt_comments
    assert code == 0
    model = (project / "tiny_gpt.py").read_text()
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(model))  # the model's file, code untouched
    assert "# jax: def causal_self_attention_forward(params, x, *, config)" in out
    assert "def example" not in out
    note = [line for line in err.splitlines() if "showing tiny_gpt.py" in line]
    assert len(note) == 1 and "run_tiny_gpt.py made no JAX itself" in note[0], err


def test_engine_warnings_are_replaced_by_one_line_about_the_users_code(project, gpt_comments):
    _, _, err = gpt_comments
    assert "Warning" not in err and "lax_numpy" not in err, err
    line = next(n for n, text in enumerate((project / "tiny_gpt.py").read_text().splitlines(), 1)
                if "torch.arange(" in text)
    said = [text for text in err.splitlines() if "int64" in text]
    assert said == [f"annotate: tiny_gpt.py:{line}: torch.arange asks for int64, which JAX computes as "
                    "int32 (JAX has no 64-bit types unless jax_enable_x64 is on)"], err


def test_output_directory_gets_a_copy_of_each_traced_file_and_no_original_changes(
        project, gpt_comments, tmp_path, capsys):
    before = {p.name: digest(p) for p in project.iterdir()}
    code, out, err = run(capsys, project / "run_tiny_gpt.py", "-o", f"{tmp_path}/annotated/")
    assert code == 0 and out == ""
    written = sorted(p.name for p in (tmp_path / "annotated").iterdir())
    assert written == ["tiny_gpt.py"]  # the example() file made no JAX: no copy of it
    assert unsealed((tmp_path / "annotated" / "tiny_gpt.py").read_bytes()).decode() == gpt_comments[1]
    assert {p.name: digest(p) for p in project.iterdir()} == before
    assert "wrote" in err and "--file NAME" not in err


@pytest.mark.parametrize("flags", [["-o"], ["--export", "-o"]])
def test_output_naming_a_traced_module_is_refused(project, capsys, flags):
    before = digest(project / "tiny_gpt.py")
    code, out, err = run(capsys, project / "run_tiny_gpt.py", *flags, project / "tiny_gpt.py", "--force")
    assert code == 2 and out == ""
    assert "tiny_gpt.py, which the trace ran" in err.splitlines()[-1]
    assert digest(project / "tiny_gpt.py") == before


@pytest.mark.parametrize("argv, said", [
    (["-o", "{dir}/"], "FILE's own directory"),
    (["--json", "--export"], "--json map.json"),
    (["--export", "-o", "{tmp}/out/"], "--export writes one module"),
    (["--json", "-o", "{tmp}/out/"], "one map of every file"),
    (["--file", "tiny_gpt.py", "-o", "{tmp}/out/"], "give one of them"),
    (["--file", "tiny_gpt.py", "--export"], "drop --file"),
    (["--json", "-", "--html", "-"], "--html - and --json - both want stdout"),
    (["--json", "-", "--html", "-", "-o", "-"], "-o - and --html - and --json - all want stdout"),
    (["--json", "{tmp}/same", "--html", "{tmp}/same"], "name the same file"),
])
def test_combinations_that_cannot_work_are_refused_before_anything_runs(
        project, tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.setattr(cli, "_annotate", lambda *a: pytest.fail("ran"))
    argv = [a.format(dir=project, tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, project / "run_tiny_gpt.py", *argv)
    assert code == 2 and out == "" and said in err and len(err.splitlines()) == 1, err


def test_check_alone_writes_the_comments_and_checks(project, gpt_comments, capsys):
    code, out, err = run(capsys, project / "run_tiny_gpt.py", "--check")
    # One lowering a run: the comments are those of the program checked, its sizes generic.
    plain, generic = gpt_comments[1], "jnp.reshape(k, (B, T, config.n_head, x.shape[2] // config.n_head))"
    assert code == 0 and same_code(plain, out) and generic in out and generic not in plain
    assert "--check: the export against torch eager" in err and " ok" in err
    assert "not written: --export -o PATH keeps it" in err
    assert len([line for line in err.splitlines() if "int64" in line]) == 1, err  # said once a run


def test_json_before_file_still_reads_file(project, capsys):
    code, out, _ = run(capsys, "--json", project / "run_tiny_gpt.py", "-q")
    assert code == 0 and json.loads(out)["lines"]


def test_every_output_from_one_capture_and_one_lowering(project, tmp_path, capsys, monkeypatch):
    """One capture (and the traces at other sizes that make sizes generic), lowered once: the page
    and the map show the statements of the module written."""
    from jaxside.tracing import _capture

    calls = []
    original = _capture.Capture.__call__
    monkeypatch.setattr(_capture.Capture, "__call__", lambda self, *a, **k: calls.append(dict(
        self.resize)) or original(self, *a, **k))
    module, view, map_ = tmp_path / "gpt_jax.py", tmp_path / "view.html", tmp_path / "map.json"
    code, out, err = run(capsys, project / "run_tiny_gpt.py", "--export", "-o", module, "--html", view,
                         "--json", map_, "--check")
    assert code == 0 and out == "", err
    assert calls[0] == {} and all(calls[1:])  # the capture, then only traces at other sizes
    written = module.read_text(encoding="utf-8")
    exported = load_module(written)
    assert callable(exported.forward) and "--check: the export against torch eager" in err
    lines = json.loads(map_.read_text())["lines"]
    assert lines and {line["file"] for line in lines} == {str(project / "tiny_gpt.py")}
    page = view.read_text(encoding="utf-8")
    assert "CausalSelfAttention" in page  # the view is of the model's file
    generic = "y = jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (B, T, x.shape[2]))"
    assert generic in written and generic in html.unescape(re.sub("<[^>]+>", "", page))
    assert generic in [statement["code"] for line in lines for statement in line["jax"]]


FUNCTION_ENTRY = '''
import warnings

import torch
from tiny_gpt import new_gelu


def gelu_probabilities(x):
    warnings.warn("gelu_probabilities is experimental")
    return new_gelu(x).softmax(-1)


def example():
    return gelu_probabilities, (torch.randn(2, 8),)
'''


def test_a_function_entry_records_the_module_it_imports_and_file_picks_it(project, capsys):
    (project / "run_fn.py").write_text(FUNCTION_ENTRY)
    with pytest.warns(UserWarning, match="gelu_probabilities is experimental"):  # the user's: kept
        code, out, err = run(capsys, project / "run_fn.py", "--file", "tiny_gpt.py")
    assert code == 0, err
    assert "def new_gelu(x):  # jax: def new_gelu(x)" in out and "gelu_probabilities" not in out
    note = next(line for line in err.splitlines() if "showing" in line)
    assert "showing tiny_gpt.py (1 line made JAX)" in note and "run_fn.py (1)" in note, err


def test_installed_library_model_comments_go_to_its_modeling_file(project, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    modeling = Path(transformers.models.llama.modeling_llama.__file__).resolve()
    before = digest(modeling)
    code, out, err = run(capsys, project / "run_hf_llama.py")
    assert code == 0
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(modeling.read_text()))
    assert "# jax: def llama_attention_forward(" in out
    assert "showing modeling_llama.py" in err and "-o DIR/" in err
    code, out, err = run(capsys, project / "run_hf_llama.py", "-o", f"{tmp_path}/hf/", "-q")
    assert code == 0 and out == "" and err == ""
    copy = tmp_path / "hf" / "modeling_llama.py"
    assert "# jax: def llama_attention_forward(" in copy.read_text()
    assert digest(modeling) == before


def fake_trace(entry: str, *lines: tuple[str, int]) -> SimpleNamespace:
    return SimpleNamespace(eqn_sites=[Site(f, n, n, 0, 1) for f, n in lines] + [None],
                           root=SimpleNamespace(file=entry))


@pytest.fixture
def sources(monkeypatch):
    """Every path in the fake traces below is a file with a source."""
    monkeypatch.setattr(files, "_has_source", lambda file: not file.startswith("<"))


def test_an_entry_expression_is_no_file_to_show(project, capsys):
    (project / "plain.py").write_text("import torch\n")
    code, out, err = run(capsys, project / "plain.py", "--entry", "lambda x: torch.sin(x)",
                         "--inputs", "torch.ones(3)")
    assert code == 0 and out == "import torch\n", err  # FILE, as it is: the lambda has no file
    assert "showing" not in err


def test_the_shown_file_is_file_when_it_made_jax_else_the_one_with_most_lines(sources):
    trace = fake_trace("/p/model.py", ("/p/run.py", 3), ("/p/model.py", 1), ("/p/model.py", 1),
                       ("/p/lib/util.py", 1), ("/p/lib/util.py", 2))
    assert files.choose(trace, "/p/run.py").shown == "/p/run.py"
    assert files.choose(trace, "/p/other.py").shown == "/p/lib/util.py"  # 2 lines beat 1
    tie = fake_trace("/p/model.py", ("/p/a.py", 1), ("/p/model.py", 1))
    assert files.choose(tie, "/p/run.py").shown == "/p/model.py"  # a tie: the entry's own file
    assert files.choose(tie, "/p/run.py", wanted="a.py").shown == "/p/a.py"
    twins = fake_trace("/p/model.py", ("/p/model.py", 1), ("/q/model.py", 2))
    with pytest.raises(Failure) as refused:
        files.choose(twins, "/p/run.py", wanted="model.py")
    assert refused.value.text() == ("error: --file model.py names 2 traced files; give more of the path: "
                                    "p/model.py, q/model.py")
    assert files.choose(twins, "/p/run.py", wanted="q/model.py").shown == "/q/model.py"


def test_short_names_are_the_shortest_distinct_tails():
    names = files.short_names(["/x/llama/model.py", "/x/gpt/model.py", "/x/run.py"])
    assert names == {"/x/llama/model.py": "llama/model.py", "/x/gpt/model.py": "gpt/model.py",
                     "/x/run.py": "run.py"}


def test_modules_imported_from_files_directory_count_but_not_a_venv_there(tmp_path, monkeypatch):
    site = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "installed_lib_xyz.py").write_text("def f():\n    return 1\n")
    (tmp_path / "sibling_model_xyz.py").write_text("import installed_lib_xyz\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    try:
        importlib.import_module("sibling_model_xyz")
        found = files.imported_beside(before, str(tmp_path / "run.py"))
    finally:
        for name in ("sibling_model_xyz", "installed_lib_xyz"):
            sys.modules.pop(name, None)
    assert found == [str((tmp_path / "sibling_model_xyz.py").resolve())]
