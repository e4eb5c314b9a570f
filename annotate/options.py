"""The options of one `annotate` run, typed and frozen: built once from the command line (or from
the Python API's keyword arguments, which have the same names) and never changed afterwards.

Each flag is a field named as the flag (``--static-shapes`` is `static_shapes`, ``-o`` is
`output`, ``--file`` is `file_name`), kept in a small record by what it is about: `Source` (what
to trace, both commands'), `JaxModule` (the exported module: written, its style, checked) and
`Outputs` (where results go and what they show). `Options.of` and `ReviewOptions.of` build them
from flat names, as argparse and the API give them; `flag_names` lists those names.

What a run learns as it goes (the status display, the files it found) lives elsewhere: the
`Status` the command makes, the `errors.UserFiles` errors are described with.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAIN", "JaxModule", "Options", "Outputs", "ReviewOptions", "Source", "flag_names"]

MAIN = True
"""`Outputs.json` for a bare ``--json``: the map is the main result (stdout or ``-o``)."""

@dataclass(frozen=True)
class Source:
    """What to trace: FILE and the flags that find the entry in it and build its inputs (for
    ``annotate review``, the torch side)."""

    file: str
    """FILE as a path Python can read (a temporary copy when it came from a pipe or stdin)."""
    shown_file: str = ""
    """FILE as the user named it (``<stdin>``); `file` when empty."""
    entry: str | None = None
    inputs: str | None = None
    kwargs: str | None = None
    setup: str | None = None

    def __post_init__(self) -> None:
        if not self.shown_file:
            object.__setattr__(self, "shown_file", self.file)


@dataclass(frozen=True)
class JaxModule:
    """The JAX module: whether it is written (``--export``), in which style, whether it is run and
    compared with torch (``--check``, ``--rtol``, ``--atol``), and whether its sizes are static."""

    export: bool = False
    style: str = "functional"
    """"functional", "nnx" or "equinox"."""
    check: bool = False
    rtol: float | None = None
    atol: float | None = None
    static_shapes: bool = False

    @property
    def generic(self) -> bool:
        """Whether sizes that follow the inputs are written as expressions of their shapes: the
        run exports or checks a module, and ``--static-shapes`` is not given."""
        return (self.export or self.check) and not self.static_shapes


@dataclass(frozen=True)
class Outputs:
    """Where the results go (``-o``, ``--json``, ``--html``), whether an existing file annotate did
    not write may be replaced (``--force``), and what the comments show (``--file``, ``--shapes``)."""

    output: str | None = None
    json: str | bool | None = None
    """A path, `MAIN` for a bare ``--json``, or None."""
    html: str | None = None
    force: bool = False
    file_name: str | None = None
    shapes: bool = False


@dataclass(frozen=True)
class Options:
    """``annotate FILE [flags]`` (docs/usage.md says what each flag does)."""

    source: Source
    jax: JaxModule = field(default_factory=JaxModule)
    outputs: Outputs = field(default_factory=Outputs)
    abstract: bool = False
    watch: tuple[str, ...] = ()
    verbosity: int = 0
    debug: bool = False

    @classmethod
    def of(cls, **values: Any) -> Options:
        """The options from flat names, each a flag's (`file` is FILE); those not given default."""
        return cls(**_made(cls, values))

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> Options:
        """The options argparse parsed (with `shown_file`)."""
        values = vars(namespace)
        return cls.of(**{**values, "watch": tuple(values.get("watch") or ())})


@dataclass(frozen=True)
class ReviewOptions:
    """``annotate review TORCH_FILE PORT_FILE [flags]`` (docs/review.md); the Python API's
    `jaxside.review` takes the same names."""

    source: Source
    """TORCH_FILE and what to trace in it (for the API: the file defining the torch entry)."""
    port: str
    """PORT_FILE (for the API: the file defining the port)."""
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

    @classmethod
    def of(cls, **values: Any) -> ReviewOptions:
        """The options from flat names, each a flag's (`file` is TORCH_FILE)."""
        return cls(**_made(cls, values))

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> ReviewOptions:
        return cls.of(**vars(namespace))


def flag_names(cls: Any) -> set[str]:
    """The flat names `cls.of` takes: its fields, a record's opened into its own."""
    hints = typing.get_type_hints(cls)
    return {name for f in dataclasses.fields(cls) for name in _opened(f.name, hints[f.name])}


def _opened(name: str, kind: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(kind)] if _is_record(kind) else [name]


def _is_record(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _made(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """`cls`'s fields from flat names: each record's built from its own names."""
    unknown = set(values) - flag_names(cls)
    if unknown:
        raise TypeError(f"{cls.__name__} has no option {', '.join(sorted(unknown))}")
    hints = typing.get_type_hints(cls)
    made: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if _is_record(kind):
            given = {g.name: values[g.name] for g in dataclasses.fields(kind) if g.name in values}
            made[f.name] = kind(**given)
        elif f.name in values:
            made[f.name] = values[f.name]
    return made
