"""Loading FILE as Python would import it, and finding what to trace in it."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from jaxside.annotate.errors import Failure
from jaxside.annotate.loading import _Resolved, find_entry, isolated, load_file


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def options(file: Path, **given: str) -> argparse.Namespace:
    values = {"entry": None, "inputs": None, "kwargs": None, "setup": None, **given}
    return argparse.Namespace(file=str(file), **values)


def test_standalone_file_runs_once_under_its_name_with_its_directory_importable(
    tmp_path, capsys, monkeypatch
):
    # A `model` another test left imported would rightly make the file `_jaxside_model`, which is
    # not this test's case (it failed that way once in a whole CI run, never in a rerun).
    for name in ("model", "layers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    write(tmp_path / "layers.py", "def twice(x):\n    return 2 * x\n")
    file = write(tmp_path / "model.py", '''\
        import sys
        from layers import twice

        print("top-level ran", sys.argv)

        if __name__ == "__main__":
            raise SystemExit("a script's main block must not run")
    ''')
    path_before = list(sys.path)
    with isolated():
        module = load_file(str(file))
        assert module.__name__ == "model" and sys.modules["model"] is module
        assert module.__file__ == str(file) and module.twice(2) == 4
    assert capsys.readouterr().out == f"top-level ran {[str(file)]}\n"
    # Nothing left behind: the interpreter's path and modules, and no __pycache__ beside the file.
    assert sys.path == path_before and "model" not in sys.modules and "layers" not in sys.modules
    assert not (tmp_path / "__pycache__").exists()


def test_a_file_named_like_an_imported_module_does_not_shadow_it(tmp_path):
    file = write(tmp_path / "json.py", "VALUE = 1\n")
    with isolated():
        module = load_file(str(file))
        assert module.VALUE == 1 and module.__name__ == "_jaxside_json"
        assert sys.modules["json"] is json


def test_package_file_with_relative_imports_is_imported_by_its_dotted_name(tmp_path, capsys):
    write(tmp_path / "mylib" / "__init__.py", "")
    write(tmp_path / "mylib" / "utils.py", "def rotate_half(x):\n    return x.flip(-1)\n")
    # The package imports its own modeling file, as model libraries do: still one run of its top level.
    write(tmp_path / "mylib" / "models" / "__init__.py", "from . import modeling\n")
    write(tmp_path / "mylib" / "models" / "config.py", "DIM = 8\n")
    file = write(tmp_path / "mylib" / "models" / "modeling.py", '''\
        from ..utils import rotate_half
        from . import config

        print("modeling ran")
        DIM = config.DIM
    ''')
    with isolated():
        module = load_file(str(file))
        assert module.__name__ == "mylib.models.modeling" and module.DIM == 8
        assert sys.modules["mylib.utils"].rotate_half is module.rotate_half
    assert capsys.readouterr().out == "modeling ran\n"
    assert not any(name == "mylib" or name.startswith("mylib.") for name in sys.modules)


def test_a_package_named_like_one_already_imported_is_refused(tmp_path):
    # `jaxside` is ours: loading a user's `jaxside` package would shadow it.
    for name in ("json", "jaxside"):
        write(tmp_path / name / "__init__.py", "")
        file = write(tmp_path / name / "model.py", "X = 1\n")
        with isolated(), pytest.raises(Failure, match=f"part of package `{name}`, but that name is taken"):
            load_file(str(file))


def test_entry_from_example_with_inputs_and_kwargs_overridden(tmp_path):
    file = write(tmp_path / "model.py", '''\
        import torch

        def scale(x, factor=1.0, *, use_cache=True):
            return x * factor

        def example():
            return scale, (torch.ones(2),), {"use_cache": True}
    ''')
    with isolated():
        module = load_file(str(file))
        entry = find_entry(module, options(file))
        assert entry.fn is module.scale and entry.kwargs == {"use_cache": True}
        # Anything but a tuple is the single positional argument; --kwargs replaces example()'s.
        entry = find_entry(module, options(file, inputs="torch.zeros(3)", kwargs="dict(use_cache=False)"))
        assert entry.fn is module.scale and entry.args[0].shape == (3,)
        assert entry.kwargs == {"use_cache": False}


def test_setup_runs_with_model_bound(tmp_path):
    file = write(tmp_path / "model.py", '''\
        import torch

        class Net(torch.nn.Module):
            def setup_caches(self, size):
                self.register_buffer("cache", torch.zeros(size))
    ''')
    with isolated():
        module = load_file(str(file))
        entry = find_entry(module, options(file, entry="Net()", setup="model.setup_caches(4)"))
        assert entry.fn.cache.shape == (4,)


def test_abstract_builds_everything_on_the_meta_device(tmp_path):
    file = write(tmp_path / "model.py", '''\
        import torch

        def example():
            model = torch.nn.Linear(4096, 4096)
            return model, (torch.randn(2, 4096),)
    ''')
    with isolated():
        entry = find_entry(load_file(str(file)), options(file), abstract=True)
    assert entry.fn.weight.device.type == "meta" and entry.args[0].device.type == "meta"
    assert torch.zeros(1).device.type == "cpu"


def test_module_files_resolve_as_pathlib_does_through_linked_files_and_directories(tmp_path, monkeypatch):
    """`isolated` resolves each imported module's file once per directory: the same answers as
    `Path.resolve`, links to files and directories included."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "mod.py").write_text("")
    (tmp_path / "linked_dir").symlink_to(real)
    (tmp_path / "linked_file.py").symlink_to(real / "mod.py")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "deeper").symlink_to(real)  # its `..` is tmp_path, not elsewhere
    monkeypatch.chdir(tmp_path)
    resolved = _Resolved()
    files = [str(real / "mod.py"), str(tmp_path / "linked_dir" / "mod.py"), str(tmp_path / "linked_file.py"),
             "linked_dir/mod.py", "real/../linked_file.py", "elsewhere/deeper/../real/mod.py",
             str(tmp_path / "elsewhere" / "deeper" / ".." / "mod.py"), "/", str(tmp_path) + "/",
             str(tmp_path / "missing" / "x.py")]
    for file in files * 2:  # the second time from what was kept
        assert resolved(file) == str(Path(file).resolve()), file
    assert resolved(str(tmp_path / "linked_dir" / "mod.py")) == str(real / "mod.py")
