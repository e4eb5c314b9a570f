"""jaxside: watch PyTorch code run under torchax and write the JAX it produced.

    import jaxside
    trace = jaxside.capture(model, *inputs)      # an nn.Module or a function, and its inputs
    exported = jaxside.export(model, *inputs)    # the JAX module: .source, .forward, .check(), .write()
    report = jaxside.review(model, port, *inputs)  # a JAX port against torch: .ok, .first_divergence
    annotated = jaxside.annotate_source(model, *inputs)  # .text: JAX comments beside torch; .map
    exported                                     # in a notebook: torch beside its JAX

The keyword options are the command line's by the same names (docs/api.md). The command line is
`annotate` (or `python -m jaxside`). The packages: `jaxside.annotate` (the command line and this
API), `jaxside.tracing` (torch code -> `Trace`) and `jaxside.render` (`Trace` -> text). Names are
loaded on first use, and torch and jax only when called: `import jaxside` imports neither.
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

_TRACING = {"Capture": "jaxside.tracing", "Trace": "jaxside.tracing", "capture": "jaxside.tracing"}
_EXPORTS = {
    **_TRACING,
    "export": "jaxside.annotate.api",
    "review": "jaxside.annotate.api",
    "annotate_source": "jaxside.annotate.api",
    "Export": "jaxside.annotate.api",
    "Annotated": "jaxside.annotate.api",
    "Review": "jaxside.annotate.review.result",
    "Options": "jaxside.annotate.options",
    "ReviewOptions": "jaxside.annotate.options",
}
__all__ = ["Annotated", "Capture", "Export", "Options", "Review", "ReviewOptions", "Trace", "__version__",
           "annotate_source", "capture", "export", "review"]

if TYPE_CHECKING:
    from jaxside.annotate.api import Annotated as Annotated
    from jaxside.annotate.api import Export as Export
    from jaxside.annotate.api import annotate_source as annotate_source
    from jaxside.annotate.api import export as export
    from jaxside.annotate.api import review as review
    from jaxside.annotate.options import Options as Options
    from jaxside.annotate.options import ReviewOptions as ReviewOptions
    from jaxside.annotate.review.result import Review as Review
    from jaxside.tracing import Capture as Capture
    from jaxside.tracing import Trace as Trace
    from jaxside.tracing import capture as capture


def __getattr__(name: str) -> object:
    if name == "__version__":
        return importlib.import_module("jaxside.annotate").__version__
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jaxside' has no attribute {name!r}")
    if name in _TRACING:
        importlib.import_module("jaxside.render.html")  # registers the notebook view of a Trace
    return getattr(importlib.import_module(_EXPORTS[name]), name)
