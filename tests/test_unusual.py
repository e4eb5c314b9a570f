"""Unusual but legal input (issue 33): each a rule for its whole class, each through annotate as
a user meets it."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import tokenize
from pathlib import Path

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
    "x = 1", "s = 'a{c}b'", "# note{c}here", "{c}", "y = (1,{c} 2)", "t = '''a{c}\nb'''",
]), min_size=1, max_size=8), st.sampled_from(NOT_PYTHON_BREAKS), st.sampled_from(["\n", "\r\n", "\r"]))
def test_source_lines_are_the_lines_python_counts(pieces, char, newline):
    """Property: each token Python reads starts on the line `python_lines` gives it, whatever
    line-break-like characters the source holds in strings, comments and blank lines."""
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
