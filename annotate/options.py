"""The options of one `annotate` run, typed and frozen: built once from the command line (or from
the Python API's keyword arguments, which have the same names) and never changed afterwards.

What a run learns as it goes (the status display, the files it found) lives elsewhere: the
`Status` the command makes, the `errors.Context` errors are described with.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAIN", "Options", "ReviewOptions"]

MAIN = True
"""`Options.json` for a bare ``--json``: the map is the main result (stdout or ``-o``)."""


@dataclass(frozen=True)
class Options:
    """``annotate FILE [flags]``: one field per flag, named as the flag (``--static-shapes`` is
    `static_shapes`, ``-o`` is `output`, ``--file`` is `file_name`). docs/usage.md says what each does."""

    file: str
    """FILE as a path Python can read (a temporary copy when it came from a pipe or stdin)."""
    shown_file: str = ""
    """FILE as the user named it (``<stdin>``); `file` when empty."""
    entry: str | None = None
    inputs: str | None = None
    kwargs: str | None = None
    setup: str | None = None
    export: bool = False
    json: str | bool | None = None
    """A path, `MAIN` for a bare ``--json``, or None."""
    output: str | None = None
    file_name: str | None = None
    force: bool = False
    check: bool = False
    static_shapes: bool = False
    rtol: float | None = None
    atol: float | None = None
    abstract: bool = False
    shapes: bool = False
    html: str | None = None
    watch: tuple[str, ...] = ()
    verbosity: int = 0
    debug: bool = False

    def __post_init__(self) -> None:
        if not self.shown_file:
            object.__setattr__(self, "shown_file", self.file)

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> Options:
        """The options argparse parsed (every field must be there but `shown_file`)."""
        values = _fields(cls, namespace)
        values["watch"] = tuple(values.get("watch") or ())
        return cls(**values)

    @property
    def generic(self) -> bool:
        """Whether sizes that follow the inputs are written as expressions of their shapes: the
        run exports or checks a module, and ``--static-shapes`` is not given."""
        return (self.export or self.check) and not self.static_shapes


@dataclass(frozen=True)
class ReviewOptions:
    """``annotate review TORCH_FILE PORT_FILE [flags]``, one field per flag as for `Options`
    (docs/review.md). The Python API's `jaxside.review` takes the same names."""

    file: str
    """TORCH_FILE (for the API: the file defining the torch entry)."""
    port: str
    """PORT_FILE (for the API: the file defining the port)."""
    shown_file: str = ""
    entry: str | None = None
    inputs: str | None = None
    kwargs: str | None = None
    setup: str | None = None
    port_entry: str | None = None
    params_map: str | Mapping[str, str] | None = None
    """A file defining ``PARAMS_MAP``; from Python, the dict itself too."""
    port_weights: str | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    html: str | None = None
    force: bool = False
    verbosity: int = 0
    debug: bool = False

    def __post_init__(self) -> None:
        if not self.shown_file:
            object.__setattr__(self, "shown_file", self.file)

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> ReviewOptions:
        return cls(**_fields(cls, namespace))


def _fields(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    given = vars(namespace)
    return {f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given}
