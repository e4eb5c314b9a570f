"""Unusual but legal input (issue 33): each a rule for its whole class, each through annotate as
a user meets it."""

from __future__ import annotations

import ast
import errno
import io
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tokenize
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxside.annotate.cli import main
from jaxside.render.source import python_lines

ROOT = Path(__file__).resolve().parents[1]
MODEL = """\
import torch


def twice(x):
    return torch.relu(x) * 2.0


def example():
    return twice, (torch.ones(3),)
"""

# Every character `str.splitlines` breaks at that Python does not (Python: \n, \r\n, \r only).
NOT_PYTHON_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([
    "x = 1", "s = 'a{c}b'", "# note{c}here", "\x0c", "y = (1,\x0c 2)", "t = '''a{c}\nb'''",
]), min_size=1, max_size=8), st.sampled_from(NOT_PYTHON_BREAKS), st.sampled_from(["\n", "\r\n", "\r"]))
def test_source_lines_are_the_lines_python_counts(pieces, char, newline):
    """Property: each token Python reads starts on the line `python_lines` gives it, whatever
    line-break-like characters the source holds in strings and comments (and form feeds, the one
    of them Python also takes as whitespace)."""
    source = newline.join(piece.format(c=char).replace("\n", newline) for piece in pieces) + newline
    lines = python_lines(source)
    for token in tokenize.generate_tokens(io.StringIO(source, newline="").readline):
        if token.type in (tokenize.ENDMARKER, tokenize.DEDENT) or not token.string.strip():
            continue
        row, col = token.start
        assert lines[row - 1][col:].startswith(token.string.split("\n")[0].split("\r")[0]), (row, token)


def test_comments_stay_beside_their_statements_after_a_form_feed_and_u2028(tmp_path, capsys):
    file = tmp_path / "model.py"
    file.write_text('import torch\n\n\x0c\ndef f(x):\n    s = "a\u2028b"\n    y = x * 2.0\n'
                    "    return y + len(s)\n\n\ndef example():\n    return f, (torch.ones(2),)\n",
                    encoding="utf-8")
    assert main(["-q", str(file)]) == 0
    lines = python_lines(capsys.readouterr().out)
    assert lines[2] == "\x0c" and lines[3] == "def f(x):  # jax: def f(x)"
    assert lines[5] == "    y = x * 2.0  # y = x * 2.0"


