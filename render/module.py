"""Program -> the source of an importable JAX module: docstring, imports, defs and `load_params`."""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize

from render import text as user_text
from render.program import Program, lower
from tracing.trace import Trace

WIDTH = 100
"""Lines longer than this are split at call arguments, list items and operators."""

_IMPORTS = {
    "jax": "import jax",
    "jnp": "import jax.numpy as jnp",
    "lax": "from jax import lax",
    "np": "import numpy as np",
}


def export_module(trace: Trace, *, source: str) -> str:
    """The JAX module for `trace`; `source` says what it was generated from (for the docstring)."""
    return render_program(lower(trace), source=source)


def render_program(program: Program, *, source: str) -> str:
    """The module text for a lowered program."""
    defs: list[ast.stmt] = [f.node() for f in program.functions + program.helpers]
    constants = [ast.Assign([ast.Name(n, ast.Store())], v, lineno=0) for n, v in program.constants]
    loader = _load_params(program)
    used = {n.id for tree in defs + constants for n in ast.walk(tree) if isinstance(n, ast.Name)}
    if loader:
        used |= {"jnp"}
    imports = [line for name, line in _IMPORTS.items() if name in used]
    docstring = user_text.docstring(_docstring(program, source))
    chunks = [docstring, "\n".join(sorted(imports, key=_import_order))]
    if loader and program.state_paths:
        chunks.append(_state_constant(program))
    if constants:
        chunks.append("\n".join(line for c in constants for line in format_statement(c, 0)))
    chunks += ["\n".join(format_statement(d, 0)) for d in defs]
    if loader:
        chunks.append(loader)
    text = double_quotes("\n\n\n".join(chunks) + "\n")
    user_text.check_compiles(text, "module")
    return text


# -- the docstring -----------------------------------------------------------------------------------


def _docstring(program: Program, source: str) -> str:
    trace, entry = program.trace, program.entry
    inputs = (
        ", ".join(f"{i.name}: {i.var.aval.str_short()}" for i in trace.inputs if i.kind == "arg")
        or "no tensor inputs"
    )
    outputs = "outputs, new_state" if program.takes_state else "outputs"
    torch = trace.frontend == "torch"
    paragraphs = [
        f"JAX for {user_text.comment(source)}, exported by jaxside from one traced run"
        f"{' (torchax)' if torch else ''}.",
        f"Traced with {inputs}; shapes and non-tensor inputs are baked in as they were then.",
    ]
    call = ["Call it:", ""]
    if program.takes_params and program.takes_state:
        call.append("    params, state = load_params(model)  # the torch module, or its state_dict")
    elif program.takes_params:
        call.append("    params = load_params(model)  # the torch module, or its state_dict")
    call.append(f"    {outputs} = {entry.name}({', '.join(entry.params)})")
    paragraphs.append("\n".join(call))
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
    if torch:
        paragraphs.append(
            f"`{entry.name}` works under `jax.jit`, `jax.vmap` and `jax.grad` (differentiate with respect "
            "to the float leaves of `params`, or pass `allow_int=True`)."
        )
    else:
        paragraphs.append(f"`{entry.name}` works under `jax.jit`, `jax.vmap` and `jax.grad`.")
    if program.fallbacks:
        names = ", ".join(sorted(program.fallbacks))
        paragraphs.append(f"Written as their exact primitive, for want of an idiomatic rule: {names}.")
    return "\n\n".join(_fill(p) for p in paragraphs)


def _fill(paragraph: str) -> str:
    if paragraph.startswith("Call it:"):
        return paragraph
    return textwrap.fill(paragraph, WIDTH - 4, break_long_words=False, break_on_hyphens=False)


def _example_path(program: Program) -> str:
    return max(program.param_paths, key=lambda p: (p.count("."), len(p)))


def _example_subscript(program: Program) -> str:
    from render.program import _Tree  # the same nesting rule the program reads with

    tree = _Tree(program.param_paths)
    subscript = tree.subscript(ast.Name("", ast.Load()), _example_path(program))
    return ast.unparse(subscript).replace("'", '"')


