"""`jaxside.export(model, *inputs)`: the structured JAX module as an object, compiled in memory.

    exported = jaxside.export(model, x)
    exported.source                   # the module's text, as `annotate --export` writes it
    params = exported.load_params(model)
    exported.forward(params, x)       # the export's own function: jit, grad, vmap it; no torch
    exported.check()                  # against torch eager, leaf by leaf (`--check`'s table)
    exported.write("model_jax.py")    # the command line's overwrite rules
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxside.annotate.api.shared import Traced, label, refuse_sources, trace_entry, watched, with_file
from jaxside.annotate.options import Options

if TYPE_CHECKING:
    from jaxside.annotate.check import CheckReport

__all__ = ["Export", "export"]


class Export:
    """A traced entry's JAX module: its text (`source`), its functions compiled from that text
    (`forward` and every def, as attributes), `load_params`, `config`, `check` and `write`."""

    def __init__(self, traced: Traced, options: Options, source: str | None = None) -> None:
        from jaxside.annotate.check import load_module
        from jaxside.annotate.export import module_source

        self._traced, self.options = traced, options
        self.program = traced.program
        if source is None:
            source = module_source(traced.program, label(traced.file), options.jax.style, traced.entry.fn)
        self.source: str = source
        """The module's text, as ``annotate --export`` writes it (without the seal)."""
        self.module: types.ModuleType = load_module(self.source, "jaxside_export")
        """The module, compiled from `source` in memory (not in `sys.modules`)."""

    # -- the module's functions --------------------------------------------------------------------

    @property
    def forward(self) -> Callable[..., Any]:
        """The exported entry (the module's `forward`, or the def named after the traced function)."""
        entry: Callable[..., Any] = getattr(self.module, self.program.entry.name)
        return entry

    @property
    def entry_name(self) -> str:
        """The entry's name in the module (`forward` for a module, else the function's)."""
        return str(self.program.entry.name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("program", "module", "options", "source"):  # not yet set
            raise AttributeError(name)
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise AttributeError(f"the export defines no {name!r}; it defines "
                                 f"{', '.join(self.names())}") from None

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.names()})

    def names(self) -> list[str]:
        """The public names the module defines: its defs, `load_params`, `Config`, ..."""
        return [n for n, v in vars(self.module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == self.module.__name__]

    def load_params(self, model: Any = None) -> Any:
        """The entry's `params` (and `state`) from `model` (a torch module or its `state_dict`;
        by default the module traced), as the export's `load_params` reads them."""
        loader = getattr(self.module, "load_params", None)
        if loader is None:
            raise AttributeError(f"{self.entry_name} takes no weights: the export has no load_params")
        return loader(self._traced.entry.fn if model is None else model)

    @property
    def config(self) -> Any:
        """The export's `Config` as the traced module has it (None when the torch code read no
        numbers from its modules)."""
        config_from = getattr(self.module, "config_from", None)
        return None if config_from is None else config_from(self._traced.entry.fn)

    def arguments(self) -> list[Any]:
        """The entry's arguments for the example inputs: params (and state), then the inputs as
        `jnp` arrays (and `key` when it draws random numbers), as ``--check`` calls it."""
        from jaxside.annotate.check import entry_inputs

        entry = self._traced.entry
        return entry_inputs(self.module, self.program, entry.fn, entry.args, entry.kwargs)

    def edited(self, source: str) -> Export:
        """The same export with its text replaced (a module edited by hand, compiled in memory), to
        `check` it against torch again or `write` it."""
        return Export(self._traced, self.options, source)

    # -- checking and writing ------------------------------------------------------------------------

    def check(self, *args: Any, rtol: float | None = None, atol: float | None = None,
              **kwargs: Any) -> CheckReport:
        """Run the export under `jax.jit` beside torch eager and compare every leaf: on the
        example inputs (and at a smaller and a larger shape where the export is generic), or on
        the inputs given. A `CheckReport`: `.ok`, `.comparisons`, `.table()` (``--check``'s lines)."""
        from jaxside.annotate.check import check_export
        from jaxside.annotate.check_modules import runner
        from jaxside.annotate.errors import Failure

        if self.options.abstract:
            raise Failure("check() compares numbers with torch, and an abstract export has none",
                          "export without abstract=True to check it")
        given = (args, kwargs) if args or kwargs else None
        rtol = self.options.jax.rtol if rtol is None else rtol
        atol = self.options.jax.atol if atol is None else atol
        return check_export(self.module, self.program, self._traced.entry, rtol=rtol, atol=atol,
                            given=given, run=runner(self.options.jax.style))

    def write(self, path: str | Path, *, force: bool | None = None) -> bool:
        """Write the module to `path` as ``annotate --export -o PATH`` does: sealed, only when it
        changed, never over a file the trace ran, and over a file annotate did not write only with
        `force`. Whether the file changed."""
        from jaxside.annotate.errors import Failure
        from jaxside.annotate.output import Guard, write

        force = self.options.outputs.force if force is None else force
        guard = Guard(self.options.source.file, force)
        try:
            refuse_sources(path, self.program.trace, "path")
            return write(self.source, str(path), guard, "path", _quiet, form="module")
        except Failure as failure:  # said as for the command line: the flag is this keyword here
            failure.fix = failure.fix.replace("pass --force", "pass force=True")
            raise

    # -- display -------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        program = self.program
        sizes = "static sizes" if program.sizes is None else "generic sizes"
        weights = f", {len(program.param_paths)} weights" if program.takes_params else ""
        params = ", ".join(program.entry.params)
        return (f"<Export of {program.trace.entry}: {self.entry_name}({params}), "
                f"{len(program.functions)} defs{weights}, {sizes}, {self.source.count(chr(10))} lines>")

    def page(self) -> str:
        """The side-by-side page of the program written (what ``--export --html PATH`` writes)."""
        from jaxside.render.html import side_by_side

        return side_by_side(self.program, shapes=self.options.outputs.shapes)

    def _repr_html_(self) -> str:
        """The side-by-side view in a notebook: torch beside the export's statements."""
        from jaxside.render.html.page import framed

        return framed(self.page())


def _quiet(text: str) -> None:
    """What the command line says on stderr ("wrote PATH"): the API returns it instead."""


def export(
    fn: Callable[..., Any],
    /,
    *args: Any,
    static_shapes: bool = False,
    style: str = "functional",
    abstract: bool = False,
    watch: Iterable[str | types.ModuleType] = (),
    rtol: float | None = None,
    atol: float | None = None,
    shapes: bool = False,
    force: bool = False,
    kwargs: dict[str, Any] | None = None,
    **inputs: Any,
) -> Export:
    """Trace ``fn(*args, **inputs)`` (an `nn.Module` or a function) and export it as ``annotate
    --export`` does; the options are the command line's, by the same names (docs/api.md).
    Keyword inputs named like an option go in `kwargs`."""
    options = Options.of(file="", export=True, static_shapes=static_shapes, style=style, abstract=abstract,
                         watch=watched(watch), rtol=rtol, atol=atol, shapes=shapes, force=force)
    traced = trace_entry(fn, args, {**(kwargs or {}), **inputs}, options)
    return Export(traced, with_file(options, traced.file))

