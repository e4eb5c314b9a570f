"""Unusual and hostile input files, outputs and runs: each once broke `annotate`.

Files in other encodings and newline styles, standard input and pipes, an ASCII-only stdout,
Ctrl-C at any moment, user files that change torch's global settings, output paths that hold
someone else's file. Everything runs the real tracer and renderer.
"""

from __future__ import annotations

import ast
import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from jaxside.annotate.cli import main
from jaxside.render.comments import display_width

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

ROOT = Path(__file__).resolve().parents[1]

MODEL = """\
import torch


def double_plus_one(x):
    y = x * 2  # {comment}
    return y + 1


def example():
    return double_plus_one, (torch.ones(3),)
"""


def model(comment: str = "twice") -> str:
    return MODEL.format(comment=comment)


def annotated(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> bytes:
    """stdout of a run that must succeed."""
    code = main(["-q", *argv])
    out, err = capsysbinary.readouterr()
    assert code == 0, err.decode()
    return out


# -- encodings and newlines ---------------------------------------------------------------------


def test_utf8_bom_is_kept_in_comments_mode(tmp_path, capsysbinary):
    file = tmp_path / "bom.py"
    file.write_bytes(b"\xef\xbb\xbf" + model("größe").encode())
    out = annotated(capsysbinary, str(file))
    assert out.startswith(b"\xef\xbb\xbfimport torch\n")
    assert b"# y = x * 2.0\n" in out and "# größe".encode() in out
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(file.read_bytes()))


def test_utf8_bom_in_html_mode(tmp_path, capsysbinary):
    file = tmp_path / "bom.py"
    file.write_bytes(b"\xef\xbb\xbf" + model().encode())
    page = tmp_path / "view.html"
    assert annotated(capsysbinary, str(file), "--html", str(page)) == b""
    text = page.read_text(encoding="utf-8")
    assert "double_plus_one" in text and "\ufeff" not in text


def test_latin1_coding_cookie_comes_back_in_latin1(tmp_path, capsysbinary):
    file = tmp_path / "latin.py"
    source = "# -*- coding: latin-1 -*-\n" + model("été, ×2")
    file.write_bytes(source.encode("latin-1"))
    out = annotated(capsysbinary, str(file))
    text = out.decode("latin-1")  # as Python would read it: the cookie says latin-1
    assert "# été, ×2\n" in text and "# y = x * 2.0" in text
    assert ast.dump(ast.parse(out)) == ast.dump(ast.parse(file.read_bytes()))


def test_crlf_file_keeps_crlf(tmp_path, capsysbinary):
    file = tmp_path / "windows.py"
    file.write_bytes(model().replace("\n", "\r\n").encode())
    out = annotated(capsysbinary, str(file))
    assert b"# y = x * 2.0" in out
    assert out.count(b"\n") == out.count(b"\r\n") > model().count("\n")


def test_a_comment_goes_below_a_line_that_has_one(tmp_path, capsysbinary):
    file = tmp_path / "commented.py"
    file.write_text(model("twice"), encoding="utf-8")
    lines = annotated(capsysbinary, str(file)).decode().splitlines()
    at = lines.index("    y = x * 2  # twice")  # the user's line, as it was
    assert lines[at + 1] == "    # y = x * 2.0"
    assert all(line.count("#") <= 1 for line in lines)


def test_wide_characters_count_two_columns(tmp_path, capsysbinary):
    # 40 CJK characters: 40 code points, but 80 columns on screen.
    wide = "名" * 40
    file = tmp_path / "wide.py"
    file.write_text(MODEL.replace("y = x * 2  # {comment}", f'y = x * len("{wide}")'), encoding="utf-8")
    lines = annotated(capsysbinary, str(file)).decode().splitlines()
    line = f'    y = x * len("{wide}")'
    assert len(line) + len("  # y = x * 40.0") <= 100 < display_width(line) + len("  # y = x * 40.0")
    assert line in lines and lines[lines.index(line) + 1] == "    # y = x * 40.0"
    assert max(display_width(text) for text in lines) <= 100