def _patterns(program: Program) -> list[str]:
    """The mutated buffers, with layer numbers as `*` when that names exactly the same set."""
    stored = [i.name for i in program.trace.inputs if i.kind != "arg"]
    patterns = sorted(
        {".".join("*" if p.isdigit() else p for p in path.split(".")) for path in program.state_paths}
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


# -- load_params -------------------------------------------------------------------------------------


def _load_params(program: Program) -> str:
    if not program.takes_params and not program.takes_state:
        return ""
    both = program.takes_state
    returns = "params, state" if both else "params"
    split = "        tree = state if _is_state(path) else params\n" if both else "        tree = params\n"
    text = f'''def load_params(model):
    """`{returns}` for `{program.entry.name}` from the torch module (or its `state_dict`).

    torch is imported here only. Every tensor becomes a `jnp` array of the dtype JAX traced
    (int64 -> int32 unless x64 is enabled); pass the module to include non-persistent buffers.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        tensors = {{**dict(model.named_parameters()), **dict(model.named_buffers())}}
        for prefix, module in model.named_modules():
            for name, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    tensors.setdefault(f"{{prefix}}.{{name}}" if prefix else name, value)
    else:
        tensors = dict(model)
    params, state = {{}}, {{}}
    for path, tensor in tensors.items():
        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            value = jnp.asarray(tensor.float().numpy(), dtype=jnp.bfloat16)
        else:
            value = jnp.asarray(tensor.numpy())
{split}        node = tree
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {{}})
        node[leaf] = value
    return {"_lists(params), _lists(state)" if both else "_lists(params)"}


def _lists(node):
    """Dicts keyed 0..n-1 (a ModuleList) as lists, so `params["layers"][3]` reads naturally."""
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node) and sorted(map(int, node)) == list(range(len(node))):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {{k: _lists(v) for k, v in node.items()}}
'''
    if both:
        text += """

def _is_state(path):
    parts = path.split(".")
    for pattern in STATE_BUFFERS:
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(k in ("*", p) for k, p in zip(keys, parts)):
            return True
    return False
"""
    return text.rstrip("\n")


# -- layout ------------------------------------------------------------------------------------------


def _import_order(line: str) -> tuple[int, str]:
    return (line.startswith("from"), line)


def format_statement(node: ast.stmt, indent: int) -> list[str]:
    """`node` as source lines at `indent`, split at its outermost brackets to fit `WIDTH`."""
    pad = " " * indent
    if isinstance(node, ast.FunctionDef):
        args = ", ".join(a.arg for a in node.args.args)
        lines = [f"{pad}@{ast.unparse(d)}" for d in node.decorator_list]
        head = f"{pad}def {node.name}({args}):"
        if len(head) > WIDTH:
            one_line = f"{pad}    {args},"
            params = [one_line] if len(one_line) <= WIDTH else [f"{pad}    {a.arg}," for a in node.args.args]
            lines += [f"{pad}def {node.name}(", *params, f"{pad}):"]
        else:
            lines.append(head)
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            lines.append(f"{pad}    {user_text.docstring(body[0].value.value, indent + 4)}")
            body = body[1:]
        for statement in body:
            lines += format_statement(statement, indent + 4)
        return lines
    if isinstance(node, ast.For):
        lines = _wrap(node.iter, indent, f"{pad}for {_target(node.target)} in ", ":")
        for statement in node.body:
            lines += format_statement(statement, indent + 4)
        return lines
    if isinstance(node, ast.Assign):
        target = node.targets[0]
        if isinstance(target, ast.Tuple) and len(f"{pad}{_target(target)} = ") > WIDTH // 2:
            # Many names at once (a gradient's forward residuals): one per line.
            elements = [f"{pad}    {ast.unparse(e)}," for e in target.elts]
            return [f"{pad}(", *elements, *_wrap(node.value, indent, f"{pad}) = ")]
        return _wrap(node.value, indent, f"{pad}{_target(target)} = ")
    if isinstance(node, ast.Return) and node.value is not None:
        value = node.value
        if isinstance(value, ast.Tuple) and value.elts:  # `return a, b`, not `return (a, b)`
            text = f"{pad}return {_target(value)}"
            if len(text) <= WIDTH:
                return [text]
        return _wrap(value, indent, f"{pad}return ")
    if isinstance(node, ast.Expr):
        return _wrap(node.value, indent, pad)
    return [pad + line for line in ast.unparse(node).splitlines()]


def _target(node: ast.expr) -> str:
    """`a, (b, c)`: a tuple target without its outer parentheses."""
    if isinstance(node, ast.Tuple) and node.elts:
        return ", ".join(ast.unparse(e) for e in node.elts)
    return ast.unparse(node)


def _fits(lines: list[str]) -> bool:
    return all(len(line) <= WIDTH for line in lines)


def _wrap(node: ast.expr, indent: int, prefix: str, suffix: str = "") -> list[str]:
    """`prefix + node + suffix`, split over lines at the outermost brackets when too long."""
    text = prefix + ast.unparse(node) + suffix
    if len(text) <= WIDTH:
        return [text]
    inner = indent + 4
    pad, inner_pad = " " * indent, " " * (indent + 4)
    if isinstance(node, ast.Call):
        items = [ast.unparse(a) for a in node.args] + [
            (f"{k.arg}=" if k.arg else "**") + ast.unparse(k.value) for k in node.keywords
        ]
        head = prefix + ast.unparse(node.func) + "("
        one_line = inner_pad + ", ".join(items)
        if len(head) <= WIDTH and len(one_line) <= WIDTH:
            return [head, one_line, pad + ")" + suffix]
        lines = [head]
        if len(head) > WIDTH and isinstance(node.func, ast.Call):  # `jax.shard_map(f, ...)(x)`
            lines = _wrap(node.func, indent, prefix, "(")
            if len(lines[-1]) + len(", ".join(items)) + len(suffix) + 1 <= WIDTH:
                return lines[:-1] + [lines[-1] + ", ".join(items) + ")" + suffix]
        for arg in node.args:
            lines += _wrap(arg, inner, inner_pad, ",")
        for keyword in node.keywords:
            lines += _wrap(
                keyword.value, inner, inner_pad + (f"{keyword.arg}=" if keyword.arg else "**"), ","
            )
        return lines + [pad + ")" + suffix]
    brackets = {ast.List: "[]", ast.Tuple: "()", ast.Set: "{}"}
    if type(node) in brackets:
        opening, closing = brackets[type(node)]
        lines = [prefix + opening]
        for element in node.elts:  # type: ignore[attr-defined]
            lines += _wrap(element, inner, inner_pad, ",")
        return lines + [pad + closing + suffix]
    if isinstance(node, ast.Dict):
        lines = [prefix + "{"]
        for key, value in zip(node.keys, node.values):
            head = inner_pad + (f"{ast.unparse(key)}: " if key is not None else "**")
            lines += _wrap(value, inner, head, ",")
        return lines + [pad + "}" + suffix]
    if isinstance(node, ast.ListComp):
        lines = [prefix + "["]
        lines += _wrap(node.elt, inner, inner_pad)
        for generator in node.generators:
            lines.append(inner_pad + f"for {_target(generator.target)} in {ast.unparse(generator.iter)}")
        return lines + [pad + "]" + suffix]
    if isinstance(node, ast.Subscript) and _plain(node.value, node):
        index = ast.unparse(node)[len(ast.unparse(node.value)) :]
        return _wrap(node.value, indent, prefix, index + suffix)
    if isinstance(node, ast.Attribute) and _plain(node.value, node):
        return _wrap(node.value, indent, prefix, "." + node.attr + suffix)
    if isinstance(node, ast.BinOp):
        left, operator, right = _split_binop(node)
        if len(left) <= 30 and right == ast.unparse(node.right):
            lines = _wrap(node.right, indent, f"{prefix}{left} {operator} ", suffix)
            if _fits(lines):
                return lines
        if len(right) <= 30 and left == ast.unparse(node.left):
            lines = _wrap(node.left, indent, prefix, f" {operator} {right}{suffix}")
            if _fits(lines):
                return lines
        return [prefix + "(", *_chain(node, inner, ""), pad + ")" + suffix]
    return [text]


def _chain(node: ast.expr, indent: int, head: str) -> list[str]:
    """`a * b - c` as one operand per line (`a`, `* b`, `- c`): the same tokens, in brackets."""
    if not isinstance(node, ast.BinOp) or len(" " * indent + head + ast.unparse(node)) <= WIDTH:
        return _wrap(node, indent, " " * indent + head)
    left, operator, right = _split_binop(node)
    lines = (
        _chain(node.left, indent, head)
        if left == ast.unparse(node.left)
        else _wrap_text(left, node.left, indent, head)
    )
    return lines + _wrap_text(right, node.right, indent, operator + " ")


def _plain(inner: ast.expr, outer: ast.expr) -> bool:
    """`inner` appears unparenthesized in `outer`'s source."""
    return ast.unparse(outer).startswith(ast.unparse(inner))


def _split_binop(node: ast.BinOp) -> tuple[str, str, str]:
    """The source of a binary operation's two sides, parenthesized as `ast.unparse` would."""
    marker = "__JAXSIDE__"
    with_left = ast.unparse(ast.BinOp(node.left, node.op, ast.Name(marker, ast.Load())))
    with_right = ast.unparse(ast.BinOp(ast.Name(marker, ast.Load()), node.op, node.right))
    left, operator = with_left[: with_left.rindex(marker)].rstrip().rsplit(" ", 1)
    right = with_right[with_right.index(marker) + len(marker) :].strip().split(" ", 1)[1]
    return left, operator, right


def _wrap_text(text: str, node: ast.expr, indent: int, head: str) -> list[str]:
    if text == ast.unparse(node):
        return _wrap(node, indent, " " * indent + head)
    if text == f"({ast.unparse(node)})":
        return _wrap(node, indent, " " * indent + head + "(", ")")
    return [" " * indent + head + text]


def double_quotes(text: str) -> str:
    """`params["wqkv"]` rather than `params['wqkv']`: plain single-quoted strings get double quotes."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = text.splitlines(keepends=True)
    edits = []
    for token in tokens:
        if (
            token.type == tokenize.STRING
            and token.string.startswith("'")
            and not token.string.startswith("'''")
        ):
            body = token.string[1:-1]
            if '"' not in body and "\\" not in body and token.start[0] == token.end[0]:
                edits.append((token.start, token.end, f'"{body}"'))
    for (row, col), (_, end), replacement in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + replacement + line[end:]
    return "".join(lines)
