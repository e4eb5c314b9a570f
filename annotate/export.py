"""``--export``: the structured JAX module of the run's one lowered `Program`, as text.

Checking the module against torch is `annotate.check`; `annotate.results` runs both.
"""

from __future__ import annotations

from jaxside.render.ir import Program
from jaxside.render.module import render_program

__all__ = ["module_source"]


def module_source(program: Program, file: str) -> str:
    """The module's text; its docstring says it came from `file` (as the user named it) and the entry."""
    return render_program(program, source=f"{file}: {program.trace.entry}")
