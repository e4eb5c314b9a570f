"""Which files are the port: the entry file, the modules it imports, the packages they make up, and
the model files of installed libraries its classes come from, never a framework or the stdlib.

Real ports are laid out as modules and packages (`from my_port import build`), or are a library's
model file (`transformers/models/gpt2/modeling_flax_gpt2.py`); every line of theirs is a port line,
labelled with its own file. The walk follows the names each module holds (modules, classes and
functions, by the module that defines them): through the user's own files without limit; into an
installed package only to the modules the port names and their siblings in the same folder (a
model file and its configuration), so a library's utilities and the frameworks stay out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

FRAMEWORKS = frozenset({
    "flax", "equinox", "jax", "jaxlib", "optax", "numpy", "ml_dtypes", "chex", "einops", "jaxtyping",
    "scipy", "opt_einsum", "orbax", "treescope", "haiku", "torch", "torchax", "typing_extensions",
    "jaxside",
})
"""Top-level packages whose lines are never port lines: the array and module frameworks, ourselves."""
_SITE_PARTS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")
_LIMIT = 20000


def port_files(entry: ModuleType, port: Any = None) -> list[str]:
    """The port's files: those reached from the `entry` module and from the classes of the objects
    `port` holds (an NNX or Equinox module tree, a Linen module with its fields, a wrapper)."""
    from jaxside.tracing import is_library_file

    roots = [entry, *_class_modules(port)]
    files: dict[str, None] = {}
    seen: set[str] = set()
    queue: list[ModuleType] = []

    def take(module: ModuleType | None, from_installed: str | None) -> None:
        if module is None or module.__name__ in seen:
            return
        file = getattr(module, "__file__", None)
        if not file or module.__name__.partition(".")[0] in FRAMEWORKS or is_library_file(file):
            return
        # From an installed module, only its siblings in the same folder (a model file's config).
        if from_installed is not None and str(Path(file).resolve().parent) != from_installed:
            return
        seen.add(module.__name__)
        files[str(Path(file).resolve())] = None
        queue.append(module)

    for root in roots:
        take(root, None)
    while queue:
        module = queue.pop(0)
        here = Path(str(module.__file__)).resolve()
        installed = str(here.parent) if _installed(str(here)) else None
        for value in list(vars(module).values()):
            take(_defining_module(value), installed)
    return list(files)


def _installed(path: str) -> bool:
    return any(part in path for part in _SITE_PARTS)


def _defining_module(value: Any) -> ModuleType | None:
    """The module a global names: itself, or the one defining a class or function."""
    if isinstance(value, ModuleType):
        return value
    if isinstance(value, type) or callable(value) and hasattr(value, "__code__"):
        return sys.modules.get(getattr(value, "__module__", None) or "")
    return None


def _class_modules(port: Any) -> Iterable[ModuleType]:
    """Modules defining the classes of the objects `port` holds, followed through attributes,
    lists, tuples and dicts (a module tree's submodules, a wrapper's model)."""
    found: dict[str, ModuleType] = {}
    stack, seen = [port], set()
    while stack and len(seen) < _LIMIT:
        value = stack.pop()
        if id(value) in seen or value is None or isinstance(value, (str, bytes, int, float, bool)):
            continue
        seen.add(id(value))
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif hasattr(value, "__dict__") and not isinstance(value, (type, ModuleType)) and not callable(
                getattr(value, "__array__", None)):
            module = sys.modules.get(type(value).__module__)
            # A framework's own object (a Linear, a Variable) may still hold the user's ones.
            if module is not None and module.__name__.partition(".")[0] not in FRAMEWORKS:
                found.setdefault(module.__name__, module)
            try:
                stack.extend(vars(value).values())
            except TypeError:  # a __dict__ that is not a mapping
                continue
    return found.values()
