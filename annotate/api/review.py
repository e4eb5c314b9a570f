"""`jaxside.review(torch_entry, port_entry, *inputs)`: ``annotate review`` on objects, as a `Review`."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

__all__ = ["review"]


def review(
    torch_entry: Any,
    port_entry: Any,
    /,
    *args: Any,
    port_weights: str | None = None,
    params_map: str | os.PathLike[str] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    kwargs: dict[str, Any] | None = None,
    **inputs: Any,
) -> Any:
    """Run `torch_entry` (an `nn.Module` or a function) and `port_entry` (a JAX function whose
    leading arguments are weight pytrees; a Flax NNX, Flax Linen or Equinox module; or a function
    building one) on the same inputs and weights, and find the first line where they differ.

    The options are ``annotate review``'s by the same names: `port_weights` names the port's own
    loader in the port's module, `params_map` a file defining ``PARAMS_MAP``. Keyword inputs named
    like an option go in `kwargs`. Returns a `Review` (`.ok`, `.rows`, `.first_divergence`,
    `.weights`, `.text()`, `.html()`)."""
    from jaxside.annotate.loading import Entry
    from jaxside.annotate.options import ReviewOptions
    from jaxside.annotate.review.result import review_entries

    module = inspect.getmodule(port_entry) or inspect.getmodule(type(port_entry))
    if module is None:
        module = sys.modules["__main__"]
    name = getattr(port_entry, "__name__", type(port_entry).__name__)
    options = ReviewOptions(file=_file_of(torch_entry), port=_file_of(port_entry), port_entry=name,
                            params_map=None if params_map is None else os.fspath(params_map),
                            port_weights=port_weights, rtol=rtol, atol=atol)
    entry = Entry(torch_entry, tuple(args), {**(kwargs or {}), **inputs})
    return review_entries(options, entry, lambda _torch_entry: (module, port_entry, name), _silent)


def _silent(phase: str) -> None:
    """The command's progress lines: the API shows none."""


def _file_of(entry: Any) -> str:
    """The file defining a function, or a module's class (a notebook cell's name for code typed there)."""
    target = entry if inspect.isfunction(entry) or inspect.isclass(entry) else type(entry)
    target = inspect.unwrap(target) if callable(target) else target
    try:
        found = inspect.getsourcefile(target)
    except TypeError:
        found = None
    if found:
        return found
    code = getattr(target, "__code__", None)
    return code.co_filename if code is not None else "<unknown>"
