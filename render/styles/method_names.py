"""The names of a class's methods: `__call__` for torch's `forward`, the torch method's own name
otherwise, and, where one torch method was lowered to several defs (instances that took other
branches), the torch name plus what sets each def apart: the branch its calls took
(`forward_downsample`, as the functional def's suffix says, `forward_no_residual` for
`x if self.residual else 0`), else a library function only it calls (`forward_tanh`: its
`self.act` is a `Tanh`), else a number its calls bound, or their modules held, that the
others' did not (`forward_heads_4`), else its place among them (`forward_1` for the second)."""

from __future__ import annotations

import ast
import re

from jaxside.render import names as naming
from jaxside.render import source as torch_source
from jaxside.render.ir import Function
from jaxside.tracing.trace import Call

__all__ = ["method_names"]


def method_names(methods: list[Function]) -> dict[int, str]:
    """Each def's method name, by `id`, for the defs of one class (in their order)."""
    by_method: dict[str, list[Function]] = {}
    for function in methods:
        by_method.setdefault(_torch_name(function), []).append(function)
    names: dict[int, str] = {}
    taken = {"__call__" if m == "forward" else m for m in by_method}
    for method, defs in by_method.items():
        names[id(defs[0])] = "__call__" if method == "forward" else method
        for k, function in enumerate(defs[1:], start=1):
            others = [f for f in defs if f is not function]
            words = (_suffix(function) or _branch(function, others) or _called(function, others)
                     or _number(function, others) or str(k))
            name = base = naming.identifier(f"{method}_{words}")
            n = 2
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            taken.add(name)
            names[id(function)] = name
    return names


def _torch_name(function: Function) -> str:
    return function.calls[0].function.rpartition(".")[2]


def _suffix(function: Function) -> str | None:
    """`downsample` of `basic_block_forward_downsample`: the branch the lowering named the def by."""
    base = naming.function_name(function.calls[0].function)
    rest = re.sub(r"_\d+$", "", function.name.removeprefix(base)) if function.name.startswith(base) else ""
    return rest.removeprefix("_") or None


def _seen(call: Call) -> set[tuple[str, int, object]]:
    """The numbers a call bound to locals, (name, line, value), and those its module held as its own
    attributes (`heads`), at line 0."""
    own = {(name, 0, value) for name, value in call.seen.attributes.items() if "." not in name}
    return own | {(name, line, value) for name, line, value in call.seen.numbers}


def _apart(function: Function, others: list[Function]) -> list[tuple[str, int, object]]:
    """The numbers every call of `function` saw that no other def's calls saw so."""
    found = [_seen(call) for call in function.calls]
    theirs = {item for other in others for call in other.calls for item in _seen(call)}
    common = set.intersection(*found) - theirs if found else set()
    return sorted(common, key=lambda item: (item[1] == 0, item[1], item[0]))


def _branch(function: Function, others: list[Function]) -> str | None:
    """`no_residual` where the local a number was bound to took the `else` of a conditional
    expression on a flag (`res = x if self.residual else 0`); `residual` for its body."""
    call = function.calls[0]
    torch_def = torch_source.function_at(torch_source.tree(call.file), call.line)
    for name, line, value in _apart(function, others):
        conditional = _conditional(torch_def, name, line)
        if conditional is None:
            continue
        test = conditional.test
        flag = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
        for taken, branch in ((True, conditional.body), (False, conditional.orelse)):
            if isinstance(flag, str) and isinstance(branch, ast.Constant) and branch.value == value:
                return flag if taken else f"no_{flag}"
    return None


def _conditional(torch_def: ast.AST | None, name: str, line: int) -> ast.IfExp | None:
    """The conditional expression `name` is bound to at `line` of the torch def, if it is one."""
    for node in ast.walk(torch_def) if torch_def is not None else ():
        if isinstance(node, ast.Assign) and node.lineno == line and isinstance(node.value, ast.IfExp):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
    return None


def _number(function: Function, others: list[Function]) -> str | None:
    """`heads_4`: a whole number a local took (or the module held) in every call of `function`, in
    no other def's."""
    for name, _, value in _apart(function, others):
        if type(value) is int and value >= 0:
            return f"{name}_{value}"
    return None


_LIBRARIES = frozenset({"jnp", "jax", "lax"})


def _library_calls(function: Function) -> list[str]:
    """The library functions a def calls (`tanh` of `jnp.tanh(...)`), in the order written."""
    found: list[str] = []
    for statement in function.body:
        for node in ast.walk(statement.node()):
            func = node.func if isinstance(node, ast.Call) else None
            if not isinstance(func, ast.Attribute):
                continue
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in _LIBRARIES and func.attr not in found:
                found.append(func.attr)
    return found


def _called(function: Function, others: list[Function]) -> str | None:
    """`tanh`: the first library function `function` calls that no other def of the method calls."""
    theirs = {name for other in others for name in _library_calls(other)}
    return next((name for name in _library_calls(function) if name not in theirs), None)
