"""The program render writes: defs of statements, each from one torch expression, and how each becomes `ast`.

    Program.functions    # the entry first, then the defs it calls; `.helpers` for sub-jaxprs
    Function.body        # Statements (a Loop for a run of identical calls, a Define for a nested def)
    Statement.node()     # the `ast` statement; printers (`module`, `comments`, `html`) read only this

`render.lower` builds a Program from a Trace; nothing here decides anything.
"""

from __future__ import annotations

import ast
import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from jaxside.render import names as naming
from jaxside.render.names import Scope
from jaxside.tracing.trace import Call, Site, Trace


def named(name: str, ctx: ast.expr_context | None = None) -> ast.Name:
    """The `ast` name `name` (loaded unless `ctx` says otherwise)."""
    return ast.Name(name, ctx or ast.Load())


@dataclass
class Fold:
    """What a value folded into the expression using it was (`render.lower.unfold` may name it
    again): the name it would take, the equations it computes, its torch expression and call."""

    name: str | None
    eqns: list[int]
    site: Site | None
    call: Call | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> Fold:
        """A copy sharing the trace's site and call (the trace is never changed): copying the call
        copied its whole subtree, once per expression copied, quadratic in the model's depth."""
        return Fold(self.name, list(self.eqns), self.site, self.call)


def fold(node: ast.expr, record: Fold) -> ast.expr:
    """`node`, marked as folded (the mark survives `copy.deepcopy`)."""
    node.jaxside_fold = record  # type: ignore[attr-defined]  # a mark on the node, read by `fold_of`
    return node


def fold_of(node: ast.AST) -> Fold | None:
    """How `node` was folded into its expression, if it was."""
    return getattr(node, "jaxside_fold", None)


def unfolded(node: ast.AST, mark: bool = False) -> bool:
    """Whether `node` is the value of a statement `render.lower.unfold` took out of a longer one
    (only for a line width: a class style with shorter lines may fold it back); `mark` marks it."""
    if mark:
        node.jaxside_unfolded = True  # type: ignore[attr-defined]  # a mark on the node
    return bool(getattr(node, "jaxside_unfolded", False))


@dataclass
class Statement:
    """One assignment (or loop) in a def, for one torch source expression.

    `eqns` are the equations of the caller it computes (a call statement's callee equations
    are the callee's); `site` is the torch expression it came from; `call` the trace call a
    call statement stands for (the first one, for a def shared by many calls).
    """

    targets: list[str]
    value: ast.expr
    eqns: list[int]
    site: Site | None
    call: Call | None = None
    target: ast.expr | None = None
    """The assignment target when it is not a flat tuple of `targets` (`(k, v), state = ...`)."""
    when: ast.expr | None = field(default=None, kw_only=True)
    """The flag it runs under in a def shared by calls that took other branches (`downsample`,
    `not has_skip`): the statement is `if when: ...`, and runs of them make one `if`/`else`."""

    def node(self) -> ast.stmt:
        plain = self.plain()
        return plain if self.when is None else ast.If(self.when, [plain], [])

    def plain(self) -> ast.stmt:
        """The statement without its `if when:`."""
        if self.target is not None:
            target = self.target
        elif not self.targets:
            return ast.Expr(self.value)
        elif len(self.targets) == 1:
            target = named(self.targets[0], ast.Store())
        else:
            target = ast.Tuple([named(t, ast.Store()) for t in self.targets], ast.Store())
        return ast.Assign([target], self.value, lineno=0)


@dataclass
class Loop(Statement):
    """A run of identical calls rolled back into the `for` loop the torch code had.

    `targets`/`value` are those of the loop's call statement, so a caller that only wants
    "the JAX for this torch line" can treat it like any statement; `node()` is the loop.
    """

    loop_target: ast.expr | None = None
    iterable: ast.expr | None = None
    body: list[Statement] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    def node(self) -> ast.stmt:
        assert self.loop_target is not None and self.iterable is not None  # a Loop is made with both
        return ast.For(self.loop_target, self.iterable, [s.node() for s in self.body], [], lineno=0)


