"""Trace -> Program: see `render.lower.pipeline` for the steps and docs/architecture.md for the map."""

from __future__ import annotations

from jaxside.render.lower.context import LoweringError
from jaxside.render.lower.pipeline import lower

__all__ = ["LoweringError", "lower"]
