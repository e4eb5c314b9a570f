"""``annotate review TORCH_FILE PORT_FILE``: check a hand-written JAX port against its torch original."""

from __future__ import annotations

import argparse
import contextlib
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from jaxside.annotate.command import add_common, run_command
from jaxside.annotate.errors import EXIT_MISMATCH, EXIT_OK, Failure
from jaxside.annotate.output import check_target, stdout_to_stderr, to_stdout, write
from jaxside.annotate.review.mapping import read_params_map
from jaxside.annotate.status import Status

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise Failure(message, "see annotate review --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="annotate review", description="Run a torch model and its hand-written JAX "
                     "port on the same inputs and weights and find the first line where they differ.",
                     epilog="Exit codes: 0 outputs match, 1 they diverge, 2 bad usage or input, 3 your "
                     "code raised. See docs/review.md.")
    add = parser.add_argument
    add("file", metavar="TORCH_FILE", help="the torch original")
    add("port", metavar="PORT_FILE", help="the JAX port")
    add("--entry", metavar="EXPR", help="torch side, as for annotate (default: TORCH_FILE's example())")
    add("--inputs", metavar="EXPR", help="torch inputs, a tuple expression; the port gets them too")
    add("--kwargs", metavar="EXPR", help="torch keyword inputs, a dict expression")
    add("--setup", metavar="STMTS", help="statements run before tracing, with `model` bound")
    add("--port-entry", metavar="NAME", help="the port's function, module or factory (default: forward, "
        "else build): a function's leading arguments are weight pytrees, its last ones take the torch "
        "inputs; a Flax NNX, Flax Linen or Equinox module (or a function returning one) is called on them")
    add("--params-map", metavar="FILE", help="a Python file defining PARAMS_MAP = {port leaf path: "
        "state_dict name}, e.g. {\"params['embed']\": 'tok_embeddings.weight'} or, for a module port, "
        "{'layers.0.attn.q.kernel': 'layers.0.attention.wqkv.weight[0:64]'}; overrides the guess")
    add("--port-weights", metavar="NAME", help="the port's own weight loader, NAME(port_model, "
        "torch_state_dict) in PORT_FILE, returning the loaded port (or filling it in place): the port "
        "runs on its weights, and each leaf is checked against review's own mapping")
    add("--rtol", type=float, default=1e-5, metavar="X", help="relative tolerance (default 1e-5)")
    add("--atol", type=float, default=1e-6, metavar="X", help="absolute tolerance (default 1e-6)")
    add("--html", metavar="PATH", help="also write a two-column HTML view of both files to PATH")
    add("--force", action="store_true", help="let --html replace a file that annotate did not write")
    add_common(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv, _parsed, _check, lambda options, context: _run(options))


def _parsed(options: argparse.Namespace) -> argparse.Namespace:
    return options


def _check(options: argparse.Namespace) -> None:
    from jaxside.annotate.loading import check_source

    for path in (options.file, options.port, options.params_map):
        if path is not None:
            check_source(path)
    for name, value in (("rtol", options.rtol), ("atol", options.atol)):
        if not value >= 0:
            raise Failure(f"--{name} must be a number >= 0", f"e.g. --{name} 1e-5")
    if options.html and options.html != "-":
        check_target(options.html, options, "--html")


def _run(options: argparse.Namespace) -> int:
    status = Status(verbosity=options.verbosity)
    try:
        # Whatever else goes to stderr meanwhile (warnings, the user's prints) clears the live line first.
        with contextlib.redirect_stderr(status.writer()):
            return _review(options, status)
    finally:
        status.close()


def _review(options: argparse.Namespace, status: Status) -> int:
    status.phase("loading torch and jax")
    from jaxside.annotate.review.align import align, side

    with stdout_to_stderr():
        status.phase(f"tracing {Path(options.file).name}")
        torch_trace, torch_args, state, data = _torch_side(options)
        status.phase(f"tracing the port {Path(options.port).name}")
        port_trace, port_args, mapping = _port_side(options, state, data)
        status.phase("running both sides")
        torch = side(torch_trace, torch_args)
        port = side(port_trace, port_args)
    status.phase("comparing values")
    inputs = _input_pairs(torch_trace, port_trace, mapping.inputs)
    from jaxside.annotate.review.outputs import compare_outputs, match_outputs, matched, unreturned

    matches = match_outputs(torch, port, mapping.module_port)
    alignment = align(torch, port, inputs, options.rtol, options.atol, unreturned(matches))
    leaves = compare_outputs(torch, port, alignment, options.rtol, options.atol, matches)
    outputs_close = matched(leaves)
    from jaxside.annotate.review.page import html_page
    from jaxside.annotate.review.report import text

    status.close()  # the report follows on stdout, the live line cleared first
    to_stdout(text(options, torch, port, alignment, mapping, leaves))
    if options.html:
        write(html_page(options, torch, port, alignment), options.html, options, "--html", status.say,
              form="html")
    return EXIT_OK if outputs_close else EXIT_MISMATCH


