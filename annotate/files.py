"""Which files the traced code ran in, which one stdout shows, and ``-o DIR/``'s annotated copies.

The code that ran is often not in FILE: an ``example()`` file imports the model from another
module, or from an installed library (transformers' ``modeling_llama.py``). Comments go where
the code is. The file shown is FILE when some of its lines made JAX, else the file with the most
such lines (a tie goes to the file defining the entry's code, then to the first met); a note on
stderr names the others, ``--file NAME`` picks one and ``-o DIR/`` writes a copy of each.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxside.annotate.errors import Failure


@dataclass(frozen=True)
class Traced:
    """The files whose lines made JAX in a trace, and the one to show."""

    lines: dict[str, int]
    """Each file (resolved path, or a cell's name) -> how many of its lines made JAX, in the order
    the trace met them."""
    shown: str
    """The file comments and the HTML view are for."""
    names: dict[str, str]
    """Each file -> the shortest tail of its path that no other file shares (`model.py`)."""


def key(file: str) -> str:
    """A file as compared here: resolved, unless it is a cell's or a pseudo-file's name (`<stdin>`)."""
    return file if file.startswith("<") else str(Path(file).resolve())


def traced_lines(trace: Any) -> dict[str, int]:
    """Each file -> how many of its lines emitted equations in `trace` (calls alone do not count);
    only files with a source to show (not ``--entry 'lambda x: ...'``'s `<--entry>`)."""
    seen: dict[str, set[int]] = {}
    for site in trace.eqn_sites:
        if site is not None:
            seen.setdefault(key(site.file), set()).add(site.line)
    return {file: len(lines) for file, lines in seen.items() if _has_source(file)}


def _has_source(file: str) -> bool:
    """A file, or a notebook cell's name that `linecache` holds the text of."""
    return Path(file).is_file() if not file.startswith("<") else bool(linecache.getlines(file))


def short_names(files: list[str]) -> dict[str, str]:
    """Each path as its shortest tail (`model.py`, `llama/model.py`) that no other path ends with."""
    names = {}
    for file in files:
        parts = Path(file).parts
        for size in range(1, len(parts) + 1):
            tail = parts[-size:]
            if not any(other != file and Path(other).parts[-size:] == tail for other in files):
                break
        names[file] = str(Path(*tail))
    return names


def choose(trace: Any, file: str, wanted: str | None = None, shown_as: str | None = None) -> Traced:
    """The traced files of `trace`, and the one to show: `wanted` (``--file``), else FILE when its
    lines made JAX, else the one with the most lines (ties: the entry's own file, then the first)."""
    file = key(file)
    lines = traced_lines(trace)
    names = short_names(list(dict.fromkeys([*lines, file])))
    if shown_as is not None:
        names[file] = shown_as
    if wanted is not None:
        return Traced(lines, _wanted(wanted, lines, file, names), names)
    if lines.get(file) or not lines:
        return Traced(lines, file, names)
    entry = key(trace.root.file)
    most = max(lines.values())
    best = [f for f, n in lines.items() if n == most]
    return Traced(lines, entry if entry in best else best[0], names)


def _wanted(wanted: str, lines: dict[str, int], file: str, names: dict[str, str]) -> str:
    candidates = list(dict.fromkeys([*lines, file]))
    exact = key(wanted) if Path(wanted).exists() else None
    if exact in candidates:  # a path to one of them, as given
        return exact
    parts = Path(wanted).parts
    found = [f for f in candidates if Path(f).parts[-len(parts):] == parts]
    if len(found) == 1:
        return found[0]
    listing = ", ".join(names[f] for f in candidates)
    if not found:
        raise Failure(f"--file {wanted}: no line of that file made JAX in this trace",
                      f"choose one of {listing}")
    raise Failure(f"--file {wanted} names {len(found)} traced files",
                  f"give more of the path: {', '.join(names[f] for f in found)}")


def note(traced: Traced, file: str) -> str | None:
    """The one-line note about the traced files not shown (None when there are none)."""
    file = key(file)
    others = [f for f in traced.lines if f != traced.shown]
    if not others and traced.shown == file:
        return None
    shown = traced.names[traced.shown]
    text = f"showing {shown} ({_count(traced.lines.get(traced.shown, 0))})"
    if traced.shown != file and not traced.lines.get(file):
        text += f"; {traced.names[file]} made no JAX itself"
    if others:
        listing = ", ".join(f"{traced.names[f]} ({traced.lines[f]})" for f in others)
        text += f"; JAX came from {listing} too"
    hint = "; --file NAME shows another, -o DIR/ writes an annotated copy of each" if others else ""
    return text + hint


def _count(n: int) -> str:
    return f"{n:,} line{'s' if n != 1 else ''} made JAX"


def is_directory(path: str | None) -> bool:
    """Whether ``-o`` names a directory: it ends with a slash, or is an existing directory."""
    return bool(path) and path != "-" and (path.endswith(("/", os.sep)) or Path(path).is_dir())


def check_directory(path: str, file: str) -> None:
    """Refuse ``-o DIR/`` before anything runs: it must be a directory (made if missing, its parent
    existing) other than FILE's own, where the copies would replace the originals."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise Failure("-o DIR/ names a file, not a directory", "drop the trailing slash, or give a directory",
                      file=path)
    if not target.exists() and not target.resolve().parent.is_dir():
        raise Failure(f"its parent {target.resolve().parent} does not exist",
                      "create it, or choose another -o", file=path)
    if target.exists() and target.resolve() == Path(file).resolve().parent:
        raise Failure("-o DIR/ is FILE's own directory: the annotated copies would replace the originals",
                      "write them to another directory, e.g. -o annotated/", file=path)


def copy_paths(traced: Traced, directory: str) -> dict[str, Path]:
    """Each traced file with lines that made JAX -> its annotated copy in `directory`, named after
    it (``DIR/model.py``; ``DIR/llama/model.py`` when two traced files share a name)."""
    files = [f for f, n in traced.lines.items() if n and not f.startswith("<")]
    names = short_names(files)
    return {f: Path(directory) / names[f] for f in files}


def refuse_sources(target: str | Path, traced: Traced, flag: str) -> None:
    """Never write over a file the trace ran (FILE, the model's module, an installed library's)."""
    path = Path(target)
    for source in traced.lines:
        if source.startswith("<"):
            continue
        same = path.resolve() == Path(source) or (path.exists() and os.path.samefile(path, source))
        if same:
            raise Failure(f"{flag} names {traced.names[source]}, which the trace ran, and annotate never "
                          "overwrites the code it reads", "write somewhere else", file=str(target))


def imported_beside(before: set[str], file: str) -> list[str]:
    """The files of the modules FILE's import brought in from FILE's own directory tree (the
    model's module beside an ``example()`` file): user code even when the entry is a plain
    function that calls them. Not an installed package's (a project's ``.venv`` may sit there)."""
    from jaxside.tracing import is_library_file

    root = str(Path(file).resolve().parent) + os.sep
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name in before or not path:
            continue
        path = str(Path(path).resolve())
        inside = path[len(root):]
        installed = any(part in inside for part in (f"site-packages{os.sep}", f"dist-packages{os.sep}"))
        if path.startswith(root) and path.endswith(".py") and not installed and not is_library_file(path):
            found.append(path)
    return found


def resolve_watch(item: str) -> str:
    """A --watch item as a path: files and directories as given, a module as its file or package."""
    if Path(item).exists():
        return str(Path(item).resolve())
    try:
        spec = importlib.util.find_spec(item)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return str(Path(next(iter(spec.submodule_search_locations))).resolve())
    if spec is not None and spec.origin and Path(spec.origin).exists():
        return str(Path(spec.origin).resolve())
    raise Failure(f"--watch {item}: no such file, directory or importable module",
                  "give a path, or a module name FILE can import")
