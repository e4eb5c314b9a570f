"""The Python API: what the command line does, on objects, returning objects (docs/api.md).

    exported = jaxside.export(model, x)          # .source, .forward, .load_params, .check(), .write()
    report = jaxside.review(model, port, x)      # .ok, .rows, .first_divergence, .weights, .text()
    annotated = jaxside.annotate_source(model, x)  # .text (comments beside the torch lines), .map

The keyword options are the command line's, by the same names (``--static-shapes`` is
`static_shapes`): `annotate.options.Options` and `ReviewOptions` list them once.
"""

from __future__ import annotations

from jaxside.annotate.api.annotated import Annotated, annotate_source
from jaxside.annotate.api.export import Export, export
from jaxside.annotate.api.review import review

__all__ = ["Annotated", "Export", "annotate_source", "export", "review"]
