"""Class-style exports (``--style nnx``, ``--style equinox``): the Program as framework modules."""

from __future__ import annotations

from jaxside.render.ir import Program
from jaxside.render.styles.tree import StyleError

__all__ = ["STYLES", "StyleError", "render_style"]

STYLES = ("functional", "nnx", "equinox")


def render_style(program: Program, style: str, *, source: str, types: dict[str, str],
                 frozen: frozenset[str] = frozenset()) -> str:
    """The module text of `program` in `style` ("nnx" or "equinox"); `types` gives the torch class
    of each module path (`torch.nn.modules.linear.Linear`), `frozen` the parameters torch does not
    differentiate (`requires_grad=False`)."""
    from jaxside.render.styles.classes import render_classes

    if style == "nnx":
        from jaxside.render.styles.nnx import Nnx

        return render_classes(program, Nnx(), source=source, types=types, frozen=frozen)
    from jaxside.render.styles.equinox import Equinox

    return render_classes(program, Equinox(), source=source, types=types, frozen=frozen)
