"""``--export``: the structured JAX module of the run's one lowered `Program`, as text.

Checking the module against torch is `annotate.check`; `annotate.results` runs both.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
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
        file, line = _assigned(model, error.path) if error.path else (None, None)
        raise Failure(f"--style {style}: {error}", "export it in the functional style (no --style)",
                      file=file, line=line, code=EXIT_USAGE) from None


def _assigned(model: Any, path: str) -> tuple[str | None, int | None]:
    """Where the torch code makes the attribute that holds submodule `path` (`layers.0.0` -> the
    `self.layers = ...` line of the root's class), or its class line; (None, None) when unknown."""
    parts = path.split(".")
    first = next((k for k, part in enumerate(parts) if part.isdigit()), len(parts))
    if first == 0 or not hasattr(model, "get_submodule"):
        return None, None
    owner_path, attribute = ".".join(parts[: first - 1]), parts[first - 1]
    try:
        owner = type(model.get_submodule(owner_path))
        file = inspect.getsourcefile(owner)
        lines, start = inspect.getsourcelines(owner)
    except (AttributeError, OSError, TypeError):
        return None, None
    for node in ast.walk(ast.parse(textwrap.dedent("".join(lines)))):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == attribute and isinstance(
                    target.value, ast.Name) and target.value.id == "self":
                return file, start + node.lineno - 1
    return file, start


def module_types(model: Any) -> dict[str, str]:
    """The torch class of each submodule of `model` by path (`torch.nn.modules.linear.Linear`)."""
    modules = getattr(model, "named_modules", None)
    if modules is None:
        return {}
    return {path: f"{type(m).__module__}.{type(m).__qualname__}" for path, m in modules()}