def test_display_width():
    assert display_width("abc") == 3
    assert display_width("名字") == 4
    assert display_width("e\u0301") == 1  # a combining accent takes no column


# -- standard input, pipes, an ASCII-only stdout ------------------------------------------------


def test_dash_reads_the_file_from_stdin(tmp_path, capsysbinary, monkeypatch):
    file = tmp_path / "model.py"
    file.write_text(model(), encoding="utf-8")
    expected = annotated(capsysbinary, str(file))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(file.read_bytes())))
    assert annotated(capsysbinary, "-") == expected


def test_a_pipe_as_the_input_file(tmp_path, capsysbinary):
    file = tmp_path / "model.py"
    file.write_text(model(), encoding="utf-8")
    expected = annotated(capsysbinary, str(file))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(file.read_bytes(),))
    writer.start()
    assert annotated(capsysbinary, str(fifo)) == expected
    writer.join()


def test_errors_in_a_piped_file_name_it_as_given(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"import torch\n\n\nx = 1 +\n")))
    assert main(["-"]) == 2
    assert capsys.readouterr().err == (
        "error: <stdin>:4: syntax error: invalid syntax (column 8); annotate imports the file as Python "
        "does, so it must parse; fix that line\n"
    )


def test_ascii_only_stdout_gets_the_files_own_bytes(tmp_path, capsysbinary, monkeypatch):
    # PYTHONIOENCODING=ascii or LANG=C: the annotated file is still written as the file's bytes.
    file = tmp_path / "model.py"
    file.write_text(model("größe"), encoding="utf-8")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["-q", str(file)]) == 0
    out = stdout.buffer.getvalue()
    assert "# größe".encode() in out and b"# y = x * 2.0" in out


