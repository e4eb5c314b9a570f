"""Both sides of a review, traced: the torch entry with its weights and inputs as JAX arrays, and
the port (a function over weight pytrees, or a Flax / Equinox module) with the torch weights mapped
onto it. The command line finds the entries in files (`review.command`); the Python API is given them."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxside.annotate.errors import Failure
from jaxside.annotate.options import ReviewOptions
from jaxside.annotate.review.mapping import read_params_map

__all__ = ["function_side", "in_out_weights", "input_pairs", "is_factory", "load_weights", "port_side",
           "torch_side"]


def torch_side(options: ReviewOptions, entry: Any) -> tuple[Any, list[Any], dict[str, Any], tuple]:
    """The torch trace of `entry` (an `annotate.loading.Entry`), its input values, its state_dict as
    JAX arrays and its data inputs."""
    import jax.numpy as jnp
    import torch
    from torch.utils._pytree import tree_leaves

    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.tracing import Capture, CaptureError, tensor_attributes

    file = str(Path(options.source.file).resolve())
    try:
        trace = Capture(watch=[file])(entry.fn, *entry.args, **entry.kwargs)
    except CaptureError:
        raise
    except Exception as error:
        raise UserCodeRaised("tracing the torch entry", error) from error
    state: dict[str, Any] = {}
    if isinstance(entry.fn, torch.nn.Module):
        tensors = {**dict(entry.fn.named_parameters()), **dict(entry.fn.named_buffers()),
                   **entry.fn.state_dict()}
        for path, tensor in tensor_attributes(entry.fn):  # gpt-fast's `self.freqs_cis = ...`
            tensors.setdefault(path, tensor)
        state = {name: jnp.asarray(t.detach().cpu().numpy()) for name, t in tensors.items()}
    data = tuple(jnp.asarray(t.detach().cpu().numpy()) for t in tree_leaves((entry.args, entry.kwargs))
                 if isinstance(t, torch.Tensor))
    leaves = iter(data)
    values = []
    for item in trace.inputs:
        if item.kind == "arg":
            values.append(next(leaves))
        elif item.name in state:
            values.append(state[item.name])
        else:
            raise Failure(f"the torch input {item.name} is not in the module's state_dict",
                          "register it as a parameter or buffer", file=options.source.file)
    return trace, values, state, data


def port_side(options: ReviewOptions, module: Any, entry: Any, name: str, state: dict[str, Any],
              data: tuple, inout: frozenset[str] = frozenset()) -> tuple[Any, list, Any]:
    """The port's trace, its input values, and how its weights were mapped: `entry` (named `name`)
    is a function, a Flax or Equinox module, or a factory of one, defined in `module`; `inout` are
    the torch weights stored (in, out) (`in_out_weights`)."""
    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.review.frameworks import module_port

    built = entry
    try:
        port = module_port(entry, data)
        if port is None and is_factory(entry):
            built = entry()
            port = module_port(built, data)
            if port is None:
                raise Failure(f"{name}() returned {type(built).__name__}, not a Flax NNX, Flax Linen or "
                              "Equinox module", "return the model (a Linen one with its variables)",
                              file=options.port)
    except Failure:
        raise
    except Exception as error:
        raise UserCodeRaised(f"building the port from {name}", error) from error
    if port is None and inspect.isclass(entry):
        raise Failure(f"{name} is a class that needs arguments", f"name a function that returns a {name}",
                      file=options.port)
    from jaxside.annotate.review.files import port_files

    files = port_files(module, built)
    made = None
    if options.port_weights:
        port, made = load_weights(options, module, port, built, state, data, files)
    if port is not None:
        from jaxside.annotate.review.modules import trace_module

        return trace_module(options, port, state, data, files, made, inout)
    return function_side(options, entry, name, state, data, files)


def load_weights(options: ReviewOptions, module: Any, port: Any, built: Any, state: dict[str, Any],
                  data: tuple, files: list[str]) -> tuple[Any, Any]:
    """The port as its own loader fills it (`--port-weights`), and where the loader made each array."""
    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.review.frameworks import module_port
    from jaxside.annotate.review.loader import run_loader

    name = options.port_weights
    loader = getattr(module, name, None)
    if not callable(loader):
        raise Failure(f"defines no function {name}", "name the port's loader, called as "
                      f"{name}(port_model, torch_state_dict), with --port-weights", file=options.port)
    if port is None:
        raise Failure("--port-weights needs a Flax NNX, Flax Linen or Equinox module port",
                      "a plain function port takes its weights as arguments", file=options.port)
    try:
        loaded, made, alive = run_loader(loader, built, state, data, files, list(port.own.values()))
        ported = module_port(loaded, data)
    except Exception as error:
        raise UserCodeRaised(f"loading the torch weights with {name}", error) from error
    if ported is None:
        raise Failure(f"{name} returned {type(loaded).__name__}, not the port model",
                      "return the loaded model, or None after filling it in place", file=options.port)
    built_shapes = {leaf.path: leaf.shape for leaf in port.leaves}
    for leaf in ported.leaves:
        shape = built_shapes.get(leaf.path)
        if shape is not None and shape != leaf.shape:
            where = made.get(id(ported.own[leaf.path]))
            raise Failure(f"{name} gave {leaf.path} the shape {list(leaf.shape)}, where the port was built "
                          f"with {list(shape)}", "fix the loader (a kernel is (in, out): torch's weight.T)",
                          file=where[0] if where else options.port, line=where[1] if where else None)
    # The dtypes the port declares are its own, before the loader: a loader that casts is named.
    return ported, (made, alive, {leaf.path: leaf.dtype for leaf in port.leaves},
                    {id(value) for value in port.own.values()})


def in_out_weights(model: Any) -> frozenset[str]:
    """The weights of a torch module stored (in, out) where `nn.Linear` stores (out, in): those of
    transformers' `Conv1D` (GPT-2, OpenAI GPT), by their state_dict names."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return frozenset()
    return frozenset(f"{path}.weight" if path else "weight" for path, module in model.named_modules()
                     if type(module).__name__ == "Conv1D" and getattr(module, "nf", None) is not None
                     and tuple(getattr(module, "weight", torch.empty(0)).shape) == (module.nx, module.nf))


