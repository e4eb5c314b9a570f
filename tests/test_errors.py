"""Every error `annotate` reports: its exit code, one `error: FILE:LINE: ...` line, FILE untouched."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from jaxside.annotate.cli import main

MODEL = '''\
import torch
from torch import nn

SCALE = torch.ones(3)


class Net(nn.Module):
    def __init__(self, dim=3):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)


def double(x):
    return x * 2
'''


class Run:
    """Runs `main` on a file written to a temporary directory, and checks the file stays as it was."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp_path = tmp_path
        self.capsys = capsys
        self.path = tmp_path / "model.py"

    def __call__(self, source: str | bytes | None, *args: str, name: str = "model.py") -> Result:
        self.path = self.tmp_path / name
        if isinstance(source, str):
            self.path.write_text(textwrap.dedent(source), encoding="utf-8")
        elif isinstance(source, bytes):
            self.path.write_bytes(source)
        before = self.path.read_bytes() if self.path.is_file() else None
        code = main(["-q", str(self.path), *args])  # -q: stderr holds only the error
        out, err = self.capsys.readouterr()
        if before is not None:
            assert self.path.read_bytes() == before, "annotate modified its input"
        return Result(code, out, err, str(self.path))


class Result:
    def __init__(self, code: int, out: str, err: str, file: str) -> None:
        self.code, self.out, self.err, self.file = code, out, err, file

    @property
    def line(self) -> str:
        """The one error line: the only line, or the last after the user's own traceback."""
        lines = self.err.strip().splitlines()
        assert lines and lines[-1].startswith("error: "), self.err
        assert sum(line.startswith("error: ") for line in lines) == 1, self.err
        return lines[-1]

    def only_line(self) -> str:
        assert len(self.err.strip().splitlines()) == 1, self.err
        return self.line

    def at(self, line: int, file: str | None = None) -> str:
        """The error line, asserting it names FILE:LINE; returns the text after the location."""
        text = self.only_line()
        prefix = f"error: {file or self.file}:{line}: "
        assert text.startswith(prefix), text
        return text[len(prefix):]


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    return Run(tmp_path, capsys)


def line_of(source: str, text: str) -> int:
    """The 1-based line of `text` in `source` (after dedent)."""
    lines = textwrap.dedent(source).splitlines()
    (index,) = [i for i, line in enumerate(lines) if text in line]
    return index + 1


# -- the file itself ------------------------------------------------------------------------------


def test_missing_file(run, tmp_path):
    result = run(None, name="absent.py")
    assert result.code == 2
    assert result.only_line() == (
        f"error: {tmp_path / 'absent.py'}: no such file; give the path of the torch .py file to annotate"
    )


def test_directory(run, tmp_path):
    (tmp_path / "models").mkdir()
    result = run(None, name="models")
    assert result.code == 2 and "is a directory" in result.only_line()


def test_not_python_binary_and_notebook(run):
    binary = run(b"\x89PNG\r\n\x1a\n\x00\x00\x00", name="weights.py")
    assert binary.code == 2 and "not Python source" in binary.only_line()
    notebook = run('{"cells": [], "nbformat": 4}', name="model.ipynb")
    assert notebook.code == 2 and "nbconvert" in notebook.only_line()


def test_syntax_error_names_its_line(run):
    source = MODEL + "\ndef broken(x):\n    return x +* 2\n"
    result = run(source)
    assert result.code == 2
    assert result.at(line_of(source, "x +* 2")).startswith("syntax error: invalid syntax")


def test_import_time_error_points_at_the_import(run):
    source = "import torch\nimport package_that_is_not_installed\n"
    result = run(source, "--entry", "torch.sin", "--inputs", "torch.ones(2)")
    assert result.code == 3
    assert result.line.startswith(
        f"error: {result.file}:2: ModuleNotFoundError: No module named 'package_that_is_not_installed'"
    )
    assert "install package_that_is_not_installed" in result.line


# -- finding the entry ----------------------------------------------------------------------------


def test_no_entry_lists_what_the_file_defines_and_a_command(run):
    result = run(MODEL)
    assert result.code == 2
    text = result.only_line()
    assert text.startswith(f"error: {result.file}: nothing to trace: no example() and no --entry")
    assert "modules Net and functions double" in text
    assert f"annotate {result.file} --entry 'Net()' --inputs '(torch.randn(1, 16),)'" in text


