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
    "capture": "tracing._capture",
    "PROGRESS_AFTER": "tracing._progress",
    "PROGRESS_EVERY": "tracing._progress",
    "Progress": "tracing._progress",
    "CaptureError": "tracing.errors",
    "InputsError": "tracing.errors",
    "MixedDeviceError": "tracing.errors",
    "OutputError": "tracing.errors",
    "UnsupportedOpError": "tracing.errors",
    "ValueDependentError": "tracing.errors",
    "example_key": "tracing._random",
    "is_key": "tracing._random",
    "is_library_file": "tracing._files",
    "to_jax_dtype": "tracing._internals",
    "plain_output": "tracing._outputs",
    "random_outputs": "tracing._random",
    "user_code": "tracing._files",
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
    from tracing._capture import capture as capture
    from tracing._files import is_library_file as is_library_file
    from tracing._files import user_code as user_code
    from tracing._internals import to_jax_dtype as to_jax_dtype
    from tracing._outputs import plain_output as plain_output
    from tracing._progress import PROGRESS_AFTER as PROGRESS_AFTER
    from tracing._progress import PROGRESS_EVERY as PROGRESS_EVERY
    from tracing._progress import Progress as Progress
    from tracing._random import example_key as example_key
    from tracing._random import is_key as is_key
    from tracing._random import random_outputs as random_outputs
    from tracing.errors import CaptureError as CaptureError
    from tracing.errors import InputsError as InputsError
    from tracing.errors import MixedDeviceError as MixedDeviceError
    from tracing.errors import OutputError as OutputError
    from tracing.errors import UnsupportedOpError as UnsupportedOpError
    from tracing.errors import ValueDependentError as ValueDependentError
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
