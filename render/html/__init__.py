"""HTML views: torch beside the JAX it made (`side_by_side`), one offline page, style and script inlined."""

from __future__ import annotations

from typing import Any

from jaxside.render.html.page import framed
from jaxside.render.html.view import side_by_side
from jaxside.render.lower import lower
from jaxside.tracing.trace import register_html_view

__all__ = ["notebook_view", "side_by_side"]


def notebook_view(trace: Any) -> str:
    """What a notebook shows for a `Trace`: the side-by-side page of its entry's file or cell."""
    return framed(side_by_side(lower(trace)))


register_html_view(notebook_view)
