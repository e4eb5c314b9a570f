"""Names of the values a call of user code hands back, where torch names them elsewhere: a cache entry
the entry returns (`keys`, `values`, as its path says), a cast torch's type promotion made inside an
expression (named for the operand it casts), the items of a tuple the callee returns by name, the
new state of a child call (`new_kv_cache_state`), and which of a callee's parameters its caller
passes values other than numbers (the only names a value hoisted out of its calls may take)."""

from __future__ import annotations

import ast
import functools
import re
from typing import Any

from jaxside.render import names as naming
from jaxside.render import source as torch_source
from jaxside.render.ir import Function, fold_of
from jaxside.render.lower.calltree import Node
from jaxside.render.lower.paths import relative
from jaxside.tracing.trace import Site


def returned_names(function: Function | None, count: int) -> list[str | None]:
    """The names a callee returns a tuple of (`return cos, sin`), one per item, None where an
    item is no plain name; all None for a callee that returns one value."""
    if function is None or count <= 1:
        return [None] * count
    returns = function.returns
    if returns is not None and (function.calling.state_out or function.calling.out_slots):
        returns = returns.elts[0] if isinstance(returns, ast.Tuple) else None  # then its state, extras
    if not isinstance(returns, ast.Tuple) or len(returns.elts) != count:
        return [None] * count
    return [re.sub(r"_\d+$", "", e.id) if isinstance(e, ast.Name) else None for e in returns.elts]


def cast_name(operand: ast.expr | None, site: Site | None) -> str | None:
    """The name of a cast's operand where the operand is a torch sub-expression of its own (a
    promotion inside `site`): the cast is that value at another dtype, not `site`'s result."""
    record = fold_of(operand) if operand is not None else None
    inner = record.site if record is not None else None
    if inner is None or inner == site or not inner.text:
        return None
    return record.name if record is not None and record.name else naming.expression_name(inner.text)


def state_base(child: Node, node: Node) -> str:
    below = relative(child.anchor or "", node.anchor or "") if child.anchor != node.anchor else ""
    last = below.split(".")[-1] if below else ""
    if not last or naming.is_index(last):
        site = child.call.call_site
        callee = naming.expression_name(site.text if site else None)
        last = (callee or "call").split("_")[0] if not last else (callee or last)
        if site and site.text:
            match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", site.text)
            if match:
                last = match.group(1)
    return f"new_{last}_state"


def call_name(site: Site | None, call: Any) -> str | None:
    """The name of a call's value: its torch expression's (`attention` for `self.attention(...)`),
    unless that expression calls an attribute that is not the module called nor a module around it
    (`self.mlpf(...)` for `self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))`, a lambda the trace
    does not follow): then the module's own attribute (`act` of `mlp.act`), what the call is."""
    text = site.text if site is not None else None
    expression = naming.expression_name(text)
    return module_attribute(text, call) or expression


def module_attribute(text: str | None, call: Any) -> str | None:
    """The module's own attribute (`act`) where the torch expression `text` calls another one
    (`self.mlpf(...)`, see `call_name`); None where the expression names the call."""
    path = getattr(call, "module_path", None) or ""
    if not str(getattr(call, "function", "")).endswith(".forward"):
        return None  # a method called by its name (`self.attn.compute(x)`): the expression says it
    attribute = _called_attribute(text) if text else None
    keys = path.split(".") if path else []
    if attribute is None or not keys or attribute in keys or naming.is_index(keys[-1]):
        return None
    return naming.identifier(keys[-1])


@functools.lru_cache(maxsize=1024)
def _called_attribute(text: str) -> str | None:
    """`mlpf` where `text` is a call of an attribute (`self.mlpf(x)`), else None: parsed once per
    text (each layer's call of its sublayers has the same)."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else None


def cache_name(outputs: list[tuple[str, Any]], resolve: Any, v: Any) -> str | None:
    """`keys` for a value the entry returns inside a cache (`['past_key_values']['layers'][0]['keys']`):
    its path's last key, where the path goes through a key naming a cache; else None."""
    for path, out in outputs:
        if resolve(out) is not v and out is not v:
            continue
        keys = re.findall(r"\['([A-Za-z_][A-Za-z0-9_]*)'\]", path)
        if len(keys) > 1 and any("cache" in k or k.startswith("past") for k in keys[:-1]):
            return str(keys[-1])
    return None


def passed_values(node: Node) -> set[str] | None:
    """The callee's parameters its call site passes something other than a Python number (a
    literal, or an expression of the caller's locals bound to numbers: `i` of `self.block(x, i)` in
    `for i in range(3)`); None where the call site is no call this can read. A value hoisted out
    of the calls may be named after one of these (`x_t` for `self.cell(x[:, t], h)`), never after a
    parameter given a number or left at its default."""
    site, caller = node.call.call_site, node.parent
    found = torch_source.expression(site) if site is not None and caller is not None else None
    call = found[0] if found is not None else None
    if not isinstance(call, ast.Call) or caller is None or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if any(k.arg is None for k in call.keywords):  # `**kwargs`: what it passes is not written here
        return None
    seen = caller.call.seen  # a local the caller bound to a number only, never to a tensor
    numbers = {name for name, _, _ in seen.numbers} - {name for name, _, _ in seen.bindings}
    passed: dict[str, ast.expr] = {k.arg: k.value for k in call.keywords if k.arg is not None}
    signature = torch_source.parameters(node.call.file, node.call.line)
    for name, argument in zip(signature, call.args):
        passed.setdefault(name, argument)
    return {name for name, argument in passed.items() if not _is_number(argument, numbers)}


def _is_number(node: ast.expr, numbers: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id in numbers
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand, numbers)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left, numbers) and _is_number(node.right, numbers)
    return False
