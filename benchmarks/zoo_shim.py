"""A stand-in `torchvision` for importing timm beside a CPU torch, for the model zoo only.

timm imports torchvision at import time (data transforms, datasets, one frozen batch-norm
class); the registry's torchvision for torch 2.13 is a CUDA build that does not load here. Every
name under ``torchvision`` is a placeholder class (its attributes placeholders too), enough for
timm's imports; a model that really used torchvision's code would fail loudly at that call.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any


class _Placeholder(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{cls.__name__}.{name}", (), {})


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = _Placeholder(name, (), {"__module__": self.__name__})
        setattr(self, name, placeholder)
        return placeholder


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