def is_factory(entry: Any) -> bool:
    """A function or class that builds the port from nothing: every parameter has a default."""
    try:
        parameters = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in parameters)


def function_side(options: ReviewOptions, fn: Any, name: str, state: dict[str, Any],
                   data: tuple, files: list[str]) -> tuple[Any, list, Any]:
    """A port written as a function over dicts and lists of arrays: its weights found by probing."""
    import jax

    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.review.mapping import assign
    from jaxside.annotate.review.probing import discover
    from jaxside.tracing import Capture

    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p.name for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty and p.kind in positional]
    weight_args = required[: max(len(required) - len(data), 0)]
    names = list(state)
    try:
        probes, mapping = discover(fn, names, state, weight_args, data)
    except LookupError as error:
        raise Failure(f"the port reads {error.args[0]}, which no torch weight resembles",
                      "map it in a --params-map file", file=options.port) from None
    except Exception as error:
        raise UserCodeRaised(f"running {name} to find its weights", error) from error
    overrides = params_map(options.params_map, state) if options.params_map else {}
    if overrides:
        leaves = [path for probe in probes for path in probe.leaves()]
        mapping = assign([p for p in leaves if p not in overrides], {k: v for k, v in state.items()
                                                                     if k not in overrides.values()})
        mapping.pairs.update(overrides)
        mapping.unused_torch = [n for n in state if n not in mapping.pairs.values()]
    if mapping.unmapped_port:
        raise Failure(f"no torch weight could be mapped to {', '.join(mapping.unmapped_port)}",
                      "map it in a --params-map file", file=options.port)
    args = [probe.build(lambda path: state[mapping.pairs[path]]) for probe in probes] + list(data)
    try:
        trace = Capture(watch=files)(fn, *args)
    except Exception as error:
        raise UserCodeRaised(f"tracing {name}", error) from error
    values = jax.tree_util.tree_leaves(args)
    if len(values) != len(trace.inputs):
        raise Failure(f"{name} took {len(trace.inputs)} arrays, review built {len(values)}",
                      "give the port's weights as dicts and lists of arrays", file=options.port)
    mapping.inputs = dict(mapping.pairs)
    return trace, values, mapping


def params_map(path: str | Mapping[str, str], state: dict[str, Any]) -> dict[str, str]:
    given = read_params_map(path)
    file = path if isinstance(path, str) else None  # a dict from Python has no file
    for port, name in given.items():
        if name not in state:
            raise Failure(f"PARAMS_MAP maps {port} to {name!r}, which is not in the torch state_dict",
                          f"use one of {', '.join(list(state)[:4])}, ...", file=file)
    return given


def input_pairs(torch_trace: Any, port_trace: Any, pairs: dict[str, str],
                aliases: Mapping[str, list[str]] | None = None) -> dict[Any, Any]:
    """Torch input var -> port input var: mapped weights by name (`pairs`: port input name -> torch
    name; a tied tensor's input meets a port input mapped to any of its `aliases`), data inputs in order."""
    port_by_name = {item.name: item.var for item in port_trace.inputs}
    mapped = {alias: port for port, name in pairs.items() for alias in (aliases or {}).get(name, [name])}
    result = {}
    torch_data = [i.var for i in torch_trace.inputs if i.kind == "arg"]
    port_data = [i.var for i in port_trace.inputs if i.name not in pairs]
    result.update(zip(torch_data, port_data))
    for item in torch_trace.inputs:
        if item.kind != "arg" and item.name in mapped and mapped[item.name] in port_by_name:
            result[item.var] = port_by_name[mapped[item.name]]
    return result