def test_dev_stdin_with_an_ascii_locale_in_a_real_process(tmp_path):
    file = tmp_path / "model.py"
    file.write_text(model("größe ×2"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}
    with open(file, "rb") as stdin:
        result = subprocess.run(
            [sys.executable, "-m", "jaxside", "/dev/stdin", "-q"],
            stdin=stdin, capture_output=True, env=env, cwd=tmp_path,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert "# größe ×2".encode() in result.stdout and b"# y = x * 2.0" in result.stdout


# -- Ctrl-C -----------------------------------------------------------------------------------------

GC_INTERRUPT = """\
import gc
import signal

import torch

fired = []


def _interrupt_inside_a_gc_callback(phase, info):
    # What a Ctrl-C during jax's gc callback looks like: Python ignores what a callback raises.
    if not fired:
        fired.append(phase)
        {unregister}
        signal.raise_signal(signal.SIGINT)


gc.callbacks.append(_interrupt_inside_a_gc_callback)
gc.collect()
if _interrupt_inside_a_gc_callback in gc.callbacks:
    gc.callbacks.remove(_interrupt_inside_a_gc_callback)


def example():
    return torch.nn.Linear(3, 3), (torch.ones(3),)
"""


@pytest.mark.parametrize("unregister", [
    "pass",  # seen as a gc callback: the interrupt is raised again just after it
    # not seen as one: raised in it and lost, but the run stops at its next checkpoint
    pytest.param("gc.callbacks.remove(_interrupt_inside_a_gc_callback)", marks=pytest.mark.filterwarnings(
        "ignore::pytest.PytestUnraisableExceptionWarning")),
])
def test_ctrl_c_inside_a_gc_callback_still_ends_the_run(tmp_path, capsys, unregister):
    file = tmp_path / "model.py"
    file.write_text(GC_INTERRUPT.replace("{unregister}", unregister), encoding="utf-8")
    out = tmp_path / "out.py"
    assert main([str(file), "-o", str(out)]) == 130
    assert capsys.readouterr().err.endswith("error: interrupted\n")
    assert not out.exists()


SLOW = """\
import time

import torch

time.sleep(60)  # a long model build: the run cannot end before the Ctrl-C


def example():
    return torch.nn.Linear(3, 3), (torch.ones(3),)
"""


def test_ctrl_c_at_any_moment_exits_130_and_writes_nothing(tmp_path):
    file = tmp_path / "model.py"
    file.write_text(SLOW, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    delays = (0.0, 0.4, 1.0, 2.0)  # after the first status line: imports, then the model build
    runs = []
    for n, delay in enumerate(delays):
        out = tmp_path / f"out{n}.py"
        process = subprocess.Popen(
            [sys.executable, "-m", "jaxside", str(file), "-o", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
        )
        runs.append((process, delay, out))
    for process, delay, _ in runs:
        assert process.stderr.readline() == b"annotate: loading torch and jax\n"
        threading.Timer(delay, process.send_signal, (signal.SIGINT,)).start()
    for process, delay, out in runs:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 130, (delay, stderr.decode())
        assert stderr.endswith(b"error: interrupted\n") and stdout == b"" and not out.exists()
        assert list(tmp_path.glob(f".{out.name}*")) == []


# -- a file that changes torch's global settings --------------------------------------------------

SETTINGS = """\
import torch
from torch.overrides import BaseTorchFunctionMode

torch.set_default_device("meta")
torch.set_default_dtype(torch.float64)
torch.set_grad_enabled(False)
BaseTorchFunctionMode().__enter__()
{tail}

def example():
    return torch.nn.Linear(3, 3, device="cpu"), (torch.ones(3, device="cpu"),)
"""


LEFT_IN_A_DISPATCH_MODE = """
from torch.utils._python_dispatch import TorchDispatchMode


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


PassThrough().__enter__()
raise RuntimeError("broken at import")
"""


@pytest.mark.parametrize("tail, code", [("", 0), (LEFT_IN_A_DISPATCH_MODE, 3)])
def test_torch_settings_a_file_changes_are_put_back(tmp_path, capsys, tail, code):
    file = tmp_path / "model.py"
    file.write_text(SETTINGS.replace("{tail}", tail), encoding="utf-8")
    assert main(["-q", str(file)]) == code, capsys.readouterr().err
    assert torch.get_default_dtype() == torch.float32
    assert torch.get_default_device() == torch.device("cpu") and torch.ones(1).device.type == "cpu"
    assert torch.is_grad_enabled()
    assert torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0


# -- output paths ---------------------------------------------------------------------------------


def test_output_holding_someone_elses_file_needs_force(tmp_path, capsys):
    file = tmp_path / "model.py"
    file.write_text(model(), encoding="utf-8")
    notes = tmp_path / "notes.py"
    notes.write_text("my own notes\n", encoding="utf-8")
    assert main(["-q", str(file), "-o", str(notes)]) == 2
    assert capsys.readouterr().err == (
        f"error: {notes}: exists, and annotate did not write it; pass --force to replace it, or choose "
        "another -o\n"
    )
    assert notes.read_text() == "my own notes\n"
    assert main(["-q", str(file), "-o", str(notes), "--force"]) == 0
    first = notes.read_bytes()
    assert b"# y = x * 2.0" in first
    # annotate's own output is replaced without --force, when FILE changed.
    file.write_text(model().replace("x * 2", "x * 3"), encoding="utf-8")
    assert main(["-q", str(file), "-o", str(notes)]) == 0
    assert b"# y = x * 3.0" in notes.read_bytes()


def test_output_to_a_device_is_written_into_not_replaced(tmp_path, capsys):
    file = tmp_path / "model.py"
    file.write_text(model(), encoding="utf-8")
    assert main(["-q", str(file), "-o", os.devnull]) == 0
    assert Path(os.devnull).exists() and not Path(os.devnull).is_file()


def test_output_keeps_the_mode_of_the_file_it_replaces(tmp_path, capsys):
    file = tmp_path / "model.py"
    file.write_text(model(), encoding="utf-8")
    out = tmp_path / "out.py"
    out.write_text("", encoding="utf-8")
    out.chmod(0o640)
    assert main(["-q", str(file), "-o", str(out)]) == 0
    assert out.stat().st_mode & 0o777 == 0o640 and b"# y" in out.read_bytes()
