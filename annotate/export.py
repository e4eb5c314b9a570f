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

__all__ = ["frozen_params", "module_source", "module_types"]


def module_source(program: Program, file: str, style: str = "functional", model: Any = None) -> str:
    """The module's text in `style`; its docstring says it came from `file` (as the user named it)
    and the entry. The class styles read the torch class of each submodule from `model`."""
    source = f"{file}: {program.trace.entry}"
    if style == "functional":
        return render_program(program, source=source, frozen=frozen_params(model))
    from jaxside.render.styles import StyleError, render_style

    try:
        return render_style(program, style, source=source, types=module_types(model),
                            frozen=frozen_params(model))
    except StyleError as error:
        file, line = error.where or (_assigned(model, error.path) if error.path is not None else (None, None))
        raise Failure(f"--style {style}: {error}", "export it in the functional style (no --style)",
                      file=file, line=line, code=EXIT_USAGE) from None


def _assigned(model: Any, path: str) -> tuple[str | None, int | None]:
    """Where the torch code makes the attribute that holds submodule `path` (`layers.0.0` -> the
    `self.layers = ...` line of the root's class, `block.0.fn` -> the `self.fn = ...` line of the
    block's), else the class line of its owner; the root's (`""`) is its class line; (None, None)
    when unknown."""
    parts = path.split(".") if path else []
    while parts and parts[-1].isdigit():
        parts.pop()
    owner_path, attribute = ".".join(parts[:-1]), parts[-1] if parts else None
    try:
        owner = type(model.get_submodule(owner_path))
        file = inspect.getsourcefile(owner)
    except (AttributeError, OSError, TypeError):
        return None, None
    try:
        lines, start = inspect.getsourcelines(owner)
    except (OSError, TypeError):  # a class made by `type(...)`: its file, no class line
        return file, None
    if attribute is None:
        return file, start
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


def frozen_params(model: Any) -> frozenset[str]:
    """The dotted names of `model`'s parameters torch does not differentiate (`requires_grad=False`),
    every name of a tied one."""
    parameters = getattr(model, "named_parameters", None)
    if parameters is None:
        return frozenset()
    return frozenset(name for name, p in parameters(remove_duplicate=False) if not p.requires_grad)