@dataclass
class Guard(Statement):
    """`if <value>: raise ValueError(message)`: a size the def cannot take another value of."""

    message: str = ""

    def node(self) -> ast.stmt:
        error = ast.Call(named("ValueError"), [ast.Constant(self.message)], [])
        return ast.If(self.value, [ast.Raise(error)], [])


@dataclass
class Keyword:
    """A keyword-only parameter of a shared def (`stride`) and the value each call passes, by
    `id` of the call (a stride of 2 in the blocks that downsample, 1 in the others)."""

    name: str
    values: dict[int, ast.expr]
    default: ast.expr | None = None
    """Its default (`downsample=False`), which the calls passing that value leave out."""

    def at(self, call: Call) -> ast.keyword | None:
        """The `stride=2` a call passes; None where it passes the default."""
        value = self.values.get(id(call))
        if value is None or self.default is not None and ast.dump(value) == ast.dump(self.default):
            return None
        return ast.keyword(self.name, copy.deepcopy(value))


@dataclass
class Calling:
    """How callers call a def: which of a call's args ("arg", i) and inputs ("extra", i) it takes,
    in parameter order, and what it gives back. Defs that merge are called alike."""

    operands: list[tuple[str, int]] = field(default_factory=list)
    packing: list[list[tuple[str, int]] | None] = field(default_factory=list)
    """Per parameter after `params`/`state`: None for one operand (the next), or the operands a
    pytree parameter holds, as `(path, operand position)` (`params` of a JAX function)."""
    out_slots: list[int] = field(default_factory=list)
    ret_paths: list[str] = field(default_factory=list)
    uses_params: bool = False
    uses_state: bool = False
    state_out: list[str] = field(default_factory=list)
    """Buffer paths (relative to the call's module) whose new value it returns."""


@dataclass
class Function:
    """One def: a user function or module method, shared by every call with its structure."""

    name: str
    calls: list[Call]
    params: list[str]
    body: list[Statement]
    returns: ast.expr | None
    scope: Scope
    doc: str | None = None
    calling: Calling = field(default_factory=Calling)
    """How callers call it."""
    anchor: str | None = None
    """The module path its `params`/`state` subtrees start at (of its first call)."""
    decorators: list[ast.expr] = field(default_factory=list)
    arg_names: dict[str, str] = field(default_factory=dict)
    """The entry's parameter name for each input the user named (`params` -> `params_1`, since
    `params` is the weights')."""
    arg_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The shape each tensor parameter had in its first call (what sizes are read from)."""
    value_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The shape of each value the def names (its parameters' too), in its first call."""
    param_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The shape of each `params[...]` leaf the def reads (by its source text), in its first call."""
    keywords: list[Keyword] = field(default_factory=list)
    """Keyword-only parameters: config numbers that differ between the calls sharing the def."""

    def running(self, when: ast.expr) -> int:
        """How many of its calls run the statements under `when` (`downsample`, `not downsample`)."""
        negated = isinstance(when, ast.UnaryOp)
        flag = when.operand if isinstance(when, ast.UnaryOp) else when
        keyword = next(k for k in self.keywords if isinstance(flag, ast.Name) and k.name == flag.id)
        values = [keyword.values.get(id(call), keyword.default) for call in self.calls]
        return sum(isinstance(v, ast.Constant) and bool(v.value) != negated for v in values)

    def node(self) -> ast.FunctionDef:
        body: list[ast.stmt] = []
        if self.doc:
            body.append(ast.Expr(ast.Constant(self.doc)))
        body += blocks(self.body)
        returns_none = isinstance(self.returns, ast.Constant) and self.returns.value is None
        if self.returns is not None and not returns_none:  # `return None` alone is ruff's RET501
            body.append(ast.Return(self.returns))
        if not body:
            body.append(ast.Pass())
        kwonly = [ast.arg(k.name) for k in self.keywords]
        defaults = [copy.deepcopy(k.default) for k in self.keywords]
        positional = [ast.arg(p) for p in self.params]
        args = ast.arguments([], positional, None, kwonly, defaults, None, [])
        return ast.FunctionDef(self.name, args, body, list(self.decorators), None, lineno=0, type_params=[])


def blocks(statements: list[Statement]) -> list[ast.stmt]:
    """The statements as `ast`, each run under one flag one `if`, a run under its negation
    right after it that `if`'s `else`."""
    nodes: list[ast.stmt] = []
    previous: ast.expr | None = None
    for statement in statements:
        node = statement.node()
        when = statement.when
        last = nodes[-1] if nodes else None
        if when is None or not isinstance(last, ast.If) or previous is None:
            nodes.append(node)
        elif ast.dump(when) == ast.dump(previous):
            (last.orelse or last.body).append(statement.plain())
        elif not last.orelse and ast.dump(when) == ast.dump(_negated(previous)):
            last.orelse.append(statement.plain())
        else:
            nodes.append(node)
        previous = when
    return nodes


