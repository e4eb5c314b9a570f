"""Load the user's file and find what to trace in it."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass
class Entry:
    fn: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    module: ModuleType | None = None


def load_file(path: str) -> ModuleType:
    file = Path(path).resolve()
    name = file.stem
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_entry(options: argparse.Namespace) -> Entry:
    module = load_file(options.file)
    namespace = vars(module)
    if options.entry:
        fn = eval(options.entry, namespace)
        args = eval(options.inputs, namespace) if options.inputs else ()
        kwargs = eval(options.kwargs, namespace) if options.kwargs else {}
    else:
        fn, args, *rest = module.example()
        kwargs = rest[0] if rest else {}
    if options.setup:
        exec(options.setup, {**namespace, "model": fn})
    return Entry(fn, tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs), module)
