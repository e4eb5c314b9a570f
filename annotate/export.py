"""``--export``: the structured JAX module of the run's one lowered `Program`, as text.

Checking the module against torch is `annotate.check`; `annotate.results` runs both.
"""

from __future__ import annotations

from typing import Any

from jaxside.annotate.errors import EXIT_USAGE, Failure
from jaxside.render.ir import Program
from jaxside.render.module import render_program

__all__ = ["module_source", "module_types"]


def module_source(program: Program, file: str, style: str = "functional", model: Any = None) -> str:
    """The module's text in `style`; its docstring says it came from `file` (as the user named it)
    and the entry. The class styles read the torch class of each submodule from `model`."""
    source = f"{file}: {program.trace.entry}"
    if style == "functional":
        return render_program(program, source=source)
    from jaxside.render.styles import StyleError, render_style

    try:
        return render_style(program, style, source=source, types=module_types(model))
    except StyleError as error:
        raise Failure(f"--style {style}: {error}", "export it in the functional style (no --style)",
                      code=EXIT_USAGE) from None


def module_types(model: Any) -> dict[str, str]:
    """The torch class of each submodule of `model` by path (`torch.nn.modules.linear.Linear`)."""
    modules = getattr(model, "named_modules", None)
    if modules is None:
        return {}
    return {path: f"{type(m).__module__}.{type(m).__qualname__}" for path, m in modules()}
