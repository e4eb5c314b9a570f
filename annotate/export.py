"""`annotate --export` and `--check`: write the structured JAX module, run it against torch eager."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from annotate.output import emit
from annotate.sizes import other_shape
from render.ir import Program
from render.lower import lower
from render.lower.dims import Resize
from render.module import render_program
from tracing.trace import Trace

EXIT_OK, EXIT_MISMATCH = 0, 1

# (rtol, atol) by the dtype compared: round-off of one reordered reduction, not more.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-5, 1e-6),  # computed in float32 unless JAX runs with x64
    "float32": (1e-5, 1e-6),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
}


@dataclass
class Comparison:
    """One output (or new state buffer) of the export against torch."""

    what: str
    shape: str
    max_abs: float
    rel: float
    """`max_abs / max |torch|`: the error relative to the output's scale."""
    rtol: float
    atol: float
    scale: float

    @property
    def ok(self) -> bool:
        return bool(self.max_abs <= self.atol + self.rtol * self.scale)

    def line(self) -> str:
        verdict = "ok" if self.ok else "MISMATCH"
        return f"  {self.what:<44} {self.shape:<20} max abs {self.max_abs:.2e}  rel {self.rel:.2e}  {verdict}"


def run(
    options: argparse.Namespace, entry: Any, trace: Trace, retrace: Callable[[Resize], Trace] | None = None
) -> int:
    """Export `trace` (to ``options.output`` or stdout); with ``--check`` compare it with torch.

    With `retrace` (the capture again, inputs resized), sizes that follow the inputs are generic."""
    program = lower(trace, retrace)
    text = render_program(program, source=f"{getattr(options, 'shown_file', options.file)}: {trace.entry}")
    if getattr(options, "export", True) or not options.check:
        emit(text, options)
    if not options.check:
        return EXIT_OK
    module = load_module(text)
    comparisons = check(
        module, program, entry.fn, entry.args, entry.kwargs, rtol=options.rtol, atol=options.atol
    )
    print(
        f"annotate: --check: the export against torch eager on the example inputs "
        f"({'model weights' if program.takes_params else 'no weights'}):",
        file=sys.stderr,
    )
    for comparison in comparisons:
        print(comparison.line(), file=sys.stderr)
    again = other_shape(program, entry.fn, entry.args, entry.kwargs)
    if again is not None:  # a generic export: at another shape too
        args, kwargs, where = again
        more = check(module, program, entry.fn, args, kwargs, rtol=options.rtol, atol=options.atol)
        print(f"annotate: --check: and at another shape ({where}):", file=sys.stderr)
        for comparison in more:
            print(comparison.line(), file=sys.stderr)
        comparisons += more
    bad = [c for c in comparisons if not c.ok]
    if bad:
        print(
            f"annotate: --check: {len(bad)} of {len(comparisons)} beyond tolerance "
            f"(rtol {bad[0].rtol:g}, atol {bad[0].atol:g}; set --rtol/--atol)",
            file=sys.stderr,
        )
        return EXIT_MISMATCH
    return EXIT_OK


def load_module(text: str, name: str = "jaxside_export") -> types.ModuleType:
    """Import exported source as a module (not registered in `sys.modules`)."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module


def to_jax(value: Any) -> Any:
    """Torch tensors (in any pytree) as `jnp` arrays, the way the exported `load_params` does."""

    def convert(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        leaf = leaf.detach().cpu()
        if leaf.dtype == torch.bfloat16:
            return jnp.asarray(leaf.float().numpy(), dtype=jnp.bfloat16)
        return jnp.asarray(leaf.numpy())

    return torch_pytree.tree_map(convert, value)


def entry_inputs(module: types.ModuleType, program: Program, fn: Any, args: tuple, kwargs: dict) -> list[Any]:
    """The exported entry's arguments: params and state from the model, then the traced tensors."""
    values: list[Any] = []
    if program.takes_params or program.takes_state:
        loaded = module.load_params(fn)
        if program.takes_params and program.takes_state:
            values += list(loaded)
        elif program.takes_params:
            values.append(loaded)
        else:
            values.append(loaded[1] if isinstance(loaded, tuple) else loaded)
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        arguments = inspect.signature(target).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        arguments = {"args": args, "kwargs": kwargs}
    for name in _argument_roots(program.trace):
        values.append(to_jax(arguments[name]))
    return values


def _argument_roots(trace: Trace) -> list[str]:
    roots: list[str] = []
    for item in trace.inputs:
        if item.kind == "arg":
            match = re.match(r"[^\W\d]\w*", item.name)  # an identifier of any script
            root = match.group(0) if match else item.name
            if root not in roots:
                roots.append(root)
    return roots


