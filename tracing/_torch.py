"""The torch session: an `nn.Module` or torch function run under torchax on traced inputs.

For a module, every parameter, buffer and plain tensor attribute becomes a jaxpr input named by
its state_dict path (tied weights are one input); the arguments' tensor leaves follow, then the
key random ops draw from (`tracing._random`). While traced, the inputs sit where the module
keeps its state, and the entry runs under the torchax environment and ``torch.device("jax")``;
all of it is undone on the way out. What the entry returns is rewritten into plain containers
(`tracing._outputs`) before it is flattened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import torch
import torch.utils._pytree as torch_pytree

from jaxside.tracing import _internals
from jaxside.tracing._files import module_of, user_files
from jaxside.tracing._frames import Recorder
from jaxside.tracing._outputs import held_tensors, holds_tensor, plain_output, with_tensors
from jaxside.tracing._progress import Reporter
from jaxside.tracing._random import key_input, key_name
from jaxside.tracing._replay import replaying
from jaxside.tracing._session import Entry, Returned, bind, entry_code
from jaxside.tracing.errors import OutputError
from jaxside.tracing.trace import InputKind, Trace


@dataclass
class _InputSlot:
    kind: InputKind
    name: str
    tensor: torch.Tensor


class TorchSession:
    """One capture of torch code: the inputs gathered, then run once on traced values."""

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, watch: Iterable[Any],
        abstract: bool,
        resize: Mapping[str, tuple[int, ...]] | None = None, like: Trace | None = None,
    ) -> None:
        self.fn = fn
        self.like = like
        self.abstract = abstract
        self.resize = dict(resize or {})
        self.module = module_of(fn)
        name = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))
        self.bound = bind(fn.forward if isinstance(fn, torch.nn.Module) else fn, args, kwargs)
        is_user_file = user_files(fn, self.module, watch)
        self.module_paths: dict[int, str] = {}
        self.modules: dict[str, torch.nn.Module] = {}
        """Each module of the entry's by path (where `_swapped_state` puts the traced tensors)."""
        if self.module is not None:
            self.modules = dict(self.module.named_modules(remove_duplicate=False))
            self.module_paths = {id(m): p for p, m in self.modules.items()}
        self.slots: list[_InputSlot] = []
        self.arg_leaves: dict[str, tuple[list[Any], Any]] = {}
        self.aliases: dict[str, list[str]] = {}
        self._collect_inputs()
        self.key = key_name(self.bound.signature.parameters)
        code = entry_code(fn)
        self.entry = Entry(
            name=name, frontend="torch", code=code,
            file=code.co_filename if code else "", line=code.co_firstlineno if code else 0,
            inputs=[*((slot.kind, slot.name) for slot in self.slots), ("arg", self.key)],
            is_user_file=is_user_file,
        )

    def _collect_inputs(self) -> None:
        if self.module is not None:
            seen: dict[int, str] = {}
            named_tensors: tuple[tuple[InputKind, Iterable[tuple[str, torch.Tensor]]], ...] = (
                ("param", self.module.named_parameters(remove_duplicate=False)),
                ("buffer", self.module.named_buffers(remove_duplicate=False)),
                ("buffer", tensor_attributes(self.module)),
            )
            for kind, named in named_tensors:
                for name, tensor in named:
                    if id(tensor) in seen:  # tied weights: one input, every alias swapped
                        self.aliases[seen[id(tensor)]].append(name)
                        continue
                    seen[id(tensor)] = name
                    self.aliases[name] = [name]
                    self.slots.append(_InputSlot(kind, name, tensor))
        for name, value in self.bound.arguments.items():
            leaves, spec = _flatten_with_path(value)
            self.arg_leaves[name] = ([leaf for _, leaf in leaves], spec)
            for path, leaf in leaves:
                if isinstance(leaf, torch.Tensor):
                    self.slots.append(_InputSlot("arg", name + torch_pytree.keystr(path), leaf))
                elif holds_tensor(leaf):  # a cache passed in: its tensors, as `plain_output` lays them out
                    for inner, tensor in held_tensors(leaf):
                        where = name + torch_pytree.keystr(path) + "".join(f"[{key!r}]" for key in inner)
                        self.slots.append(_InputSlot("arg", where, tensor))

    def inputs(self) -> list[Any]:
        """The state and argument tensors, then the key random ops draw from (`tracing._random`)."""
        values: list[Any] = []
        for slot in self.slots:
            tensor = slot.tensor
            if self.abstract or tensor.device.type == "meta" or slot.name in self.resize:
                dtype = _internals.to_jax_dtype(tensor.dtype)
                shape = self.resize.get(slot.name, tuple(tensor.shape))
                values.append(jax.ShapeDtypeStruct(tuple(shape), dtype))
            else:
                values.append(_internals.to_jax_array(tensor))
        return [*values, key_input()]

    def run(self, flat: tuple[Any, ...], recorder: Recorder, reporter: Reporter) -> Returned:
        env = _internals.torchax.default_env()
        probe = recorder.probe
        *values, key = flat
        tensors = [_internals.wrap(value, env) for value in values]
        args, kwargs = self._rebuild_arguments(tensors)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._swapped_state(tensors))
            stack.enter_context(_internals.dynamo_not_imported())
            stack.enter_context(env)
            stack.enter_context(_internals.own_random_key(env, key))
            stack.enter_context(torch.device("jax"))
            views = stack.enter_context(_internals.view_values())
            if self.like is not None:  # a retrace: repeated module calls replayed (`tracing._replay`)
                stack.enter_context(replaying(
                    self.like, recorder, probe, views, self.module, self.module_paths, env, tensor_attributes
                ))
            stack.enter_context(reporter.watching(self.module_paths))
            stack.enter_context(recorder)
            out = self.fn(*args, **kwargs)
        out = plain_output(out, lambda value: _internals.view_tensor(value, env))
        leaves, spec = torch_pytree.tree_flatten_with_path(out)
        outputs, static = [], {}
        for i, (path, leaf) in enumerate(leaves):
            if _internals.var_of(leaf) is not None or isinstance(leaf, _internals.TorchaxTensor):
                outputs.append((torch_pytree.keystr(path), _internals.jax_value(leaf)))
            elif holds_tensor(leaf):
                raise OutputError(
                    f"{self.entry.name} returned a {type(leaf).__qualname__} holding traced tensors, "
                    "which torch's pytree cannot flatten",
                    file=self.entry.code.co_filename if self.entry.code else None,
                    line=self.entry.code.co_firstlineno if self.entry.code else None,
                )
            else:
                static[i] = leaf
        mutated = [i for i, (t, v) in enumerate(zip(tensors, values)) if _internals.jax_value(t) is not v]
        return Returned(
            values=[v for _, v in outputs] + [_internals.jax_value(tensors[i]) for i in mutated],
            paths=[p for p, _ in outputs], spec=spec, static=static, mutated=mutated,
            module_paths=self.module_paths, views=views,
        )

    def _rebuild_arguments(self, tensors: list[Any]) -> tuple[tuple[Any, ...], dict[Any, Any]]:
        arg_tensors = iter(t for slot, t in zip(self.slots, tensors) if slot.kind == "arg")
        arguments = {}
        for name, (leaves, spec) in self.arg_leaves.items():
            leaves = [
                next(arg_tensors) if isinstance(leaf, torch.Tensor)
                else with_tensors(leaf, [next(arg_tensors) for _ in held_tensors(leaf)]) if holds_tensor(leaf)
                else leaf
                for leaf in leaves
            ]
            arguments[name] = torch_pytree.tree_unflatten(leaves, spec)
        bound = inspect.BoundArguments(self.bound.signature, arguments)
        return bound.args, bound.kwargs

    @contextlib.contextmanager
    def _swapped_state(self, tensors: list[Any]) -> Iterator[None]:
        """Put the traced tensors where the module keeps its params, buffers and tensor attributes."""
        if self.module is None:  # a function: no state of its own
            yield
            return
        saved = []
        try:
            for slot, tensor in zip(self.slots, tensors):
                for name in self.aliases.get(slot.name, ()):
                    owner_path, _, attr = name.rpartition(".")
                    owner = self.modules[owner_path]
                    for store in (owner._parameters, owner._buffers, owner.__dict__):
                        if attr in store:
                            saved.append((store, attr, store[attr]))
                            store[attr] = tensor
                            break
            yield
        finally:
            for store, attr, value in reversed(saved):
                store[attr] = value


def tensor_attributes(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Plain tensor attributes (not params or buffers) such as a precomputed RoPE table."""
    tensor, parameter = torch.Tensor, torch.nn.Parameter
    for path, sub in module.named_modules(remove_duplicate=False):
        found = [(a, v) for a, v in vars(sub).items() if isinstance(v, tensor)]  # (few are: a list first)
        for attr, value in found:
            if isinstance(value, parameter):
                continue
            yield (f"{path}.{attr}" if path else attr), value


def _flatten_with_path(value: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """torch's pytree flatten of an argument, after registering the dataclasses holding tensors
    found among the leaves (``Batch(tokens, mask)``), so their tensors are leaves too."""
    tried: set[type] = set()
    while True:
        leaves, spec = torch_pytree.tree_flatten_with_path(value)
        fresh = {
            type(leaf) for _, leaf in leaves
            if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type) and type(leaf) not in tried
            and holds_tensor(leaf)
        }
        if not fresh:
            return leaves, spec
        for cls in fresh:
            tried.add(cls)
            with contextlib.suppress(ValueError):  # registered meanwhile, or not registrable
                torch_pytree.register_dataclass(cls)
