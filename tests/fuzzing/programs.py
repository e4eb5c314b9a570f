"""Random valid torch programs for the fuzzer, built one line at a time as Python source.

This module has what a program is and how it is built; `fuzzing.draw` has the hypothesis
strategy `programs` and the operations a line is drawn from.

A program is source text (`def program(v0, v1): ...`) plus the seed its inputs are made from,
so a failing case prints as code and is kept as code in `tests/fuzzing/regressions.py`.
Each line is checked as it is drawn by running it eagerly on the inputs: a line that raises,
or makes a value that is not finite or too large to compare across backends, is drawn again.
Values stay small and finite so that torch and XLA agree to float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

MAX_LINES = 10
ATTEMPTS = 6
LIMIT = 1e4  # largest magnitude a value may reach: bf16 and float32 still agree to tolerance there
INT_LIMIT = 1 << 20  # torchax computes int64 as int32; keep far from overflow

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype

    def source(self) -> str:
        return f"({self.shape!r}, {self.dtype})"


@dataclass
class Program:
    """Source of a torch function and how to make its inputs."""

    inputs: list[InputSpec]
    lines: list[str]
    outputs: list[str]
    seed: int = 0

    @property
    def source(self) -> str:
        params = ", ".join(f"v{i}" for i in range(len(self.inputs)))
        body = [f"    {line}" for line in self.lines]
        returned = ", ".join(f"{name}.clone()" for name in self.outputs)
        return "\n".join([f"def program({params}):", *body, f"    return ({returned},)"])

    def function(self) -> Callable[..., Any]:
        namespace = program_namespace()
        exec(compile(self.source, "<fuzzed program>", "exec"), namespace)
        return namespace["program"]

    def make_inputs(self) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed)
        return [make_tensor(spec, generator) for spec in self.inputs]


def make_tensor(spec: InputSpec, generator: torch.Generator) -> torch.Tensor:
    if spec.dtype == torch.bool:
        return torch.rand(spec.shape, generator=generator) < 0.5
    if not spec.dtype.is_floating_point:
        return torch.randint(-8, 9, spec.shape, generator=generator, dtype=spec.dtype)
    return torch.randn(spec.shape, generator=generator).to(spec.dtype)


# -- drawing -----------------------------------------------------------------------------------------


@dataclass
class Value:
    name: str
    tensor: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def ndim(self) -> int:
        return self.tensor.ndim

    @property
    def dtype(self) -> torch.dtype:
        return self.tensor.dtype

    @property
    def is_float(self) -> bool:
        return self.tensor.dtype in FLOAT_DTYPES

    @property
    def is_int(self) -> bool:
        return self.tensor.dtype in (torch.int64, torch.int32)

    @property
    def is_bool(self) -> bool:
        return self.tensor.dtype == torch.bool


Draw = Callable[[st.SearchStrategy[Any]], Any]


@dataclass
class Builder:
    """The program drawn so far, with each value computed eagerly."""

    draw: Draw
    generator: torch.Generator
    inputs: list[InputSpec] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=lambda: program_namespace())

    def fresh(self) -> str:
        return f"v{len(self.inputs) + len(self.lines)}"

    def new_input(self, shape: tuple[int, ...], dtype: torch.dtype) -> Value:
        """A new parameter of the program (a weight for a matmul, a conv kernel, ...)."""
        spec = InputSpec(tuple(shape), dtype)
        value = Value(f"v{len(self.inputs)}", make_tensor(spec, self.generator))
        self.inputs.append(spec)
        self.values.append(value)
        self.env[value.name] = value.tensor
        return value

    def pick(self, accept: Callable[[Value], bool]) -> Value | None:
        """One of the values `accept` takes; the latest first, so that lines tend to chain."""
        choices = [v for v in reversed(self.values) if accept(v)]
        return self.draw(st.sampled_from(choices)) if choices else None

    def add(self, expression: str) -> bool:
        """Run `expression` eagerly; keep it as a new line if it makes a well-behaved tensor."""
        try:
            result = eval(expression, self.env)
        except Exception:
            return False
        if not isinstance(result, torch.Tensor) or not _well_behaved(result):
            return False
        name = self.fresh()
        self.lines.append(f"{name} = {expression}")
        self.env[name] = result
        self.values.append(Value(name, result))
        return True


def _well_behaved(t: torch.Tensor) -> bool:
    """Small, no NaN, finite values at most LIMIT (infinities allowed: masks use them)."""
    if t.numel() == 0 or t.numel() > 4096:
        return False
    if t.dtype.is_floating_point:
        values = t.float()
        finite = values[torch.isfinite(values)]
        small = finite.numel() == 0 or float(finite.abs().max()) <= LIMIT
        return small and not bool(torch.isnan(values).any())
    if t.dtype == torch.bool:
        return True
    if t.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        return float(t.abs().max()) <= INT_LIMIT
    return False


def _setitem(x: torch.Tensor, row: int) -> torch.Tensor:
    y = x.clone()
    y[row] = y[row] * 2 + 1
    return y


def program_namespace() -> dict[str, Any]:
    """What generated program source may refer to."""
    return {"torch": torch, "F": F, "_setitem": _setitem}
