"""Trace torch code through torchax into a jaxpr, recording where every value came from.

    from jaxside import capture
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
    "Capture": "jaxside.tracing._capture",
    "capture": "jaxside.tracing._capture",
    "PROGRESS_AFTER": "jaxside.tracing._progress",
    "PROGRESS_EVERY": "jaxside.tracing._progress",
    "Progress": "jaxside.tracing._progress",
    "CaptureError": "jaxside.tracing.errors",
    "InputsError": "jaxside.tracing.errors",
    "MixedDeviceError": "jaxside.tracing.errors",
    "OutputError": "jaxside.tracing.errors",
    "UnsupportedOpError": "jaxside.tracing.errors",
    "ValueDependentError": "jaxside.tracing.errors",
    "example_key": "jaxside.tracing._random",
    "is_key": "jaxside.tracing._random",
    "is_library_file": "jaxside.tracing._files",
    "to_jax_dtype": "jaxside.tracing._internals",
    "held_tensors": "jaxside.tracing._outputs",
    "plain_output": "jaxside.tracing._outputs",
    "with_tensors": "jaxside.tracing._outputs",
    "random_outputs": "jaxside.tracing._random",
    "tensor_attributes": "jaxside.tracing._torch",
    "user_code": "jaxside.tracing._files",
    "Call": "jaxside.tracing.trace",
    "Input": "jaxside.tracing.trace",
    "Origin": "jaxside.tracing.trace",
    "Site": "jaxside.tracing.trace",
    "StateUpdate": "jaxside.tracing.trace",
    "Trace": "jaxside.tracing.trace",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from jaxside.tracing._capture import Capture as Capture
    from jaxside.tracing._capture import capture as capture
    from jaxside.tracing._files import is_library_file as is_library_file
    from jaxside.tracing._files import user_code as user_code
    from jaxside.tracing._internals import to_jax_dtype as to_jax_dtype
    from jaxside.tracing._outputs import held_tensors as held_tensors
    from jaxside.tracing._outputs import plain_output as plain_output
    from jaxside.tracing._outputs import with_tensors as with_tensors
    from jaxside.tracing._progress import PROGRESS_AFTER as PROGRESS_AFTER
    from jaxside.tracing._progress import PROGRESS_EVERY as PROGRESS_EVERY
    from jaxside.tracing._progress import Progress as Progress
    from jaxside.tracing._random import example_key as example_key
    from jaxside.tracing._random import is_key as is_key
    from jaxside.tracing._random import random_outputs as random_outputs
    from jaxside.tracing._torch import tensor_attributes as tensor_attributes
    from jaxside.tracing.errors import CaptureError as CaptureError
    from jaxside.tracing.errors import InputsError as InputsError
    from jaxside.tracing.errors import MixedDeviceError as MixedDeviceError
    from jaxside.tracing.errors import OutputError as OutputError
    from jaxside.tracing.errors import UnsupportedOpError as UnsupportedOpError
    from jaxside.tracing.errors import ValueDependentError as ValueDependentError
    from jaxside.tracing.trace import Call as Call
    from jaxside.tracing.trace import Input as Input
    from jaxside.tracing.trace import Origin as Origin
    from jaxside.tracing.trace import Site as Site
    from jaxside.tracing.trace import StateUpdate as StateUpdate
    from jaxside.tracing.trace import Trace as Trace


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jaxside.tracing' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
