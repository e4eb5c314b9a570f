"""`jaxside.review(torch_entry, port_entry, *inputs)`: ``annotate review`` on objects, as a `Review`."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any

from jaxside.annotate.api.shared import label
from jaxside.annotate.review.result import Review, review_entries

__all__ = ["review"]


def review(
    torch_entry: Any,
    port_entry: Any,
    /,
    *args: Any,
    port_weights: str | None = None,
    params_map: str | os.PathLike[str] | Mapping[str, str] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    kwargs: dict[str, Any] | None = None,
    **inputs: Any,
) -> Review:
    """Run `torch_entry` (an `nn.Module` or a function) and `port_entry` (a JAX function whose
    leading arguments are weight pytrees; a Flax NNX, Flax Linen or Equinox module; or a function
    building one) on the same inputs and weights, and find the first line where they differ.

    The options are ``annotate review``'s by the same names: `port_weights` names the port's own
    loader in the port's module, `params_map` a file defining ``PARAMS_MAP`` (or that dict itself:
    {port leaf path: torch state_dict name}). Keyword inputs named
    like an option go in `kwargs`. Returns a `Review` (`.ok`, `.rows`, `.first_divergence`,
    `.weights`, `.text()`, `.html()`)."""
    from jaxside.annotate.loading import Entry
    from jaxside.annotate.options import ReviewOptions

    module = inspect.getmodule(port_entry) or inspect.getmodule(type(port_entry))
    if module is None:
        module = sys.modules["__main__"]
    name = getattr(port_entry, "__name__", type(port_entry).__name__)
    options = ReviewOptions.of(file=label(_file_of(torch_entry)), port=label(_file_of(port_entry)),
                               port_entry=name, params_map=_params_map(params_map),
                               port_weights=port_weights, rtol=rtol, atol=atol)
    entry = Entry(torch_entry, tuple(args), {**(kwargs or {}), **inputs})
    return review_entries(options, entry, lambda _torch_entry: (module, port_entry, name), _silent)


def _params_map(given: str | os.PathLike[str] | Mapping[str, str] | None) -> str | Mapping[str, str] | None:
    if given is None or isinstance(given, Mapping):
        return given
    return os.fspath(given)


def _silent(phase: str) -> None:
    """The command's progress lines: the API shows none."""


def _file_of(entry: Any) -> str:
    """The file defining a function, or a module's class: a notebook cell's name for code typed
    there; for a Linen port, `(module, variables)`, its module's."""
    if isinstance(entry, tuple) and entry:
        return _file_of(entry[0])
    target = entry if inspect.isfunction(entry) or inspect.isclass(entry) else type(entry)
    try:
        found = inspect.getsourcefile(target)
    except (TypeError, OSError):  # a class typed in a notebook cell has no file inspect can find
        found = None
    if found:
        return found
    functions = [target] if inspect.isfunction(target) else [
        value for value in vars(target).values() if inspect.isfunction(value)]
    for function in functions:
        code = getattr(inspect.unwrap(function), "__code__", None)
        if code is not None:
            return str(code.co_filename)
    return "<unknown>"
