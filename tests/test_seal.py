"""What counts as "annotate wrote this file": its seal (annotate/seal.py), never words in it. A
user's file is refused by `-o` and `--html` without `--force` whatever it says; annotate's own
output, of every form, is replaced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jaxside.annotate.cli import main
from jaxside.annotate.seal import is_sealed, seal, unsealed

MODEL = """\
import torch


def twice(x):
    return torch.relu(x) * 2.0


def example():
    return twice, (torch.ones(3),)
"""

# Ordinary files, each of which an earlier rule took for annotate's: it names jax, jaxside, holds a
# `# jax:` note, a `jax: def`, or looks like a seal with a made-up digest.
USER_FILES = {
    "port.py": "import jax\nimport jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.tanh(x)\n",
    "handport.py": '"""My port, checked by hand against jaxside\'s export."""\nimport jax\n',
    "remember.py": "x = 1  # jax: remember to port this\n",
    "jaxdef.py": "# notes: jax: def forward(x)\n",
    "forged.py": "# jaxside: written by annotate, digest " + "0123456789abcdef" * 2 + "\n",
    "model_copy.py": MODEL,  # FILE's own code (with the user's comments it may hold)
}


@pytest.fixture
def file(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(USER_FILES))
@pytest.mark.parametrize("flags", [[], ["--export"], ["--json"], ["--html"]],
                         ids=["comments", "export", "json", "html"])
def test_a_users_file_is_refused_without_force(file, capsys, name, flags):
    target = file.parent / name
    target.write_text(USER_FILES[name], encoding="utf-8")
    argv = ["-q", str(file), *flags, *([] if flags == ["--html"] else ["-o"]), str(target)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {target}: exists without annotate's seal")
    assert "--force" in err
    assert target.read_text(encoding="utf-8") == USER_FILES[name]


@pytest.mark.parametrize("flags, form", [([], "python"), (["--export"], "python"), (["--json"], "json"),
                                         (["--html"], "html")], ids=["comments", "export", "json", "html"])
def test_our_own_output_is_replaced_and_an_edited_one_refused(file, capsys, flags, form):
    target = file.parent / ("out.html" if form == "html" else "out.json" if form == "json" else "out.py")
    argv = ["-q", str(file), *flags, *([] if form == "html" else ["-o"]), str(target)]
    target.write_text("someone's\n", encoding="utf-8")
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err
    first = target.read_bytes()
    assert is_sealed(first)
    if form == "json":
        assert json.loads(first)["schema"]  # still one JSON document, its seal one more key
    elif form == "python":
        compile(first, str(target), "exec")
    file.write_text(MODEL.replace("2.0", "3.0"), encoding="utf-8")
    assert main(argv) == 0, capsys.readouterr().err
    second = target.read_bytes()
    assert second != first and b"3.0" in second and is_sealed(second)
    # a person edits annotate's output: it is theirs now
    target.write_bytes(second.replace(b"3.0", b"4.0"))
    assert main(argv) == 2
    assert "exists without annotate's seal" in capsys.readouterr().err


def test_stdout_carries_no_seal(file, capsysbinary):
    assert main(["-q", str(file)]) == 0
    assert b"digest" not in capsysbinary.readouterr().out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
       st.sampled_from(["python", "module", "html"]))
@example(b"import jax\n", "python")
@example(b"x = 1  # jax: remember\r\n", "python")
@example(b"", "python")
def test_the_seal_matches_its_file_and_nothing_else(data, form):
    """Property: ordinary text is not sealed, whatever it holds (seal-like lines with any digest
    included); sealed text is, with any line ending; changing any one byte of it breaks the seal."""
    assert not is_sealed(data)
    assert not is_sealed(data + b"# jaxside: written by annotate, digest " + b"a" * 32 + b"\n")
    sealed = seal(data, form)
    assert sealed.startswith(data) and is_sealed(sealed)
    # The line ending a file without one, and after an indented block the blank lines `ruff format` wants.
    assert unsealed(sealed).startswith(data) and unsealed(data) == data
    assert unsealed(sealed)[len(data):].strip(b"\r\n") == b""
    assert not is_sealed(sealed + b"x") and not is_sealed(b"x" + sealed)
    for at in range(0, len(sealed), max(1, len(sealed) // 13)):
        changed = sealed[:at] + bytes([sealed[at] ^ 1]) + sealed[at + 1:]
        assert not is_sealed(changed)


def test_a_sealed_module_passes_ruff_format():
    """Exports end in a def: the seal follows it after two blank lines, as `ruff format` lays out a
    top-level comment after a block."""
    module = b'"""A module."""\n\n\ndef f(x):\n    return x\n'
    sealed = seal(module, "module")
    assert sealed.startswith(module + b"\n\n# jaxside: written by annotate, digest ")
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run([str(ruff), "format", "--check", "-"], input=sealed, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert seal(b"x = 1\n", "module").startswith(b"x = 1\n# jaxside")
    assert seal(module, "python").startswith(module + b"# jaxside")  # a user's file annotated: as it was


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=20) | st.integers(), max_size=5))
def test_a_sealed_json_document_is_the_same_document_plus_its_seal(document):
    text = json.dumps(document, indent=1, ensure_ascii=False).encode("utf-8")
    sealed = seal(text, "json")
    assert is_sealed(sealed) and not is_sealed(text) and json.loads(unsealed(sealed)) == document
    loaded = json.loads(sealed)
    assert loaded.pop("written_by").startswith("jaxside: written by annotate") and loaded == document
