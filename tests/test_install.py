"""Install as a user would: a wheel built from the checkout, pip into a fresh venv, run from elsewhere.

This is the README's "Install" section. To stay fast and offline, the fresh venv sees the torch,
jax and torchax of the interpreter running the tests through a `.pth` line (what
`--system-site-packages` does for a system Python), and pip installs only the wheel into it:
nothing of the checkout is importable there, and `annotate` is the wheel's console script.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import ROOT

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

MODEL = """import torch


def scale(x):
    doubled = x * 2
    return torch.tanh(doubled)


def example():
    return scale, (torch.ones(3),)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(args, cwd=cwd, env={**environment, **(env or {})}, capture_output=True, text=True)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with jaxside installed from a wheel; its bin directory."""
    work = tmp_path_factory.mktemp("install")
    # Built from a copy: setuptools builds inside the source tree (build/, *.egg-info), and a
    # stale build/ there would end up in the wheel.
    skip = shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache",
                                  ".hypothesis", "tests")
    shutil.copytree(ROOT, work / "src", ignore=skip)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
          str(work / "dist"), str(work / "src")], work)
    (wheel,) = (work / "dist").glob("jaxside-*.whl")
    env = work / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    # torch, jax and the rest from the interpreter running the tests (its site-packages only, so
    # not the checkout, and no .pth of its own, so not an editable install of jaxside either).
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--no-deps",
          "--no-index", "-q", str(wheel)], work)
    return env / "bin"


def _checkout_packages() -> list[str]:
    """Every package of the checkout, as it is imported: `jaxside.render.rules` for render/rules/."""
    return ["jaxside"] + [".".join(["jaxside", *init.parent.relative_to(ROOT).parts])
                          for top in ("annotate", "tracing", "render")
                          for init in sorted((ROOT / top).rglob("__init__.py"))]


def test_the_wheel_holds_the_packages_and_their_data(installed):
    packages = _checkout_packages()
    code = ("import importlib, sys\n"
            "for name in sys.argv[1:]: print(importlib.import_module(name).__file__)\n"
            "import jaxside.render.html as html; print(html.__file__)")
    where = _run([str(installed / "python"), "-c", code, *packages], installed)
    assert len(where.stdout.split()) == len(packages) + 1
    for line in where.stdout.split():
        assert line.startswith(str(installed.parent)), line  # the venv's copy, not the checkout
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    for generic in ("annotate", "tracing", "render"):  # taken by other distributions: not installed
        missing = subprocess.run([str(installed / "python"), "-c", f"import {generic}"], cwd=installed,
                                 env=environment, capture_output=True, text=True)
        assert "ModuleNotFoundError" in missing.stderr, generic


def test_the_api_and_python_m_jaxside(installed, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    version = _run([str(installed / "python"), "-m", "jaxside", "--version"], tmp_path)
    assert version.stdout.startswith("annotate (jaxside ")
    code = ("import sys, jaxside\nassert 'torch' not in sys.modules\n"
            "import torch\nfrom jaxside import capture\n"
            "trace = capture(lambda x: torch.tanh(x) * 2, torch.ones(3))\nprint(repr(trace))")
    traced = _run([str(installed / "python"), "-c", code], tmp_path)
    assert traced.stdout.startswith("<Trace of ") and "equations" in traced.stdout


def test_annotate_runs_from_another_directory(installed, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    version = _run([str(installed / "annotate"), "--version"], tmp_path)
    assert version.stdout.startswith("annotate (jaxside ")
    annotated = _run([str(installed / "annotate"), "model.py", "-q", "--html", "view.html", "-o", "out.py"],
                     tmp_path)
    assert annotated.stderr == ""
    assert "    doubled = x * 2  # doubled = x * 2.0" in (tmp_path / "out.py").read_text()
    page = (tmp_path / "view.html").read_text()
    assert "<style>" in page and "<script>" in page  # the style and script shipped in the wheel