def test_no_entry_suggests_the_model_a_docstring_names(run):
    """minGPT's layout: the activation's docstring names GPT ("as in OpenAI GPT"); GPT is still the
    module no other one builds, so the command starts from it, not from the activation."""
    result = run("""
        import torch
        from torch import nn


        class NewGELU(nn.Module):
            \"\"\"GELU, as in OpenAI GPT.\"\"\"

            def forward(self, x):
                return torch.tanh(x)  # GPT uses the tanh form


        class GPT(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.act = NewGELU()

            def forward(self, idx):
                return self.act(idx)
    """)
    assert result.code == 2
    command = f"annotate {result.file} --entry 'GPT(config=...)' --inputs '(torch.randn(1, 16),)'"
    assert command in result.only_line()


def test_entry_expression_failing(run):
    result = run(MODEL, "--entry", "Nett()")
    assert result.code == 2
    text = result.only_line()
    assert text.startswith(
        f"error: {result.file}: --entry 'Nett()' raised NameError: name 'Nett' is not defined; "
    )
    assert "defines Net, double" in text


def test_entry_not_an_expression(run):
    result = run(MODEL, "--entry", "Net(")
    assert result.code == 2 and "is not a Python expression" in result.only_line()


def test_inputs_expression_failing(run):
    result = run(MODEL, "--entry", "Net()", "--inputs", "(torch.randn(2, -5),)")
    assert result.code == 2
    assert result.only_line().startswith(
        f"error: {result.file}: --inputs '(torch.randn(2, -5),)' raised RuntimeError: "
    )


