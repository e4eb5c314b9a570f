"""HTML views: torch beside the JAX it made (`side_by_side`), one offline page, style and script inlined."""

from __future__ import annotations

from render.html.view import side_by_side

__all__ = ["side_by_side"]
