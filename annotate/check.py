"""`--check`: run the exported module under `jax.jit` beside torch eager and compare them leaf by leaf.

`check_export` is the whole of ``--check`` (example inputs, then other shapes where the export is
generic) as a `CheckReport`: the comparisons as data and the table the command prints. The
pieces (`load_module`, `entry_inputs`, `check`, `compare_gradients`) serve the tests and the API.
"""

from __future__ import annotations

import copy
import html
import inspect
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import torch
import torch.utils._pytree as torch_pytree

from jaxside.annotate.compare import Comparison, compare, lines
from jaxside.annotate.errors import EXIT_MISMATCH, EXIT_OK, UserCodeRaised
from jaxside.annotate.sizes import other_shape
from jaxside.render.ir import Program
from jaxside.tracing import example_key, is_key, plain_output, random_outputs
from jaxside.tracing.trace import Trace

Runner = Callable[[types.ModuleType, Program, Any, tuple, dict], tuple[Any, Any]]
"""How a module export is run for ``--check``: (module, program, torch entry, args, kwargs) ->
(outputs, new state as a tree of dicts and lists by buffer path, or None)."""


@dataclass
class CheckReport:
    """What ``--check`` found: every leaf compared (`comparisons`, data) and the table it prints (`lines`)."""

    comparisons: list[Comparison] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every leaf matched (random ones by shape and dtype)."""
        return all(c.ok for c in self.comparisons)

    @property
    def mismatches(self) -> list[Comparison]:
        return [c for c in self.comparisons if not c.ok]

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_MISMATCH

    def table(self) -> str:
        """The lines ``--check`` prints on stderr."""
        return "\n".join(self.lines) + "\n"

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        bad = len(self.mismatches)
        verdict = "all match" if not bad else f"{bad} differ"
        return f"<CheckReport: {len(self.comparisons)} leaves compared, {verdict}>"

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.table())}</pre>"


def check_export(
    module: types.ModuleType,
    program: Program,
    entry: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    note: str = "",
    given: tuple[tuple, dict] | None = None,
    show: Callable[[str], None] | None = None,
    run: Runner | None = None,
) -> CheckReport:
    """Compare the export (`module`, from `program`) with torch eager, leaf by leaf: on the example
    inputs of `entry` and, where the export is generic, at a smaller and a larger shape; or on the
    `given` (args, kwargs) alone. Each line of the table goes to `show` as it is made."""
    report = CheckReport()

    def say(line: str) -> None:
        report.lines.append(line)
        if show is not None:
            show(line)

    args, kwargs = given if given is not None else (entry.args, entry.kwargs)
    inputs = "the example inputs" if given is None else "the inputs given"
    report.comparisons = check(module, program, entry.fn, args, kwargs, rtol=rtol, atol=atol, run=run)
    say(f"annotate: --check: the export against torch eager on {inputs} "
        f"({'model weights' if program.takes_params else 'no weights'}{note}):")
    for line in lines(report.comparisons):
        say(line)
    for larger in (False, True) if given is None else ():  # a generic export: at other shapes too
        again = other_shape(program, entry.fn, args, kwargs, larger=larger)
        if again is None:
            continue
        resized, resized_kwargs, where = again
        which = "a larger" if larger else "a smaller"
        refused = None if program.takes_state else torch_refusal(entry.fn, resized, resized_kwargs)
        if refused is not None:  # sizes the torch code refuses are no sizes the export must take
            say(f"annotate: --check: not at {which} shape ({where}): torch eager raised {refused}")
            continue
        more = check(module, program, entry.fn, resized, resized_kwargs, rtol=rtol, atol=atol, run=run)
        say(f"annotate: --check: and at {which} shape ({where}):")
        for line in lines(more):
            say(line)
        report.comparisons += more
    bad = report.mismatches
    random = [c for c in report.comparisons if c.random]
    if random:
        say(f"annotate: --check: {len(random)} random (drawn from the export's `key` argument, torch's "
            "from its own generator): compared by shape and dtype only")
    if bad:
        tolerance = next((c for c in bad if not c.problem), None)
        hint = f" (rtol {tolerance.rtol:g}, atol {tolerance.atol:g}; set --rtol/--atol)" if tolerance else ""
        say(f"annotate: --check: {len(bad)} of {len(report.comparisons)} differ{hint}")
    return report


def torch_refusal(fn: Any, args: tuple, kwargs: dict) -> str | None:
    """The first line of what torch eager raises on these inputs (a model without state: running
    it changes nothing; the inputs copied, as a cache passed in is updated in place), or None
    when it runs."""
    try:
        args, kwargs = copy.deepcopy((args, kwargs))
        with torch.no_grad():
            fn(*args, **kwargs)
    except Exception as error:
        return f"{type(error).__name__}: " + (str(error).strip().splitlines() or [""])[0][:100]
    return None


def load_module(text: str, name: str = "jaxside_export") -> types.ModuleType:
    """Import exported source as a module, registered in `sys.modules` only while its body runs:
    a dataclass (an Equinox module) reads its module there to resolve a quoted annotation."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    before = sys.modules.get(name)
    sys.modules[name] = module
    try:
        # dont_inherit: not this file's `from __future__ import annotations` (`Config` needs real types)
        exec(compile(text, module.__file__, "exec", dont_inherit=True), module.__dict__)
    finally:
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before
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


