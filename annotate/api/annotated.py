"""`jaxside.annotate_source(model, *inputs)`: the torch file with its JAX comments, and the JSON map."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jaxside.annotate.api.shared import Traced, trace_entry, watched, with_file
from jaxside.annotate.options import Options

__all__ = ["Annotated", "annotate_source"]


class Annotated:
    """What ``annotate FILE`` writes for a traced entry: the file's text with the JAX each line
    made beside it (`text`), every traced file's (`texts()`), and ``--json``'s map as a dict (`map`)."""

    def __init__(self, traced: Traced, options: Options) -> None:
        from jaxside.annotate import files
        from jaxside.render.comments import annotate_file
        from jaxside.render.json_map import line_map

        self._traced, self.options = traced, options
        self.program = traced.program
        self._files = files.choose(traced.trace, traced.file, options.outputs.file_name)
        self.file: str = self._files.shown
        """The file the comments are for: the entry's, else the one whose lines made most JAX."""
        self.text: str = annotate_file(self.program, self.file, shapes=options.outputs.shapes)
        self.map: dict[str, Any] = line_map(self.program)
        """``annotate --json``'s map (schema ``jaxside.map/1``, docs/usage.md)."""

    @property
    def files(self) -> dict[str, int]:
        """Each traced file whose lines made JAX -> how many of its lines did."""
        return dict(self._files.lines)

    def texts(self) -> dict[str, str]:
        """Every traced file's annotated text (what ``-o DIR/`` writes), by path."""
        from jaxside.render.comments import annotate_file

        return {file: annotate_file(self.program, file, shapes=self.options.outputs.shapes)
                for file, n in self._files.lines.items() if n}

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        name = self._files.names.get(self.file, self.file)
        lines = self._files.lines.get(self.file, 0)
        return (f"<Annotated {name}: {lines} line{'s' if lines != 1 else ''} made JAX, "
                f"{len(self.map['lines'])} in the map over {len(self._files.lines)} file"
                f"{'s' if len(self._files.lines) != 1 else ''}>")

    def page(self) -> str:
        """The side-by-side page of `file` (what ``annotate FILE --html PATH`` writes)."""
        from jaxside.render.html import side_by_side

        return side_by_side(self.program, self.file, shapes=self.options.outputs.shapes)

    def _repr_html_(self) -> str:
        from jaxside.render.html.page import framed

        return framed(self.page())


def annotate_source(
    fn: Callable[..., Any],
    /,
    *args: Any,
    file_name: str | None = None,
    shapes: bool = False,
    abstract: bool = False,
    watch: Iterable[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **inputs: Any,
) -> Annotated:
    """Trace ``fn(*args, **inputs)`` and annotate its file as ``annotate FILE`` does; the options
    are the command line's, by the same names (`file_name` is ``--file``). Keyword inputs named
    like an option go in `kwargs`."""
    options = Options.of(file="", file_name=file_name, shapes=shapes, abstract=abstract, watch=watched(watch))
    traced = trace_entry(fn, args, {**(kwargs or {}), **inputs}, options)
    return Annotated(traced, with_file(options, traced.file))