def check(
    module: types.ModuleType,
    program: Program,
    fn: Any,
    args: tuple,
    kwargs: dict,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> list[Comparison]:
    """Run the export under `jax.jit` and torch eager on the same inputs; compare every output."""
    inputs = entry_inputs(module, program, fn, args, kwargs)  # before torch runs: it may write buffers
    exported = getattr(module, program.entry.name)
    result = jax.jit(exported)(*inputs)
    outputs, new_state = result if program.takes_state else (result, None)
    with torch.no_grad():
        expected = fn(*args, **kwargs)
    comparisons = []
    for path, _var in program.trace.outputs:
        got = _at(outputs, path)
        want = _at(expected, path)
        comparisons.append(_compare(path or "output", got, want, rtol, atol))
    if new_state is not None:
        buffers = _torch_tensors(fn)
        for path in program.state_paths:
            got = _at_dotted(new_state, path)
            comparisons.append(_compare(f"state {path}", got, buffers[path], rtol, atol))
    return comparisons


def compare_gradients(
    module: types.ModuleType,
    program: Program,
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    loss: Callable[[Any], Any] | None = None,
) -> list[Comparison]:
    """`jax.grad` of the export w.r.t. params against torch autograd, for `sum` of every float output."""
    inputs = entry_inputs(module, program, model, args, kwargs)
    exported = getattr(module, program.entry.name)
    params, rest = inputs[0], inputs[1:]

    def jax_loss(params: Any) -> Any:
        result = exported(params, *rest)
        outputs = result[0] if program.takes_state else result
        return sum(
            jnp.sum(leaf)
            for leaf in jax.tree_util.tree_leaves(outputs)
            if jnp.issubdtype(leaf.dtype, jnp.floating)
        )

    grads = jax.jit(jax.grad(jax_loss, allow_int=True))(params)
    model.zero_grad(set_to_none=True)
    expected = model(*args, **kwargs)
    total = sum(
        leaf.sum()
        for leaf in torch_pytree.tree_leaves(expected)
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
    )
    total.backward()
    comparisons = []
    for name, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        got = _at_dotted(grads, name)
        comparisons.append(_compare(f"grad {name}", got, parameter.grad, rtol, atol))
    model.zero_grad(set_to_none=True)
    return comparisons


# -- comparing -----------------------------------------------------------------------------------------


def _compare(what: str, got: Any, want: Any, rtol: float | None, atol: float | None) -> Comparison:
    want_np = _numpy(want)
    got_np = np.asarray(got, dtype=np.float64) if want_np.dtype.kind in "fc" else np.asarray(got)
    dtype = str(want.dtype).removeprefix("torch.") if isinstance(want, torch.Tensor) else str(want_np.dtype)
    default_rtol, default_atol = TOLERANCES.get(dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    shape = f"{dtype}{list(want_np.shape)}".replace(" ", "")
    if got_np.shape != want_np.shape:
        return Comparison(
            what, f"{shape} != {list(got_np.shape)}", float("inf"), float("inf"), rtol, atol, 0.0
        )
    diff = np.abs(got_np.astype(np.float64) - want_np.astype(np.float64)) if want_np.size else np.zeros(0)
    max_abs = float(diff.max()) if diff.size else 0.0
    if diff.size and np.isnan(diff).any():
        same_nan = np.isnan(got_np.astype(np.float64)) == np.isnan(want_np.astype(np.float64))
        max_abs = (
            float(np.nanmax(diff))
            if same_nan.all() and not np.isnan(diff).all()
            else (0.0 if same_nan.all() else float("inf"))
        )
    scale = float(np.nanmax(np.abs(want_np.astype(np.float64)))) if want_np.size else 0.0
    rel = max_abs / scale if scale else (0.0 if max_abs == 0 else float("inf"))
    return Comparison(what, shape, max_abs, rel, rtol, atol, scale)


def _numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.float().numpy() if value.dtype == torch.bfloat16 else value.numpy()
    return np.asarray(value)


_PART = re.compile(r"\[(\d+|'[^']*'|\"[^\"]*\")\]")


def _at(tree: Any, path: str) -> Any:
    for part in _PART.findall(path):
        tree = tree[int(part)] if part.isdigit() else tree[part[1:-1]]
    return tree


def _at_dotted(tree: Any, path: str) -> Any:
    for part in path.split("."):
        tree = tree[int(part)] if isinstance(tree, list) else tree[part]
    return tree


def _torch_tensors(fn: Any) -> dict[str, torch.Tensor]:
    if not isinstance(fn, torch.nn.Module):
        return {}
    tensors = {**dict(fn.named_parameters()), **dict(fn.named_buffers())}
    for prefix, sub in fn.named_modules():
        for name, value in vars(sub).items():
            if isinstance(value, torch.Tensor):
                tensors.setdefault(f"{prefix}.{name}" if prefix else name, value)
    return tensors
