"""Program -> the source of an importable JAX module: docstring, imports, defs and `load_params`."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from jaxside.render import text as user_text
from jaxside.render.gradients import Stops, gradients_paragraph, no_gradient, stop_gradients
from jaxside.render.ir import Program
from jaxside.render.layout import MODULE_WIDTH, double_quotes, format_statement
from jaxside.render.lower.config_fields import accessor
from jaxside.render.lower.paths import Tree
from jaxside.render.names import is_index

IMPORTS = {
    "jax": "import jax",
    "jnp": "import jax.numpy as jnp",
    "lax": "from jax import lax",
    "np": "import numpy as np",
    "dataclasses": "import dataclasses",
    "math": "import math",
}
STANDARD = ("dataclasses", "math")
"""Imports of the standard library: their own block, before jax's (as isort sorts them)."""


def render_program(program: Program, *, source: str, frozen: frozenset[str] = frozenset()) -> str:
    """The module text for a lowered program; `source` says what it was generated from (for the
    docstring), `frozen` the torch parameters with `requires_grad=False` (read, as float buffers
    are, through `lax.stop_gradient`: `render.gradients`)."""
    stops = stop_gradients(program, no_gradient(program, frozen))
    defs: list[ast.stmt] = list(stops.defs)
    constants = [ast.Assign([ast.Name(n, ast.Store())], v, lineno=0) for n, v in program.constants]
    loader = _load_params(program)
    used = {n.id for tree in defs + constants for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if loader:
        used |= {"jnp"}
    if program.config:
        used |= {"dataclasses"}
        constants_text = config_class(program)
        loader = "\n\n\n".join(filter(None, [loader, config_from_text(program)]))
    imports = [line for name, line in IMPORTS.items() if name in used and name not in STANDARD]
    extend = (n for t in defs for n in ast.walk(t) if isinstance(n, ast.Attribute) and n.attr == "extend")
    if any(isinstance(n.value, ast.Name) and n.value.id == "jax" for n in extend):
        imports.append("import jax.extend")  # an exact primitive's home; `import jax` does not load it
    standard = [IMPORTS[name] for name in STANDARD if name in used]
    docstring = user_text.docstring(_docstring(program, source, stops, frozen))
    # Laid out as `ruff format` and isort leave it: one blank line after the docstring and after
    # the imports (two before a def), two around defs.
    top = [docstring] + (["\n".join(standard)] if standard else [])
    top += ["\n".join(sorted(imports, key=import_order))] if imports else []
    if loader and program.state_paths:
        top.append(_state_constant(program))
    if constants:
        top.append("\n".join(line for c in constants for line in format_statement(c, 0, MODULE_WIDTH)))
    if program.config:
        top.append("\n" + constants_text)  # two blank lines before a class
    blocks = ["\n".join(format_statement(d, 0, MODULE_WIDTH)) for d in defs] + ([loader] if loader else [])
    text = double_quotes("\n\n".join(top) + "".join("\n\n\n" + block for block in blocks) + "\n")
    user_text.check_compiles(text, "module")
    return text


# -- the docstring -----------------------------------------------------------------------------------


def _docstring(program: Program, source: str, stops: Stops, frozen: frozenset[str]) -> str:
    trace, entry = program.trace, program.entry
    inputs = (
        ", ".join(f"{i.name}: {i.var.aval.str_short()}" for i in trace.inputs if i.kind == "arg")
        or "no tensor inputs"
    )
    outputs = "outputs, new_state" if program.takes_state or program.written_inputs else "outputs"
    torch = trace.frontend == "torch"
    paragraphs = [
        f"JAX for {user_text.comment(source)}, exported by jaxside from one traced run"
        f"{' (torchax)' if torch else ''}.",
        f"Traced with {inputs}; shapes and non-tensor inputs are baked in as they were then."
        if program.sizes is None
        else f"Traced with {inputs}; non-tensor inputs are baked in as they were then.",
        *sizes_paragraphs(program),
    ]
    call = ["Call it:", ""]
    if program.takes_params and program.takes_state:
        call.append("    params, state = load_params(model)  # the torch module, or its state_dict")
    elif program.takes_params:
        call.append("    params = load_params(model)  # the torch module, or its state_dict")
    call.append(f"    {outputs} = {entry.name}({', '.join(entry.params)})")
    paragraphs.append("\n".join(call))
    if program.config:
        keyword = next(
            (k.name for k in entry.keywords if ast.unparse(k.default or ast.Constant(None)) == "Config()"),
            "config",
        )
        paragraphs.append(
            "Config: the numbers the torch code read from its modules are the fields of `Config`, "
            "the traced model's by default; for another model built the same way, pass "
            f"`{keyword}=config_from(model)` (under `jax.jit`, as a static argument)."
        )
    if program.takes_params:
        paragraphs.append(
            "`params` nests the torch tensors by their dotted names, numbered children as lists: "
            f"`{_example_path(program)}` is `params{_example_subscript(program)}`."
        )
    if program.takes_state:
        patterns = _patterns(program)
        shown = ", ".join(f"`{p}`" for p in patterns[:2]) + (", ..." if len(patterns) > 2 else "")
        paragraphs.append(
            "State: the buffers the torch code writes in place are explicit. `state` holds their "
            f"values ({shown}, listed in `STATE_BUFFERS`); the new values come back as `new_state`, "
            "the same tree. Nothing is mutated."
        )
    if program.written_inputs:
        written = ", ".join(f"`{p}`" for p in program.written_inputs)
        paragraphs.append(
            f"Inputs: the torch code writes {written} in place; their new values come back in "
            "`new_state`, by argument name. Nothing is mutated."
        )
    if torch:
        paragraphs.append(
            f"`{entry.name}` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with respect "
            "to the float leaves of `params`, or pass `allow_int=True`)."
        )
    else:
        paragraphs.append(f"`{entry.name}` works under `jax.jit`, `jax.vmap` and `jax.grad`.")
    paragraphs += filter(None, [gradients_paragraph(stops, frozen)])
    if program.fallbacks:
        names = ", ".join(sorted(program.fallbacks))
        paragraphs.append(f"Written as their exact primitive, for want of an idiomatic rule: {names}.")
    return "\n\n".join(fill(p) for p in paragraphs)


def sizes_paragraphs(program: Program) -> list[str]:
    """What the docstring says about sizes: which input dimensions are generic, which fixed and why."""
    sizes = program.sizes
    if sizes is None:
        return []

    def listed(dims: list[Any]) -> str:
        arguments = [f"`{d}`" for d in dims if not d.state]
        buffers = [d for d in dims if d.state]
        text = " = ".join(arguments) if arguments else f"`{buffers[0]}`"
        count = len(buffers) - (not arguments)
        if count:
            kind = "state buffer" if arguments else "more buffer"
            text += f" (and the same size in {count} {kind}{'s' if count > 1 else ''})"
        return text

    paragraphs = []
    if sizes.generic:
        paragraphs.append(
            "Generic sizes, read from the inputs' shapes (any value the torch code accepts): "
            + "; ".join(listed(dims) for dims in sizes.generic) + "."
        )
    if sizes.bounded:
        bounded = "; ".join(f"{listed(dims)} <= {dims[0].size}: {why}" for dims, why in sizes.bounded)
        paragraphs.append(f"Largest sizes: {bounded}.")
    if sizes.fixed:
        fixed = "; ".join(f"{listed(dims)} = {dims[0].size}: {why}" for dims, why in sizes.fixed)
        paragraphs.append(f"Fixed sizes: {fixed}.")
    return paragraphs


def fill(paragraph: str) -> str:
    if paragraph.startswith("Call it:"):
        return paragraph
    return textwrap.fill(paragraph, MODULE_WIDTH - 3, break_long_words=False, break_on_hyphens=False)


def _example_path(program: Program) -> str:
    return max(program.param_paths, key=lambda p: (p.count("."), len(p)))


def _example_subscript(program: Program) -> str:
    tree = Tree(program.param_paths)  # the same nesting rule the program reads with
    subscript = tree.subscript(ast.Name("", ast.Load()), _example_path(program))
    return ast.unparse(subscript).replace("'", '"')


def _patterns(program: Program) -> list[str]:
    """The mutated buffers, with layer numbers as `*` when that names exactly the same set."""
    stored = [i.name for i in program.trace.inputs if i.kind != "arg"]
    patterns = sorted(
        {".".join("*" if is_index(p) else p for p in path.split(".")) for path in program.state_paths}
    )
    matched = {path for path in stored if any(_matches(p, path) for p in patterns)}
    return patterns if matched == set(program.state_paths) else list(program.state_paths)


def _matches(pattern: str, path: str) -> bool:
    a, b = pattern.split("."), path.split(".")
    return len(a) == len(b) and all(x in ("*", y) for x, y in zip(a, b))


def _state_constant(program: Program) -> str:
    items = "".join(f"\n    {user_text.literal(p)}," for p in _patterns(program))
    return (
        f"STATE_BUFFERS = ({items}\n)\n"
        + '"""Buffers the torch code writes in place: `state` in, new state out."""'
    )


# -- the config --------------------------------------------------------------------------------------


def config_class(program: Program) -> str:
    """`Config`: the torch attributes the defs read, with the traced model's values as defaults."""
    first = program.config[0]
    doc = textwrap.fill(
        "The numbers the torch code read from its modules, as the traced model had them "
        f"(`config.{first.name}` for `self.{first.attribute}`). `config_from(model)` reads them from a "
        f"torch module; `dataclasses.replace(Config(), {first.name}=...)` changes one.",
        MODULE_WIDTH - 3, initial_indent="    ", subsequent_indent="    ", break_long_words=False,
        break_on_hyphens=False,
    )
    lines = ["@dataclasses.dataclass(frozen=True)", "class Config:", f'    """{doc[4:]}"""', ""]
    for f in program.config:
        kind = type(f.value).__name__
        value = user_text.value_expr(f.value)
        assert value is not None  # a field holds a number (tracing.is_number)
        lines.append(f"    {f.name}: {kind} = {user_text.numbers(ast.unparse(value))}")
    return "\n".join(lines)


def config_from_text(program: Program, entry: str | None = None) -> str:
    items = "".join(f"\n        {f.name}={accessor(f)}," for f in program.config)
    return (
        "def config_from(model):\n"
        '    """The `Config` of a torch module built as the traced one, for\n'
        f'    `{entry or program.entry.name}(..., config=config_from(model))`."""\n'
        f"    return Config({items}\n    )"
    )


# -- load_params -------------------------------------------------------------------------------------


def _load_params(program: Program) -> str:
    if not program.takes_params and not program.takes_state:
        return ""
    both = program.takes_state
    returns = "params, state" if both else "params"
    made = "params, state = {}, {}" if both else "params = {}"
    tree = "state if _is_state(path) else params" if both else "params"
    text = f'''def load_params(model):
    """`{returns}` for `{program.entry.name}` from the torch module (or its `state_dict`).

    torch is imported here only. Every tensor becomes a `jnp` array of the dtype JAX
    traced (int64 -> int32 unless x64 is enabled); pass the module to include
    non-persistent buffers.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        tensors = {{**dict(model.named_parameters()), **dict(model.named_buffers())}}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    path = f"{{prefix}}.{{name}}" if prefix else name
                    tensors.setdefault(path, value)
    else:
        tensors = dict(model)
    {made}
    for path, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            value = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
        else:
            value = jnp.asarray(tensor.numpy())
        node = {tree}
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {{}})
        node[leaf] = value
    return {"_lists(params), _lists(state)" if both else "_lists(params)"}


def _lists(node):
    """Dicts keyed 0..n-1 (a ModuleList) as lists, as in `params["layers"][3]`."""
    if not isinstance(node, dict):
        return node
    # Positions are ASCII digits: a child named "²" or "١" is a name, not a list index.
    positions = node and all(k.isascii() and k.isdecimal() for k in node)
    keys = sorted(map(int, node)) if positions else None
    if keys == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {{k: _lists(v) for k, v in node.items()}}
'''
    if both:
        text += """

def _is_state(path):
    parts = path.split(".")
    for pattern in STATE_BUFFERS:
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(
            k in ("*", p) for k, p in zip(keys, parts, strict=True)
        ):
            return True
    return False
"""
    return text.rstrip("\n")


def import_order(line: str) -> tuple[int, str]:
    return (line.startswith("from"), line)
