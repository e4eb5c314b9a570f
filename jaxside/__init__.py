"""jaxside: watch PyTorch code run under torchax and write the JAX it produced.

    from jaxside import capture
    trace = capture(model, *inputs)   # an nn.Module or a function, and its inputs
    trace                             # in a notebook: torch beside its JAX

The command line is `annotate` (or `python -m jaxside`). The packages: `jaxside.annotate` (the
command line), `jaxside.tracing` (torch code -> `Trace`) and `jaxside.render` (`Trace` -> text).
Names are loaded on first use, so `import jaxside` imports neither torch nor jax.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

# Installed, the three packages are folders of this one. In a source checkout they sit beside it
# (the layout the project was asked for), so the checkout is searched too: `PYTHONPATH=.` works.
_HERE = Path(__file__).resolve().parent
if not (_HERE / "tracing").is_dir() and (_HERE.parent / "tracing" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))

_EXPORTS = {"Capture": "jaxside.tracing", "Trace": "jaxside.tracing", "capture": "jaxside.tracing"}
__all__ = ["Capture", "Trace", "__version__", "capture"]

if TYPE_CHECKING:
    from jaxside.tracing import Capture as Capture
    from jaxside.tracing import Trace as Trace
    from jaxside.tracing import capture as capture


def __getattr__(name: str) -> object:
    if name == "__version__":
        return importlib.import_module("jaxside.annotate").__version__
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jaxside' has no attribute {name!r}")
    importlib.import_module("jaxside.render.html")  # registers the notebook view of a Trace
    return getattr(importlib.import_module(_EXPORTS[name]), name)