def _negated(test: ast.expr) -> ast.expr:
    """`not test`, as a person writes it: `flag` for `not flag`, `self.downsample is None` for
    `self.downsample is not None` (a class-style flag), and the other way round."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        flipped = ast.IsNot() if isinstance(test.ops[0], ast.Is) else ast.Is()
        return ast.Compare(test.left, [flipped], test.comparators)
    return ast.UnaryOp(ast.Not(), test)


@dataclass(frozen=True)
class Dim:
    """One dimension of an input of the entry: an argument's (`idx`) or a state buffer's."""

    input: str
    axis: int
    size: int
    state: bool = False

    def __str__(self) -> str:
        return f"{self.input}.shape[{self.axis}]"


@dataclass
class Sizes:
    """What an export knows about its inputs' sizes: the dimensions it takes at any size (each set
    of equal ones moves together), and the ones fixed at their traced size, with why."""

    generic: list[list[Dim]] = field(default_factory=list)
    fixed: list[tuple[list[Dim], str]] = field(default_factory=list)
    bounded: list[tuple[list[Dim], str]] = field(default_factory=list)
    """Generic sets whose traced size is their largest (a sequence traced at `block_size`), with
    why no larger: the entry raises a `ValueError` above it."""


@dataclass
class Program:
    """Everything a module renderer needs: defs, helpers, constants and the params layout."""

    trace: Trace
    functions: list[Function]
    helpers: list[Function]
    constants: list[tuple[str, ast.expr]]
    entry: Function
    arg_names: list[str]
    """The entry's tensor arguments, in order (after `params` and `state` when present)."""
    param_paths: list[str]
    state_paths: list[str]
    fallbacks: Counter[str]
    """Primitives without a rule, rendered as their exact `bind` (count of equations)."""
    sizes: Sizes | None = None
    """Which input dimensions are generic and which fixed (None: every size as traced)."""
    config: list[Any] = field(default_factory=list)
    """The fields of the export's `Config` (`render.lower.attributes.ConfigField`): the torch
    modules' attributes the defs read by name."""

    @property
    def takes_params(self) -> bool:
        return self.entry.calling.uses_params

    @property
    def takes_state(self) -> bool:
        return self.entry.calling.uses_state

    @property
    def written_inputs(self) -> list[str]:
        """Arguments the torch code wrote in place (`x.add_(1)`) whose new values the entry returns
        after its outputs, in one dict with any new state (`{"x": ...}`)."""
        arguments = {s.input.name for s in self.trace.state if s.input.kind == "arg"}
        return [path for path in self.entry.calling.state_out if path in arguments]

    def assigned_names(self) -> list[tuple[str, str]]:
        """Every name the user defs assign (parameters, targets, loop variables) with its source."""
        result: list[tuple[str, str]] = []
        for function in self.functions:
            seen: set[str] = set()
            tree = function.node()
            skip = int(function.calling.uses_params) + int(function.calling.uses_state)
            names = [a.arg for a in tree.args.args[skip:]]
            names += [
                n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            ]
            for name in names:
                if name != "_" and name not in seen:
                    seen.add(name)
                    result.append((name, function.scope.names.get(name, "fallback")))
        return result

    def name_share(self) -> tuple[int, int]:
        """(assigned names derived from torch source identifiers, all assigned names)."""
        names = self.assigned_names()
        return sum(source in naming.DERIVED for _, source in names), len(names)


@dataclass
class Define(Statement):
    """A def nested in the one being written (a loop body): the statements after it call it."""

    function: Function | None = None

    def node(self) -> ast.stmt:
        assert self.function is not None
        return self.function.node()