def entry_inputs(module: types.ModuleType, program: Program, fn: Any, args: tuple, kwargs: dict, *,
                 weights: bool = True) -> list[Any]:
    """The exported entry's arguments: params and state from the model (unless not `weights`: a
    module export holds them), then the traced tensors, then `example_key()` when the export draws
    random numbers."""
    values: list[Any] = []
    if weights and (program.takes_params or program.takes_state):
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
    keys = {item.name for item in program.trace.inputs if is_key(item.var.aval)} - set(arguments)
    for name in _argument_roots(program.trace):
        values.append(example_key() if name in keys else to_jax(plain_output(arguments[name])))
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
    run: Runner | None = None,
) -> list[Comparison]:
    """Run the export under `jax.jit` and torch eager on the same inputs; compare every leaf of the
    result (outputs drawn from the export's `key` by shape and dtype only) and every new state buffer.
    `run` runs a module export instead (`annotate.check_modules`): (outputs, new state tree)."""
    if run is not None:  # a module export: built with its from_torch, before torch runs
        outputs, new_state = run(module, program, fn, args, kwargs)
    else:
        inputs = entry_inputs(module, program, fn, args, kwargs)  # before torch runs: it may write buffers
        result = run_jitted(getattr(module, program.entry.name), inputs)
        outputs, new_state = result if program.takes_state or program.written_inputs else (result, None)
    written = _written_arguments(fn, args, kwargs, program.written_inputs)
    try:
        with torch.no_grad():
            expected = fn(*args, **kwargs)  # writes `written` in place, as it did when traced
    except Exception as error:
        raise UserCodeRaised("running it in torch eager for --check", error) from error
    random = random_outputs(program.trace)
    comparisons = compare(outputs, expected, rtol=rtol, atol=atol, random=random)
    if new_state is not None:
        buffers = {**_torch_tensors(fn), **written}
        for path in [*program.state_paths, *(p for p in written if p not in program.state_paths)]:
            got = _at_dotted(new_state, path)
            comparisons += compare(
                got, buffers[path], rtol=rtol, atol=atol, prefix=f"state {path}",
                random=frozenset({f"state {path}"}) if f"state {path}" in random else frozenset(),
            )
    return comparisons


def _written_arguments(fn: Any, args: tuple, kwargs: dict, names: list[str]) -> dict[str, Any]:
    """The torch arguments named `names` (the same objects torch eager then writes in place)."""
    if not names:
        return {}
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    arguments = inspect.signature(target).bind(*args, **kwargs).arguments
    return {name: arguments[name] for name in names if name in arguments}


def run_jitted(exported: Callable[..., Any], inputs: list[Any]) -> Any:
    """`exported(*inputs)` under `jax.jit`, its constant leaves (a string, a float) returned as they are."""
    constants: dict[int, Any] = {}
    tree: list[Any] = []

    def arrays(*inputs: Any) -> list[Any]:
        leaves, treedef = jax.tree_util.tree_flatten(exported(*inputs))
        tree.append(treedef)
        constants.update({i: leaf for i, leaf in enumerate(leaves) if not isinstance(leaf, jax.Array)})
        return [leaf for i, leaf in enumerate(leaves) if i not in constants]

    computed = iter(jax.jit(arrays)(*inputs))
    leaves = [constants[i] if i in constants else next(computed) for i in range(tree[-1].num_leaves)]
    return jax.tree_util.tree_unflatten(tree[-1], leaves)


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
    """`jax.grad` of the export w.r.t. params against torch autograd, for `sum` of every float output:
    torch's gradient for each parameter it differentiates, and zeros (`grad NAME (torch: none)`) for
    every other float leaf of `params` (the buffers it only reads, frozen or unused parameters)."""
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
    trained = set()
    for name, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        trained.add(name)
        got = _at_dotted(grads, name)
        comparisons += compare(got, parameter.grad, rtol=rtol, atol=atol, prefix=f"grad {name}")
    for name, tensor in _torch_tensors(model).items():
        if name in trained or not tensor.is_floating_point() or name in program.state_paths:
            continue
        comparisons += compare(_at_dotted(grads, name), torch.zeros_like(tensor), rtol=rtol, atol=atol,
                               prefix=f"grad {name} (torch: none)")
    model.zero_grad(set_to_none=True)
    return comparisons


# -- reading results ------------------------------------------------------------------------------


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
