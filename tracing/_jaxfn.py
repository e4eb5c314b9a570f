"""The JAX session: JAX functions (`jax.grad`, `jax.jit`, `jax.vmap` of them too) traced like torch code.

The same frame recorder watches the JAX code: its locals hold tracers (under `jax.grad`,
linearize tracers whose primal is the traced value), so values are named after them and
the user's functions become calls. What a JAX program adds to a torch one is read when the
trace is assembled: values inside sub-jaxprs get origins too (`tracing._assemble`), and the
backward pass of a gradient is told apart from the forward pass (`tracing._gradients`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import CodeType
from typing import Any

import jax
import numpy as np
import torch
import torch.utils._pytree as torch_pytree

from jaxside.tracing import _internals
from jaxside.tracing._files import user_files
from jaxside.tracing._frames import CallRecord, Recorder
from jaxside.tracing._progress import Reporter
from jaxside.tracing._session import Entry, Returned, bind
from jaxside.tracing.errors import OutputError

# What `jax.grad` and friends say their wrapper is, first words of its docstring -> the name prefix.
_TRANSFORMS = (
    ("Value and gradient of", "value_and_grad"),
    ("Gradient of", "grad"),
    ("Vectorized version of", "vmap"),
    ("Jacobian of", "jacobian"),
    ("Hessian of", "hessian"),
)


def is_jax_entry(fn: Any, args: tuple[Any, ...], kwargs: dict[Any, Any]) -> bool:
    """Whether to capture `fn` as JAX code: no torch module (or its method), no torch tensor in the inputs."""
    if isinstance(fn, torch.nn.Module):
        return False
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        return False
    return not any(isinstance(leaf, torch.Tensor) for leaf in jax.tree_util.tree_leaves((args, kwargs)))


def is_traced_leaf(value: Any) -> bool:
    """Inputs that become jaxpr inputs: arrays and Python floats, as `jax.jit` would trace them.

    Python ints and bools stay constants (they are lengths, axes and flags far more often than data).
    """
    return isinstance(value, (jax.Array, np.ndarray, np.generic, float, complex, jax.ShapeDtypeStruct))


@dataclass
class _Slot:
    name: str
    value: Any


class JaxSession:
    """One capture of a JAX function: the inputs flattened, then run once on traced values."""

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, watch: Iterable[Any],
        abstract: bool,
    ) -> None:
        self.abstract = abstract
        self.target = _unjit(fn)
        name = _entry_name(self.target)
        self.bound = bind(self.target, args, kwargs)
        is_user_file = user_files(self.target, None, watch)
        code = _code(self.target)
        if code is not None and _is_wrapper(self.target):
            code = None
        # A transformation's root (`jax.grad(f)`) has no def of its own: the file of `f`, line 0.
        defined_at = _code(inspect.unwrap(self.target))
        file, line = (
            (code.co_filename, code.co_firstlineno) if code is not None
            else (defined_at.co_filename, 0) if defined_at is not None else ("", 0)
        )
        self.slots: list[_Slot] = []
        self.arg_trees: dict[str, tuple[list[Any], Any]] = {}
        for arg, value in self.bound.arguments.items():
            leaves, treedef = jax.tree_util.tree_flatten_with_path(value)
            self.arg_trees[arg] = ([leaf for _, leaf in leaves], treedef)
            for path, leaf in leaves:
                if is_traced_leaf(leaf):
                    self.slots.append(_Slot(arg + jax.tree_util.keystr(path), leaf))
        self.entry = Entry(
            name=name, frontend="jax", code=code, file=file, line=line,
            inputs=[("arg", slot.name) for slot in self.slots], is_user_file=is_user_file,
        )

    def run(self, flat: tuple[Any, ...], recorder: Recorder, reporter: Reporter) -> Returned:
        args, kwargs = self._rebuild_arguments(flat)
        with recorder:
            out = self.target(*args, **kwargs)
        paths, values, spec, static = self._flatten_output(out)
        return Returned(
            values=values, paths=paths, spec=spec, static=static, module_paths=_module_paths(recorder.roots)
        )

    def inputs(self) -> list[Any]:
        values = []
        for slot in self.slots:
            value = slot.value
            if self.abstract and not isinstance(value, (float, complex)):
                value = jax.ShapeDtypeStruct(np.shape(value), jax.numpy.result_type(value))
            values.append(value)
        return values

    def _rebuild_arguments(self, flat: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[Any, Any]]:
        traced = iter(flat)
        arguments = {}
        for name, (leaves, treedef) in self.arg_trees.items():
            leaves = [next(traced) if is_traced_leaf(leaf) else leaf for leaf in leaves]
            arguments[name] = jax.tree_util.tree_unflatten(treedef, leaves)
        bound = inspect.BoundArguments(self.bound.signature, arguments)
        return bound.args, bound.kwargs

    def _flatten_output(self, out: Any) -> tuple[list[str], list[Any], Any, dict[int, Any]]:
        """The return value's traced leaves by path, its torch pytree spec and its constant leaves.

        torch's pytree keeps the structure the renderers rebuild (dicts, lists, tuples); a pytree
        it cannot see into or name the leaves of (a class only JAX knows, a flax struct dataclass,
        a type registered with torch without keys such as Hugging Face's `ModelOutput`) is
        returned as the tuple of its leaves, each named by its path through either registry.
        """
        try:
            found, spec = torch_pytree.tree_flatten_with_path(out)
            leaves = [(torch_pytree.keystr(path), leaf) for path, leaf in found]
            plain = not any(_hides_array(leaf) for _, leaf in leaves)
        except (ValueError, TypeError, NotImplementedError):  # a type registered without keys
            plain = False  # (Hugging Face registers its ModelOutput so)
        if not plain:
            leaves = list(_leaves(out, ""))
            spec = torch_pytree.tree_flatten(tuple(leaf for _, leaf in leaves))[1]
        paths, values, static = [], [], {}
        for i, (path, leaf) in enumerate(leaves):
            if isinstance(leaf, (jax.Array, np.ndarray)) or _internals.var_of(leaf) is not None:
                paths.append(path)
                values.append(leaf)
            elif isinstance(leaf, jax.core.Tracer):
                raise OutputError(f"{self.entry.name} returned a {type(leaf).__name__} of another trace")
            else:
                static[i] = leaf
        return paths, values, spec, static


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(path, leaf) through every pytree torch or JAX knows: torch's nodes (dicts, tuples, named
    tuples, types registered with or without keys), then JAX's (flax struct dataclasses, Equinox
    modules); `['logits']`, `[0].cache`."""
    children = _children(value)
    if children is None:
        yield path, value
        return
    for key, child in children:
        yield from _leaves(child, path + key)


def _children(value: Any) -> list[tuple[str, Any]] | None:
    """One level of a pytree node as (key, child), or None for a leaf."""
    if value is None or isinstance(value, (jax.Array, np.ndarray, jax.core.Tracer)):
        return None
    children, spec = torch_pytree.tree_flatten(value, is_leaf=lambda x: x is not value)
    if not spec.is_leaf():
        context = spec.context
        keyed = isinstance(context, (list, tuple)) and len(context) == len(children)
        fields = getattr(context, "_fields", None) if isinstance(context, type) else None
        keys = ([f"[{k!r}]" for k in context] if keyed else [f".{f}" for f in fields] if fields
                else [f"[{i}]" for i in range(len(children))])
        return list(zip(keys, children))
    found = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda x: x is not value)[0]
    if len(found) == 1 and found[0][1] is value:
        return None
    return [(jax.tree_util.keystr(key), child) for key, child in found]