def _torch_side(options: argparse.Namespace) -> tuple[Any, list[Any], dict[str, Any], tuple]:
    """The torch trace, its input values, its state_dict as JAX arrays and its data inputs."""
    import jax.numpy as jnp
    import torch
    from torch.utils._pytree import tree_leaves

    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.loading import find_entry, load_file
    from jaxside.tracing import Capture, CaptureError

    file = str(Path(options.file).resolve())
    module = load_file(options.file)
    entry = find_entry(module, options)
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
                          "register it as a parameter or buffer", file=options.file)
    return trace, values, state, data


def _port_side(options: argparse.Namespace, state: dict[str, Any], data: tuple) -> tuple[Any, list, Any]:
    """The port's trace, its input values, and how its weights were mapped."""
    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.review.frameworks import module_port

    module = _load_port(options.port)
    name = options.port_entry or ("forward" if hasattr(module, "forward") else "build")
    entry = getattr(module, name, None)
    if entry is None or not callable(entry) and not isinstance(entry, tuple):
        what = f"no {name}" if options.port_entry else "no forward (a function) or build (returning a module)"
        raise Failure(f"defines {what}", "name the port's function, module or factory with --port-entry",
                      file=options.port)
    built = entry
    try:
        port = module_port(entry, data)
        if port is None and _is_factory(entry):
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
        port, made = _load_weights(options, module, port, built, state, data, files)
    if port is not None:
        from jaxside.annotate.review.modules import trace_module

        return trace_module(options, port, state, data, files, made)
    return _function_side(options, entry, name, state, data, files)


def _load_weights(options: argparse.Namespace, module: Any, port: Any, built: Any, state: dict[str, Any],
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


def _load_port(path: str) -> Any:
    """Import the port; a framework it needs that is missing is bad input, said in one line."""
    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.installed import pip_install
    from jaxside.annotate.loading import load_file
    from jaxside.annotate.review.frameworks import FRAMEWORKS

    try:
        return load_file(path)
    except UserCodeRaised as raised:
        error = raised.error
        root = (getattr(error, "name", None) or "").split(".")[0]
        if not isinstance(error, ModuleNotFoundError) or root not in FRAMEWORKS:
            raise
        file = str(Path(path).resolve())
        frames = [f for f in _frames(error.__traceback__) if str(Path(f.tb_frame.f_code.co_filename)) == file]
        raise Failure(f"needs {root}, which is not installed", f"{pip_install('review')} (or {root})",
                      file=path, line=frames[-1].tb_lineno if frames else None) from None


def _frames(tb: Any) -> list[Any]:
    found = []
    while tb is not None:
        found.append(tb)
        tb = tb.tb_next
    return found


def _is_factory(entry: Any) -> bool:
    """A function or class that builds the port from nothing: every parameter has a default."""
    try:
        parameters = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in parameters)


def _function_side(options: argparse.Namespace, fn: Any, name: str, state: dict[str, Any],
                   data: tuple, files: list[str]) -> tuple[Any, list, Any]:
    """A port written as a function over dicts and lists of arrays: its weights found by probing."""
    import jax

    from jaxside.annotate.errors import UserCodeRaised
    from jaxside.annotate.review.mapping import assign, discover
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
    overrides = _params_map(options.params_map, state) if options.params_map else {}
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


def _params_map(path: str, state: dict[str, Any]) -> dict[str, str]:
    given = read_params_map(path)
    for port, name in given.items():
        if name not in state:
            raise Failure(f"PARAMS_MAP maps {port} to {name!r}, which is not in the torch state_dict",
                          f"use one of {', '.join(list(state)[:4])}, ...", file=path)
    return given


def _input_pairs(torch_trace: Any, port_trace: Any, pairs: dict[str, str]) -> dict[Any, Any]:
    """Torch input var -> port input var: mapped weights by name (`pairs`: port input name -> torch
    name), data inputs in order."""
    port_by_name = {item.name: item.var for item in port_trace.inputs}
    mapped = {name: port for port, name in pairs.items()}
    result = {}
    torch_data = [i.var for i in torch_trace.inputs if i.kind == "arg"]
    port_data = [i.var for i in port_trace.inputs if i.name not in pairs]
    result.update(zip(torch_data, port_data))
    for item in torch_trace.inputs:
        if item.kind != "arg" and item.name in mapped and mapped[item.name] in port_by_name:
            result[item.var] = port_by_name[mapped[item.name]]
    return result
