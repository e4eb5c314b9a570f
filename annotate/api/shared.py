"""What the Python API's objects share: tracing an entry given as objects, once, and lowering it once."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxside.annotate.options import Options

__all__ = ["Traced", "label", "refuse_sources", "trace_entry", "watched", "with_file"]


@dataclass(frozen=True)
class Traced:
    """An entry given as objects, its trace, and the one `Program` every view of it prints."""

    entry: Any
    """`annotate.loading.Entry`: the function or module and its inputs."""
    trace: Any
    program: Any
    file: str
    """The file (or notebook cell) the entry's code is in."""


def watched(items: Iterable[str | types.ModuleType]) -> tuple[str, ...]:
    """The `watch` option as the command line has it: paths and module names."""
    return tuple(item.__name__ if isinstance(item, types.ModuleType) else str(item) for item in items)


def with_file(options: Options, file: str) -> Options:
    """`options` for the file the traced entry is in (the API's FILE)."""
    return dataclasses.replace(options, source=dataclasses.replace(options.source, file=file))


def _say(text: str) -> None:
    print(f"jaxside: {text}", file=sys.stderr)


def trace_entry(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], options: Options
) -> Traced:
    """Trace ``fn(*args, **kwargs)`` as ``annotate`` does with `options` (`watch`, `abstract`,
    sizes generic unless `static_shapes` when it exports or checks) and lower it once. The
    user's exceptions propagate as they are; the engines' warnings are kept quiet."""
    from jaxside.annotate.collecting import attempt, collection, settle
    from jaxside.annotate.files import resolve_watch
    from jaxside.annotate.loading import Entry
    from jaxside.render.lower import lower
    from jaxside.tracing import Capture

    watch = [resolve_watch(item) for item in options.watch]
    quiet = _quiet(fn, watch)
    with collection():  # what each phase keeps, frozen out of the next ones' collections
        with quiet():
            trace = Capture(watch=watch, abstract=options.abstract)(fn, *args, **kwargs)
        retrace = None
        if options.jax.generic:
            def retrace(resize: Any) -> Any:
                settle()
                with quiet(), attempt():
                    again = Capture(watch=watch, abstract=options.abstract, resize=resize, like=trace)
                    return again(fn, *args, **kwargs)
        settle()
        with quiet():
            program = lower(trace, retrace)
    return Traced(Entry(fn, tuple(args), dict(kwargs)), trace, program, trace.root.file)


def _quiet(fn: Any, watch: list[str]) -> Callable[[], contextlib.AbstractContextManager[None]]:
    from jaxside.annotate.noise import library_warnings
    from jaxside.tracing import user_code

    return functools.partial(library_warnings, user_code(fn, watch), _say, set())


def label(file: str) -> str:
    """A file as the API's texts name it (the module's docstring, the review's report): relative to
    the working directory when inside it, a notebook cell by its name."""
    if file.startswith("<"):
        return file
    with contextlib.suppress(ValueError, OSError):
        return str(Path(file).resolve().relative_to(Path.cwd()))
    return file


def refuse_sources(path: str | Path, trace: Any, flag: str) -> None:
    """Never write over a file the trace ran (the model's own, an installed library's)."""
    from jaxside.annotate import files

    files.refuse_sources(path, files.choose(trace, trace.root.file), flag)

