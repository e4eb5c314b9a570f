"""What counts as user code: the files asked about; never torch, torchax, JAX, the stdlib or jaxside."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jax
import torch

from jaxside.tracing import _internals

# Never user code, even when asked for: the engines under the user's code, and ourselves.
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (
        os.path.dirname(str(torch.__file__)),
        os.path.dirname(str(jax.__file__)),
        os.path.dirname(str(_internals.torchax.__file__)),
        *(os.path.join(os.path.dirname(os.path.dirname(__file__)), package)  # jaxside itself
          for package in ("annotate", "tracing", "render")),
    )
)
# The standard library, but not the site-packages inside it (a system Python's): a modeling file
# of an installed package is user code when asked for.
_STDLIB_DIR = str(Path(os.path.dirname(os.__file__)).resolve()) + os.sep
_SITE_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def module_of(fn: Any) -> torch.nn.Module | None:
    """The torch module an entry runs: the module itself, or the owner of a bound method."""
    if isinstance(fn, torch.nn.Module):
        return fn
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        return fn.__self__
    return None


def user_code(fn: Any, watch: Iterable[Any] = ()) -> Callable[[str], bool]:
    """The predicate 'is this file user code' that a capture of `fn` uses (for error reports)."""
    return user_files(fn, module_of(fn), watch)


def user_files(fn: Any, module: torch.nn.Module | None, watch: Iterable[Any]) -> Callable[[str], bool]:
    """The predicate 'is this file user code': the entry's files plus `watch`, never a library.

    The entry's files are the one defining `fn` and, for a `module`, those defining its
    submodules' classes; `watch` adds files or directories (paths, or modules by name)."""
    files: set[str] = set()
    dirs: list[str] = []
    code = getattr(inspect.unwrap(fn), "__code__", None) if not isinstance(fn, torch.nn.Module) else None
    if code is not None:
        files.add(code.co_filename)
    if module is not None:
        for cls in dict.fromkeys(type(sub) for sub in module.modules()):  # 80 layers, one class
            files.update(_class_files(cls))
    for item in watch:
        module_obj = sys.modules.get(str(item))
        path = Path(module_obj.__file__ if module_obj is not None and module_obj.__file__ else item)
        if path.is_dir():
            dirs.append(str(path.resolve()) + os.sep)
        else:
            files.add(str(path))
    resolved = {str(Path(f).resolve()) for f in files}
    decided: dict[str, bool] = {}

    def is_user_file(filename: str) -> bool:
        try:
            return decided[filename]
        except KeyError:
            pass
        path = _resolved(filename) if not filename.startswith("<") else filename
        answer = not _is_library_path(path) and (
            filename in files or path in resolved or path.startswith(tuple(dirs))
        )
        decided[filename] = answer
        return answer

    return is_user_file


def _class_files(cls: type) -> set[str]:
    """The file defining a class; for a class with no file of its own (defined in a notebook cell
    or at the interactive prompt, where `inspect.getfile` fails for `__main__`), the files of its
    methods' code, which IPython keeps in `linecache` (`<ipython-input-3-...>`, `/tmp/ipykernel_.../`)."""
    with contextlib.suppress(TypeError, OSError):
        return {inspect.getfile(cls)}
    found = set()
    for value in vars(cls).values():
        code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
        if code is not None:
            found.add(code.co_filename)
    return found


@functools.cache
def is_library_file(filename: str) -> bool:
    """Whether a file belongs to Python (frozen modules included), torch, jax, torchax or jaxside.

    Cached for the process: the answer depends on the file's name alone."""
    if filename.startswith("<"):
        return filename.startswith("<frozen ")
    return _is_library_path(_resolved(filename))


@functools.cache
def _resolved(filename: str) -> str:
    """`filename` resolved, once a process: every capture asks about the same library files (on
    3.12, each file an earlier capture switched off), and resolving is a walk of the file system."""
    return str(Path(filename).resolve())


def _is_library_path(path: str) -> bool:
    if path.startswith(_LIBRARY_DIRS):
        return True
    inside = path[len(_STDLIB_DIR) - 1 :]
    return path.startswith(_STDLIB_DIR) and not any(part in inside for part in _SITE_PARTS)
