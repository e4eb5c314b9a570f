"""Trace torch code through torchax into a jaxpr, recording where every value came from.

    from tracing import capture
    trace = capture(model, tokens, input_pos)
    trace.origin(var)            # function, module path, local name, source line/expression
    trace.root.children          # the user call tree, each call with its equations

Names are loaded on first use, so the frame recorder (`tracing._frames`) imports without
torch or jax.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "Capture": "tracing._capture",
    "CaptureError": "tracing._capture",
    "InputsError": "tracing._capture",
    "MixedDeviceError": "tracing._capture",
    "OutputError": "tracing._capture",
    "Progress": "tracing._capture",
    "UnsupportedOpError": "tracing._capture",
    "ValueDependentError": "tracing._capture",
    "capture": "tracing._capture",
    "is_library_file": "tracing._capture",
    "user_code": "tracing._capture",
    "Call": "tracing.trace",
    "Input": "tracing.trace",
    "Origin": "tracing.trace",
    "Site": "tracing.trace",
    "StateUpdate": "tracing.trace",
    "Trace": "tracing.trace",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from tracing._capture import Capture as Capture
    from tracing._capture import CaptureError as CaptureError
    from tracing._capture import InputsError as InputsError
    from tracing._capture import MixedDeviceError as MixedDeviceError
    from tracing._capture import OutputError as OutputError
    from tracing._capture import Progress as Progress
    from tracing._capture import UnsupportedOpError as UnsupportedOpError
    from tracing._capture import ValueDependentError as ValueDependentError
    from tracing._capture import capture as capture
    from tracing._capture import is_library_file as is_library_file
    from tracing._capture import user_code as user_code
    from tracing.trace import Call as Call
    from tracing.trace import Input as Input
    from tracing.trace import Origin as Origin
    from tracing.trace import Site as Site
    from tracing.trace import StateUpdate as StateUpdate
    from tracing.trace import Trace as Trace


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tracing' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
