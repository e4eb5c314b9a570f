"""torch's process-wide settings, saved and put back: a user file may change them when imported.

`torch.set_default_device`, `torch.set_default_dtype`, `torch.set_grad_enabled(False)`,
`torch.set_num_threads`, `torch.set_printoptions` or a
`TorchFunctionMode` entered and never exited at a file's top level would otherwise outlive an
in-process `annotate.cli.main()`. The mode stacks and the default-device context are torch
internals (torch 2.5 to 2.13), kept here in one place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["State", "restore", "save"]


@dataclass
class State:
    dtype: Any
    grad: bool
    deterministic: bool
    anomaly: bool
    matmul_precision: str
    function_modes: list[Any]
    dispatch_modes: list[Any]
    device_context: Any
    current_device: Any
    threads: int | None = None
    print_options: dict[str, Any] | None = None


def save() -> State | None:
    """torch's settings now; None when torch is not imported yet (its defaults are then in force)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    import torch.utils._device as device_module

    c = torch._C
    return State(
        dtype=torch.get_default_dtype(),
        grad=torch.is_grad_enabled(),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        anomaly=torch.is_anomaly_enabled(),
        matmul_precision=torch.get_float32_matmul_precision(),
        function_modes=[c._get_function_stack_at(i) for i in range(c._len_torch_function_stack())],
        dispatch_modes=[c._get_dispatch_stack_at(i) for i in range(c._len_torch_dispatch_stack())],
        device_context=getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None),
        current_device=device_module.CURRENT_DEVICE,
        threads=torch.get_num_threads(),
        print_options=dict(vars(torch._tensor_str.PRINT_OPTS)),
    )


def restore(state: State | None) -> None:
    """Put torch's settings back to `state` (None: torch's defaults), if torch has been imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    import torch.utils._device as device_module

    if state is None:
        state = State(torch.float32, True, False, False, "highest", [], [], None, None)
    c = torch._C
    torch.set_default_dtype(state.dtype)
    torch.set_grad_enabled(state.grad)
    if torch.are_deterministic_algorithms_enabled() != state.deterministic:  # it imports torch._inductor
        torch.use_deterministic_algorithms(state.deterministic)
    torch.set_anomaly_enabled(state.anomaly)
    torch.set_float32_matmul_precision(state.matmul_precision)
    while c._len_torch_function_stack():
        c._pop_torch_function_stack()
    for mode in state.function_modes:
        c._push_on_torch_function_stack(mode)
    while c._len_torch_dispatch_stack():
        c._pop_torch_dispatch_stack(None)
    for mode in state.dispatch_modes:
        c._push_on_torch_dispatch_stack(mode)
    torch._GLOBAL_DEVICE_CONTEXT.device_context = state.device_context
    device_module.CURRENT_DEVICE = state.current_device
    if state.threads is not None and torch.get_num_threads() != state.threads:
        torch.set_num_threads(state.threads)
    if state.print_options is not None:
        vars(torch._tensor_str.PRINT_OPTS).update(state.print_options)