def test_entry_raising_inside_the_users_code(run):
    source = MODEL + textwrap.dedent('''
        class Picky(nn.Module):
            def __init__(self, dim):
                if dim < 1:
                    raise ValueError("dim must be positive")
                super().__init__()
    ''')
    result = run(source, "--entry", "Picky(0)", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.line.startswith(
        f"error: {result.file}:{line_of(source, 'raise ValueError')}: ValueError: dim must be positive "
        "(raised while evaluating --entry 'Picky(0)')"
    )


def test_example_raising(run):
    source = MODEL + "\n\ndef example():\n    return Net(), (torch.ones(3).reshape(2, 2),)\n"
    result = run(source)
    assert result.code == 3
    assert result.line.startswith(f"error: {result.file}:{line_of(source, 'reshape(2, 2)')}: RuntimeError: ")
    assert "(raised while calling example())" in result.line


def test_setup_failing(run):
    result = run(MODEL, "--entry", "Net()", "--setup", "model.setup_caches(1, 64)")
    assert result.code == 2
    assert result.only_line().startswith(
        f"error: {result.file}: --setup 'model.setup_caches(1, 64)' raised AttributeError: "
    )


def test_exiting_while_imported(run):
    source = "import sys\n\nsys.exit('this script needs arguments')\n"
    result = run(source, "--entry", "print")
    assert result.code == 3
    assert result.line.startswith(
        f"error: {result.file}:3: SystemExit: this script needs arguments (raised while importing model.py)"
    )


def test_example_returning_the_wrong_shape(run):
    source = MODEL + "\n\ndef example():\n    return Net()\n"
    result = run(source)
    assert result.code == 2
    assert result.at(line_of(source, "def example")) == (
        "example() returned a Net; it must return (fn_or_module, args) or (fn_or_module, args, kwargs)"
    )


def test_entry_is_a_class(run):
    result = run(MODEL, "--entry", "Net")
    assert result.code == 2 and "instantiate it: --entry 'Net(...)'" in result.only_line()


def test_inputs_that_do_not_fit(run):
    result = run(MODEL, "--entry", "Net()", "--inputs", "(torch.ones(3), torch.ones(3))")
    assert result.code == 2
    assert result.at(line_of(MODEL, "def forward")).startswith("the inputs do not fit Net.forward(x)")


# -- the user's code while traced -----------------------------------------------------------------


def test_users_code_raising_shows_their_traceback_only(run):
    source = MODEL + textwrap.dedent('''
        def outer(x):
            return inner(x) + 1

        def inner(x):
            if x.shape[-1] != 4:
                raise ValueError(f"expected 4 features, got {x.shape[-1]}")
            return x
    ''')
    result = run(source, "--entry", "outer", "--inputs", "torch.ones(2, 3)")
    assert result.code == 3
    raise_line = line_of(source, "raise ValueError")
    assert result.line == (f"error: {result.file}:{raise_line}: ValueError: expected 4 features, got 3 "
                           "(raised while tracing outer); fix the code there, or rerun with --debug for the "
                           "full traceback")
    traceback = result.err.splitlines()[:-1]
    assert traceback[0] == "Traceback (most recent call last):"
    assert traceback[-1] == "ValueError: expected 4 features, got 3"
    files = [line for line in traceback if line.startswith("  File ")]
    assert files == [f'  File "{result.file}", line {line_of(source, "inner(x) + 1")}, in outer',
                     f'  File "{result.file}", line {raise_line}, in inner']


def test_torch_raising_inside_the_users_call_points_at_their_line(run):
    source = MODEL + "\n\ndef bad_matmul(x):\n    return torch.matmul(x, torch.ones(5, 2))\n"
    result = run(source, "--entry", "bad_matmul", "--inputs", "torch.ones(2, 3)")
    assert result.code == 3
    assert result.line.startswith(
        f"error: {result.file}:{line_of(source, 'torch.matmul')}: TypeError: dot_general requires "
        "contracting dimensions to have the same shape, got (3,) and (5,). (raised while tracing bad_matmul)"
    )
    assert "torchax" not in result.err and "site-packages" not in result.err


def test_tensor_operator_failing_gets_a_hint(run):
    source = MODEL + "\n\ndef bad_add(x):\n    return x + torch.ones(5, 2)\n"
    result = run(source, "--entry", "bad_add", "--inputs", "torch.ones(2, 3)")
    assert result.code == 3
    assert result.line.startswith(
        f"error: {result.file}:{line_of(source, 'x + torch')}: TypeError: unsupported operand"
    )
    assert "usually shapes that do not broadcast" in result.line


def test_debug_shows_the_full_traceback(run):
    source = MODEL + "\n\ndef bad_matmul(x):\n    return torch.matmul(x, torch.ones(5, 2))\n"
    result = run(source, "--entry", "bad_matmul", "--inputs", "torch.ones(2, 3)", "--debug")
    assert result.code == 3
    assert "torchax" in result.err and result.line.startswith(f"error: {result.file}:")


BRANCHY = MODEL + '''

def branchy(x):
    y = x * 2
    if y.sum() > 0:
        return y
    return -y


def reads_item(x):
    return x * int(x.sum().item())


def masked(x):
    return x[x > 0]


def mixed(x):
    return x + SCALE


def unsupported(x):
    return torch.special.airy_ai(x)
'''


def test_data_dependent_branch(run):
    result = run(BRANCHY, "--entry", "branchy", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.at(line_of(BRANCHY, "if y.sum()")) == (
        "`if y.sum() > 0:` branches on the value of a traced tensor; tracing knows shapes and dtypes, not "
        "values, so Python cannot decide which way to go; use torch.where(cond, a, b), or branch on shapes "
        "or on Python values (--kwargs)"
    )


def test_data_dependent_item_and_mask(run):
    item = run(BRANCHY, "--entry", "reads_item", "--inputs", "torch.ones(3)")
    assert item.code == 3
    assert item.at(line_of(BRANCHY, ".item()")).startswith(
        "`x.sum().item()` reads a traced tensor as a Python number"
    )
    mask = run(BRANCHY, "--entry", "masked", "--inputs", "torch.ones(3)")
    assert mask.code == 3
    assert mask.at(line_of(BRANCHY, "x[x > 0]")).startswith("`x[x > 0]` indexes with a boolean mask")


def test_value_dependent_shape(run):
    source = MODEL + "\n\ndef positions(x):\n    return torch.nonzero(x)\n"
    result = run(source, "--entry", "positions", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.at(line_of(source, "torch.nonzero")).startswith(
        "`torch.nonzero(x)` gives a result whose shape depends on the values"
    )


def test_error_in_an_unwatched_helper_names_the_users_line(run, tmp_path):
    (tmp_path / "helpers.py").write_text("def check(x):\n    raise ValueError('helper says no')\n")
    source = MODEL + "\n\ndef uses_helper(x):\n    from helpers import check\n    return check(x)\n"
    result = run(source, "--entry", "uses_helper", "--inputs", "torch.ones(3)")
    assert result.code == 3
    call_line = line_of(source, "return check(x)")
    assert result.line.startswith(f"error: {result.file}:{call_line}: ValueError: helper says no")
    # ...and the traceback still shows where it was raised.
    assert f'File "{tmp_path / "helpers.py"}", line 2, in check' in result.err


def test_mixing_a_cpu_tensor_with_traced_ones(run):
    result = run(BRANCHY, "--entry", "mixed", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.at(line_of(BRANCHY, "x + SCALE")).startswith(
        "`x + SCALE` mixes `SCALE`, a plain torch tensor made outside the traced call, with traced tensors; "
        "register it as a buffer"
    )


def test_an_op_torchax_cannot_lower(run):
    result = run(BRANCHY, "--entry", "unsupported", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.at(line_of(BRANCHY, "airy_ai(x)")).startswith(
        "`torch.special.airy_ai(x)` calls aten::special_airy_ai, which torchax cannot lower to JAX"
    )


def test_output_objects_holding_tensors_are_dicts_unless_nested_too_deep(run):
    source = MODEL + textwrap.dedent('''
        class Holder:
            def __init__(self, value):
                self.value = value

        def wrapped(x):
            return Holder(x * 2)

        def nested(x):
            value = x * 2
            for _ in range(40):
                value = Holder(value)
            return value
    ''')
    result = run(source, "--entry", "wrapped", "--inputs", "torch.ones(3)")
    assert result.code == 0, result.err
    assert '# return {"value": x * 2.0}' in result.out
    result = run(source, "--entry", "nested", "--inputs", "torch.ones(3)")
    assert result.code == 3
    assert result.at(line_of(source, "def nested")).startswith(
        "nested returned a Holder holding traced tensors, which torch's pytree cannot flatten"
    )


# -- where the result goes ------------------------------------------------------------------------


def test_output_is_the_input_file(run):
    result = run(MODEL, "--entry", "Net()", "--inputs", "torch.ones(3)", "-o", str(Path(run.path)))
    assert result.code == 2
    assert "-o names FILE itself, and annotate never overwrites its input" in result.only_line()


def test_output_directory_missing(run, tmp_path):
    result = run(MODEL, "--entry", "Net()", "-o", str(tmp_path / "nowhere" / "out.py"))
    assert result.code == 2
    assert result.only_line() == (
        f"error: {tmp_path / 'nowhere' / 'out.py'}: its directory {tmp_path / 'nowhere'} does not exist; "
        "create it, or choose another -o"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux's /sys")
def test_output_directory_not_writable(run, monkeypatch):
    # /sys refuses new files even to root, who passes every permission check (as in containers):
    # the path is tried before anything runs, not after the whole trace.
    monkeypatch.setattr(
        "jaxside.tracing.Capture.__call__", lambda *a, **k: pytest.fail("traced before refusing")
    )
    result = run(MODEL, "--entry", "Net()", "--inputs", "torch.ones(3)", "-o", "/sys/jaxside_out.py")
    assert result.code == 2
    assert result.only_line() == (
        "error: /sys/jaxside_out.py: cannot write there (permission denied); choose another -o in a "
        "directory you can write to"
    )


# -- usage ----------------------------------------------------------------------------------------


def test_abstract_with_check_is_refused(run):
    result = run(MODEL, "--abstract", "--check")
    assert result.code == 2
    assert "--check compares numbers with torch, and --abstract has none" in result.only_line()


def test_watch_of_nothing(run):
    result = run(MODEL, "--entry", "Net()", "--watch", "no_such_module_anywhere")
    assert result.code == 2
    assert result.only_line().startswith(
        "error: --watch no_such_module_anywhere: no such file, directory or importable module"
    )


def test_unknown_flag_is_a_usage_error(run):
    result = run(MODEL, "--entyr", "Net()")
    assert result.code == 2
    assert result.only_line() == "error: unrecognized arguments: --entyr Net(); see annotate --help"


def test_internal_error(run, monkeypatch):
    # A bug of ours: it raises in jaxside's own frames, with no user frame to blame.
    monkeypatch.setattr("jaxside.tracing._assemble.SourceIndex", None)
    result = run(MODEL, "--entry", "Net()", "--inputs", "torch.ones(3)")
    assert result.code == 123
    assert result.only_line().startswith(
        "error: internal error: TypeError: 'NoneType' object is not callable"
    )
    assert "please report it with the output of --debug" in result.line