@pytest.mark.parametrize("where", ["FILE", "-o", "--html", "review PORT"])
def test_a_symbolic_link_loop_is_one_line_exit_2(tmp_path, capsys, where):
    file = tmp_path / "model.py"
    file.write_text(MODEL, encoding="utf-8")
    loop, other = tmp_path / "loop.py", tmp_path / "other.py"
    loop.symlink_to(other)
    other.symlink_to(loop)
    argv = {"FILE": [str(loop)], "-o": [str(file), "-o", str(loop)],
            "--html": [str(file), "--html", str(loop)],
            "review PORT": ["review", str(file), str(loop)]}[where]
    assert main([*argv, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {loop}: ") and "symbolic link loop" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device_is_one_line_exit_2(tmp_path):
    """`annotate model.py > /dev/full`: no internal error, and Python's own flush at exit adds nothing."""
    file = tmp_path / "model.py"
    file.write_text(MODEL, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "jaxside", str(file), "-q", "--json"], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("error: <stdout>: cannot write it (No space left on device); free space on its "
                           "device, or write to a file with -o PATH\n")


class _Full(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("flags", [[], ["--export"]])
def test_stdout_that_fails_in_process_is_one_line_exit_2(tmp_path, capsys, monkeypatch, flags):
    file = tmp_path / "model.py"
    file.write_text(MODEL, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(_Full())))
    assert main([str(file), "-q", *flags]) == 2
    assert capsys.readouterr().err.startswith("error: <stdout>: cannot write it (No space left on device)")


# -- Python constants as outputs (rows 2 and 3) ---------------------------------------------------

CONSTANTS = """\
import torch


def fn(x):
    return x * 2, (float("nan"), float("inf"), -float("inf"), -0.0, 3 + 4j, complex(float("nan"), 1.0),
                   b"raw", ..., slice(1, 2), range(3), frozenset({1}), set(), {2, 1}, None, "s",
                   x.dtype, torch.bfloat16, torch.bool)


def example():
    return fn, (torch.ones(3),)
"""


def test_python_constants_returned_are_exported_as_literals_and_check(tmp_path, capsys):
    file = tmp_path / "consts.py"
    file.write_text(CONSTANTS, encoding="utf-8")
    out = tmp_path / "consts_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert 'float("nan")' in text and "jnp.bfloat16" in text and "slice(1, 2, None)" in text
    assert "'(3+4j)'" not in text and '"torch.' not in text  # no repr strings standing in for values
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("value, kind", [("(i for i in range(2))", "generator"), ("x.device", "device")])
def test_a_returned_value_no_literal_rebuilds_is_refused_in_one_line(tmp_path, capsys, value, kind):
    file = tmp_path / "model.py"
    file.write_text(MODEL.replace("torch.relu(x) * 2.0", f"torch.relu(x) * 2.0, {value}"), encoding="utf-8")
    assert main([str(file), "-q", "--export"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {file}: the entry returns a {kind} (") and "0x" not in err


def _constants(leaf):
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, inner), st.lists(inner, max_size=3),
        st.frozensets(leaf.filter(lambda v: v == v), max_size=3),  # NaN is no set member anyone finds
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.builds(slice, leaf, leaf, leaf),
    ), max_leaves=6)


LEAVES = st.one_of(
    st.none(), st.just(...), st.booleans(), st.integers(), st.floats(), st.complex_numbers(),
    st.text(max_size=5), st.binary(max_size=5),
    st.builds(range, st.integers(-5, 5), st.integers(-5, 5), st.integers(1, 3)),
)


@settings(max_examples=300, deadline=None)
@given(_constants(LEAVES))
def test_every_constant_is_written_as_an_expression_of_the_same_value(value):
    """Property: the export's literal of a returned constant evaluates to the same type and value
    (NaN where NaN was, -0.0 kept), and passes `--check`'s comparison."""
    from jaxside.annotate.compare import _walk
    from jaxside.render.text import value_expr

    expr = value_expr(value)
    assert expr is not None
    text = ast.unparse(ast.fix_missing_locations(expr))
    again = eval(text, {})  # noqa: S307  (our own literal)
    assert type(again) is type(value) and ast.dump(value_expr(again)) == ast.dump(expr)  # -0.0, NaN kept
    assert all(c.ok for c in _walk(again, value, "", None, None, frozenset()))


# -- digit-like module names (rows 4 and 5) -------------------------------------------------------

DIGIT_NAMES = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Module()
        self.layers.add_module("0", nn.Linear(4, 4))
        self.layers.add_module(NAME, nn.Linear(4, 4))

    def forward(self, x):
        for layer in self.layers.children():
            x = layer(x)
        return x


def example():
    return Net(), (torch.ones(2, 4),)
"""


@pytest.mark.parametrize("name", ["²", "١"])  # int() refuses the one, reads the other as 1
def test_a_child_named_with_a_non_ascii_digit_is_a_name_not_a_position(tmp_path, capsys, name):
    file = tmp_path / "digits.py"
    file.write_text(DIGIT_NAMES.replace("NAME", repr(name)), encoding="utf-8")
    out = tmp_path / "digits_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    assert f'params["layers"]["{name}"]["weight"]' in out.read_text(encoding="utf-8")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(categories=["Nd", "No", "Nl"]) | st.sampled_from("0123456789"),
                        min_size=1, max_size=3), min_size=1, max_size=4, unique=True))
def test_only_ascii_digits_are_positions(keys):
    """Property: keys of digits of any script nest as a list only when they are ASCII 0..n-1, and
    addressing each of them, as the export and its loader do, never fails."""
    from jaxside.render.lower.paths import Tree
    from jaxside.render.names import is_index

    tree = Tree([f"layers.{k}.weight" for k in keys])
    listed = "layers" in tree.lists
    assert listed == (sorted(keys, key=lambda k: (len(k), k)) == [str(i) for i in range(len(keys))])
    for key in keys:
        assert is_index(key) == (key.isascii() and key.isdigit())
        node = tree.subscript(ast.Name("params", ast.Load()), f"layers.{key}.weight")
        text = ast.unparse(node)
        assert (f"[{int(key)}]" in text) if listed else (f"[{key!r}]" in text)


def test_an_entry_returning_none_exports_code_ruff_passes(tmp_path, capsys):
    """Row 17: `return None` alone is ruff's RET501 (a default rule of ruff 0.17, the newest)."""
    file = tmp_path / "model.py"
    source = MODEL.replace("return torch.relu(x) * 2.0", "y = x * 2\n    return None")
    file.write_text(source, encoding="utf-8")
    out = tmp_path / "none_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# -- review of a port that makes NaN (row 16) -----------------------------------------------------

REVIEWED = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        h = torch.relu(h)
        return h * 2.0


def example():
    torch.manual_seed(0)
    return Net(), (torch.ones(2, 4),)
"""

# relu(h) all zeros, so h * 2.0 equals it: an all-zero value is no evidence of a pair.
ALL_ZEROS = REVIEWED.replace("""    torch.manual_seed(0)
    return Net(), (torch.ones(2, 4),)
""", """    net = Net()
    with torch.no_grad():
        net.fc.weight.fill_(-1.0)
        net.fc.bias.zero_()
    return net, (torch.ones(2, 4),)
""")

NAN_PORT = """\
import jax.numpy as jnp


def forward(params, x):
    h = x @ params["fc"]["weight"].T + params["fc"]["bias"]
    h = jnp.maximum(h, 0) * jnp.nan
    return h * 2.0
"""


@pytest.mark.parametrize("reviewed", [REVIEWED, ALL_ZEROS], ids=["seeded", "relu_all_zeros"])
def test_review_of_a_port_that_makes_nan_says_nan_and_warns_nothing(reviewed, tmp_path, capsys):
    assert reviewed.count("def example") == 1
    torch_file, port = tmp_path / "net.py", tmp_path / "port.py"
    torch_file.write_text(reviewed, encoding="utf-8")
    port.write_text(NAN_PORT, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert main(["review", str(torch_file), str(port), "-q"]) == 1
    out, err = capsys.readouterr()
    assert "net.py:13               port.py:6                              nan  DIFFERS" in out, out
    assert "Warning" not in err


def test_the_review_error_of_nan_against_numbers_is_nan():
    from jaxside.annotate.review.align import error

    nan, inf = float("nan"), float("inf")
    assert math.isnan(error(np.array([1.0, nan]), np.array([1.0, 2.0])))
    assert error(np.array([1.0, nan, inf, -inf]), np.array([1.5, nan, inf, -inf])) == 0.5
    assert error(np.array([inf]), np.array([-inf])) == inf and error(np.array([]), np.array([])) == 0.0


def test_an_argument_named_params_is_renamed_in_its_shape_guard_too(tmp_path, capsys):
    """Row 1: `forward(self, x, params)`: the export calls the argument `params_1` (`params` is
    the weights); its size guard must read `params_1`, or every call raises."""
    file = tmp_path / "model.py"
    file.write_text(REVIEWED.replace("def forward(self, x):", "def forward(self, x, params):")
                    .replace("return h * 2.0", "return h * params")
                    .replace("(torch.ones(2, 4),)", "(torch.ones(2, 4), torch.ones(2, 4))"), encoding="utf-8")
    out = tmp_path / "model_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert "def forward(params, x, params_1):" in text
    code = text.split("def forward", 1)[1]  # the docstring above speaks of the torch names
    assert "if params_1.shape[0] != x.shape[0]:" in code and "params.shape" not in code


CHATTY = """\
import os
import signal
import re
import sys

import torch


def fn(x):
    print("chatty print")
    os.write(1, b"raw fd write\\n")
    sys.__stdout__.write("dunder stdout\\n")
    return x * 2


def example():
    return fn, (torch.ones(3),)
"""


@pytest.mark.parametrize("flags", [[], ["--export", "--check"]])
def test_stdout_is_clean_at_the_file_descriptor_level(tmp_path, capfd, flags):
    """Row 15: what the model writes to fd 1 (`os.write(1, ...)`, `sys.__stdout__`), while traced
    or while `--check` runs it in torch eager, goes to stderr, not into the output."""
    file = tmp_path / "chatty.py"
    file.write_text(CHATTY, encoding="utf-8")
    assert main([str(file), "-q", *flags]) in (0, 1)
    out, err = capfd.readouterr()
    for said in ("chatty print", "raw fd write", "dunder stdout"):
        assert said not in python_lines(out) and said in err
    if flags:
        compile(out, "export.py", "exec")  # the module alone


def test_an_input_written_in_place_comes_back_and_is_checked(tmp_path, capsys):
    """Row 9: `x.add_(1)` in a module: the export returns `(outputs, {"x": new x})`, its docstring
    says so, and `--check` compares both with torch eager (it reported a false MISMATCH)."""
    file = tmp_path / "model.py"
    file.write_text("import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n"
                    "    def forward(self, x):\n        x.add_(1)\n        return x * 2\n\n\ndef example():\n"
                    "    return Net(), (torch.ones(3),)\n", encoding="utf-8")
    out = tmp_path / "model_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert re.search(r"state x +float32\[3\] .* ok", err), err
    text = out.read_text(encoding="utf-8")
    assert "outputs, new_state = forward(x)" in text and "writes `x` in place" in text


def test_a_file_name_with_a_backslash_is_named_whole_in_the_export(tmp_path, capsys):
    """`we"ird'na\\me.py` is one file name on POSIX, not `me.py` in a folder."""
    file = tmp_path / "we\"ird'na\\me.py"
    file.write_text(MODEL, encoding="utf-8")
    out = tmp_path / "weird_jax.py"
    assert main([str(file), "-q", "--export", "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    namespace: dict = {}
    exec(compile(out.read_text(encoding="utf-8"), str(out), "exec"), namespace)  # noqa: S102
    assert namespace["twice"].__doc__ == "`twice`, we\"ird'na\\me.py:4."


def test_a_traceback_from_stdin_names_stdin_not_its_temporary_copy(capsys, monkeypatch):
    source = MODEL.replace("return torch.relu(x) * 2.0", 'raise ValueError("boom")')
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.encode("utf-8"))))
    assert main(["-", "-q"]) == 3
    err = capsys.readouterr().err
    assert '  File "<stdin>", line 5, in twice\n' in err and "jaxside-" not in err
    assert err.endswith("error: <stdin>:5: ValueError: boom (raised while tracing twice); fix the code "
                        "there, or rerun with --debug for the full traceback\n")


GLOBALS = """\
import logging
import os
import signal
import signal
import sys
import warnings

import jax
import torch

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_default_matmul_precision", "float32")
torch.set_num_threads(1)
torch.set_printoptions(precision=2)
warnings.simplefilter("ignore")
logging.getLogger().setLevel(logging.CRITICAL)
sys.setrecursionlimit(12345)
os.environ["JAXSIDE_TEST_LEFT_BEHIND"] = "1"
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def fn(x):
    return x * 2


def example():
    return fn, (torch.ones(3),)
"""


def test_in_process_main_puts_back_what_the_users_file_changed(tmp_path, capsys):
    import jax
    import torch

    file = tmp_path / "model.py"
    file.write_text(GLOBALS, encoding="utf-8")
    before = (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision, torch.get_num_threads(),
              torch._tensor_str.PRINT_OPTS.precision, list(warnings.filters), logging.getLogger().level,
              sys.getrecursionlimit(), signal.getsignal(signal.SIGTERM))
    assert main([str(file), "-q"]) == 0, capsys.readouterr().err
    after = (jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision, torch.get_num_threads(),
             torch._tensor_str.PRINT_OPTS.precision, list(warnings.filters), logging.getLogger().level,
             sys.getrecursionlimit(), signal.getsignal(signal.SIGTERM))
    assert after == before and "JAXSIDE_TEST_LEFT_BEHIND" not in os.environ