def _hides_array(leaf: Any) -> bool:
    if isinstance(leaf, (jax.Array, np.ndarray)) or leaf is None:
        return False
    return any(isinstance(x, (jax.Array, np.ndarray)) for x in jax.tree_util.tree_leaves(leaf))


def _unjit(fn: Any) -> Any:
    """The Python function under `jax.jit(...)`: traced directly, its body is the program."""
    while hasattr(fn, "lower") and hasattr(fn, "trace") and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _code(fn: Any) -> CodeType | None:
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


def _is_wrapper(fn: Any) -> bool:
    """A transformation's wrapper (`jax.grad(f)`): its own code is library code, `f` is user code."""
    return getattr(fn, "__wrapped__", None) is not None and any(
        (fn.__doc__ or "").startswith(words) for words, _ in _TRANSFORMS
    )


def _entry_name(fn: Any) -> str:
    """`f`, `grad_f` for `jax.grad(f)`, `value_and_grad_loss` ...; `fn` for a lambda."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    if "<lambda>" in name:
        name = name.replace("<lambda>", "fn")
    prefix = ""
    wrapped = fn
    while _is_wrapper(wrapped):
        prefix += next(p for words, p in _TRANSFORMS if wrapped.__doc__.startswith(words)) + "_"
        wrapped = wrapped.__wrapped__
    outer, dot, last = name.rpartition(".")
    return outer + dot + prefix + last


def _module_paths(records: list[CallRecord]) -> dict[int, str]:
    """Paths of the torch modules the JAX code ran (through torchax), from the outermost one called."""
    paths: dict[int, str] = {}

    def visit(record: CallRecord, inside: bool) -> None:
        receiver = record.receiver
        is_module = isinstance(receiver, torch.nn.Module)
        if isinstance(receiver, torch.nn.Module) and not inside and id(receiver) not in paths:
            for path, module in receiver.named_modules(remove_duplicate=False):
                paths.setdefault(id(module), path)
        for child in record.children:
            visit(child, inside or is_module)

    for record in records:
        visit(record, False)
    return paths
