"""Expressions as documents for `render.layout`: groups, soft line breaks and indents, printed the
way `ruff format` prints them.

A Wadler-style printer: `print_doc` puts each group on one line when it (and what follows it up to
the next line break) fits, else breaks its lines; `Docs` turns an `ast` expression into such a
document with ruff's choices: brackets break outermost first, items one per line with a trailing
comma when they do not fit on one line either, operators start lines inside brackets, a chain
of calls breaks before each `.method` (`x.at[i].set(v)`), and a statement's expression gets
brackets of its own only when it breaks and has none to break at.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render import text as user_text
from jaxside.render.text import display_width, double_quotes

Doc = Any
"""A document: a str, a list of documents, or one of the tuples made below."""
SOFT: Doc = ("line", "")
"""A line break when its group breaks, else nothing."""
LINE: Doc = ("line", " ")
"""A line break when its group breaks, else a space."""


def group(*parts: Doc) -> Doc:
    return ("group", list(parts))


def indent(*parts: Doc) -> Doc:
    return ("indent", list(parts))


def if_break(broken: Doc, flat: Doc = "") -> Doc:
    return ("ifbreak", broken, flat)


def join(separator: list[Doc], items: list[Doc]) -> list[Doc]:
    out: list[Doc] = []
    for index, item in enumerate(items):
        if index:
            out += separator
        out.append(item)
    return out


# -- the printer -----------------------------------------------------------------------------------------

_FLAT, _BREAK = 0, 1


def _fits(command: tuple[Any, ...], rest: list[tuple[Any, ...]], room: int) -> bool:
    """Whether `command` in flat mode, then what follows up to the next line break, fits in `room`."""
    stack, taken = [command], len(rest)
    while room >= 0:
        if not stack:
            if taken == 0:
                return True
            taken -= 1
            stack.append(rest[taken])
            continue
        indent, mode, doc = stack.pop()
        if isinstance(doc, str):
            room -= display_width(doc)
        elif isinstance(doc, list):
            stack.extend((indent, mode, part) for part in reversed(doc))
        elif doc[0] == "line":
            if mode == _BREAK:
                return True
            room -= len(doc[1])
        elif doc[0] in ("group", "indent"):
            stack.append((indent, mode, doc[1]))
        elif doc[0] == "ifbreak":
            stack.append((indent, mode, doc[1] if mode == _BREAK else doc[2]))
        elif doc[0] == "best":
            stack.append((indent, mode, doc[1]))
    return False


def print_doc(doc: Doc, indent: int, width: int, column: int = 0) -> str:
    out: list[str] = []
    stack: list[tuple[Any, ...]] = [(indent, _BREAK, doc)]
    while stack:
        level, mode, doc = stack.pop()
        if isinstance(doc, str):
            out.append(doc)
            column += display_width(doc)
        elif isinstance(doc, list):
            stack.extend((level, mode, part) for part in reversed(doc))
        elif doc[0] == "line":
            if mode == _FLAT:
                out.append(doc[1])
                column += len(doc[1])
            else:
                out.append("\n" + " " * level)
                column = level
        elif doc[0] == "indent":
            stack.append((level + 4, mode, doc[1]))
        elif doc[0] == "group":
            flat = mode == _FLAT or _fits((level, _FLAT, doc[1]), stack, width - column)
            stack.append((level, _FLAT if flat else _BREAK, doc[1]))
        elif doc[0] == "ifbreak":
            stack.append((level, mode, doc[1] if mode == _BREAK else doc[2]))
        elif doc[0] == "best":  # the first layout whose first line fits, else the second
            rest = [doc[1], *(d for _, _, d in reversed(stack))]
            first = print_doc(rest, level, width, column).split("\n", 1)[0]
            fits = column + display_width(first) <= width
            stack.append((level, mode, doc[1] if fits else doc[2]))
    return "".join(out)


# -- expressions -----------------------------------------------------------------------------------------

# Binding power, loosest first, as `ast.unparse` parenthesizes by it.
_TUPLE, TEST, _OR, _AND, _NOT, _CMP, _EXPR, _BOR, _BXOR, _BAND, _SHIFT, _ARITH, _TERM, _FACTOR, _POWER, \
    _AWAIT, _ATOM = range(1, 18)
_BINARY = {
    ast.BitOr: _BOR, ast.BitXor: _BXOR, ast.BitAnd: _BAND, ast.LShift: _SHIFT, ast.RShift: _SHIFT,
    ast.Add: _ARITH, ast.Sub: _ARITH, ast.Mult: _TERM, ast.MatMult: _TERM, ast.Div: _TERM,
    ast.FloorDiv: _TERM, ast.Mod: _TERM, ast.Pow: _POWER,
}
_SYMBOLS = {
    ast.BitOr: "|", ast.BitXor: "^", ast.BitAnd: "&", ast.LShift: "<<", ast.RShift: ">>", ast.Add: "+",
    ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
    ast.Pow: "**", ast.Not: "not ", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.And: "and",
    ast.Or: "or", ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}
_SQUARE, _CURLY, _ROUND = ("[", "]"), ("{", "}"), ("(", ")")
_BRACKETS: dict[type[ast.expr], tuple[str, str]] = {
    ast.List: _SQUARE, ast.Set: _CURLY, ast.ListComp: _SQUARE, ast.SetComp: _CURLY, ast.DictComp: _CURLY,
    ast.GeneratorExp: _ROUND, ast.Dict: _CURLY, ast.Tuple: _ROUND,
}


def _precedence(node: ast.expr) -> int:
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)]
    if isinstance(node, ast.UnaryOp):
        return _NOT if isinstance(node.op, ast.Not) else _FACTOR
    if isinstance(node, ast.BoolOp):
        return _OR if isinstance(node.op, ast.Or) else _AND
    if isinstance(node, ast.Compare):
        return _CMP
    if isinstance(node, (ast.IfExp, ast.Lambda)):
        return TEST
    if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom)):
        return 0
    if isinstance(node, ast.Starred):
        return _EXPR
    if isinstance(node, ast.Await):
        return _AWAIT
    return _ATOM


def _simple(node: ast.expr) -> bool:
    """A name, number or None, maybe negated: what slices and `**` keep without spaces."""
    if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        return _simple(node.operand)
    return isinstance(node, ast.Name) or (
        isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float))
    )


def _power_operand(node: ast.expr) -> bool:
    """A name, a number or a dotted name: what `**` hugs (`x**2`); a negation is in parentheses there."""
    if isinstance(node, ast.Attribute):
        return _power_operand(node.value)
    return isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and type(node.value) in (int, float))


def _own_brackets(node: ast.expr) -> bool:
    """Whether the expression ends in brackets it can break at (a call, a list...)."""
    if isinstance(node, ast.Call):
        return True
    if isinstance(node, ast.Subscript):
        return True
    if isinstance(node, ast.Attribute):  # `f(x).T`
        return _own_brackets(node.value)
    if isinstance(node, ast.UnaryOp):
        return _own_brackets(node.operand) and _precedence(node.operand) >= _FACTOR
    return type(node) in _BRACKETS and not isinstance(node, ast.Tuple)


class Docs:
    """`ast` nodes as documents; `inside` says whether the expression sits in brackets, where its
    operators may start new lines."""

    def __init__(self) -> None:
        self._fluent: set[int] = set()  # the attributes of a fluent call chain, a line each when broken
        self._links: set[int] = set()  # calls, attributes and subscripts inside a chain (not its root)

    def sub(self, node: ast.expr, least: int, inside: bool) -> Doc:
        """`node` where its binding power must be at least `least` (else it gets parentheses)."""
        if _precedence(node) < least:
            return group("(", indent(SOFT, group(self.expr(node, True))), SOFT, ")")
        return self.expr(node, inside)

    def expr(self, node: ast.expr, inside: bool) -> Doc:
        method = getattr(self, "_" + type(node).__name__.lower(), None)
        if method is None:
            return ast.unparse(node)
        if isinstance(node, _CHAIN):
            root = id(node) not in self._links
            self._links.add(id(node.func if isinstance(node, ast.Call) else node.value))
            dots = _fluent_dots(node) if root and inside else []
            if dots:  # ruff's fluent style in brackets: `f(x)` and each `.at[i]`, `.set(v)` a line
                self._fluent.update(map(id, dots))
                return group(method(node, inside))
        return method(node, inside)

    def _constant(self, node: ast.Constant, inside: bool) -> Doc:
        if isinstance(node.value, str) and not getattr(node, "kind", None):
            return user_text.literal(node.value)
        return "..." if node.value is Ellipsis else user_text.numbers(ast.unparse(node))

    def _name(self, node: ast.Name, inside: bool) -> Doc:
        return node.id

    def _attribute(self, node: ast.Attribute, inside: bool) -> Doc:
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            return [f"({ast.unparse(value)})", SOFT if id(node) in self._fluent else "", ".", node.attr]
        if id(node) in self._fluent:
            return [self.sub(value, _ATOM, inside), SOFT, ".", node.attr]
        return [self.sub(value, _ATOM, inside), ".", node.attr]

    def _call(self, node: ast.Call, inside: bool) -> Doc:
        items = [self.sub(a, TEST, True) for a in node.args] + [
            [f"{k.arg}=" if k.arg else "**", self.sub(k.value, TEST, True)] for k in node.keywords
        ]
        func = self.sub(node.func, _ATOM, inside)
        if not items:
            return [func, "()"]
        if len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.GeneratorExp):
            return [func, group("(", indent(SOFT, group(self._comprehension(node.args[0]))), SOFT, ")")]
        if len(items) == 1:
            return [func, group("(", indent(SOFT, group(items[0])), SOFT, ")")]
        body = group(*join([",", LINE], [group(i) for i in items]), if_break(","))
        return [func, group("(", indent(SOFT, body), SOFT, ")")]

    def _starred(self, node: ast.Starred, inside: bool) -> Doc:
        return ["*", self.sub(node.value, _EXPR, inside)]

    def _subscript(self, node: ast.Subscript, inside: bool) -> Doc:
        index = node.slice
        if isinstance(index, ast.Tuple) and index.elts:
            items = [group(self._index(e)) for e in index.elts]
            body = [*join([",", LINE], items), "," if len(items) == 1 else if_break(",")]
        else:
            body = [self._index(index)]
        return [self.sub(node.value, _ATOM, inside), group("[", indent(SOFT, *body), SOFT, "]")]

    def _index(self, node: ast.expr) -> Doc:
        if not isinstance(node, ast.Slice):
            return self.sub(node, TEST, True)
        parts = [node.lower, node.upper] + ([node.step] if node.step is not None else [])
        spaced = any(p is not None and not _simple(p) for p in parts)
        out: list[Doc] = []
        for index, part in enumerate(parts):
            if index:
                before = spaced and parts[index - 1] is not None
                after = spaced and part is not None
                out.append((" " if before else "") + ":" + (" " if after else ""))
            if part is not None:
                out.append(self.sub(part, TEST, True))
        if node.step is None and node.upper is None and node.lower is None:
            return ":"
        return out

    def _binop(self, node: ast.BinOp, inside: bool) -> Doc:
        precedence = _BINARY[type(node.op)]
        if isinstance(node.op, ast.Pow):
            left = self.sub(node.left, _POWER + 1, inside)
            right = self.sub(node.right, _POWER, inside)
            if _power_operand(node.left) and _power_operand(node.right):  # `x**2`; `x\n** y` broken
                return [left, SOFT, "**", if_break(" "), right] if inside else [left, "**", right]
            return self._chain([group(left), group(right)], ["**"], inside)
        operands, operators = [node.right], [node.op]
        left = node.left
        while isinstance(left, ast.BinOp) and _BINARY[type(left.op)] == precedence and precedence != _POWER:
            operands.insert(0, left.right)
            operators.insert(0, left.op)
            left = left.left
        operands.insert(0, left)
        docs = [self._operand(operands[0], precedence, inside)]
        docs += [self._operand(o, precedence + 1, inside) for o in operands[1:]]
        return self._chain(docs, [_SYMBOLS[type(o)] for o in operators], inside)

    def _operand(self, node: ast.expr, least: int, inside: bool) -> Doc:
        doc = self.sub(node, least, inside)
        return group(doc) if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare)) else doc

    @staticmethod
    def _chain(operands: list[Doc], operators: list[str], inside: bool) -> Doc:
        out = [operands[0]]
        for operator, operand in zip(operators, operands[1:]):
            out += [LINE if inside else " ", operator + " ", operand]
        return out

    def _boolop(self, node: ast.BoolOp, inside: bool) -> Doc:
        precedence = _precedence(node)
        docs = [self._operand(v, precedence + 1, inside) for v in node.values]
        return self._chain(docs, [_SYMBOLS[type(node.op)]] * (len(docs) - 1), inside)

    def _compare(self, node: ast.Compare, inside: bool) -> Doc:
        docs = [self._operand(v, _CMP + 1, inside) for v in [node.left, *node.comparators]]
        return self._chain(docs, [_SYMBOLS[type(o)] for o in node.ops], inside)

    def _unaryop(self, node: ast.UnaryOp, inside: bool) -> Doc:
        power = isinstance(node.operand, ast.BinOp) and isinstance(node.operand.op, ast.Pow)
        least = _ATOM + 1 if power else _precedence(node)  # ruff's `-(x**2)`, never `-x**2`
        return [_SYMBOLS[type(node.op)], self.sub(node.operand, least, inside)]

    def _ifexp(self, node: ast.IfExp, inside: bool) -> Doc:
        space = LINE if inside else " "
        return [self.sub(node.body, TEST + 1, inside), space, "if ", self.sub(node.test, TEST + 1, inside),
                space, "else ", self.sub(node.orelse, TEST, inside)]

    def _lambda(self, node: ast.Lambda, inside: bool) -> Doc:
        args = ast.unparse(node.args)
        body = self.sub(node.body, TEST, True)
        return [f"lambda {args}: " if args else "lambda: ",
                group(if_break("("), indent(SOFT, group(body)), SOFT, if_break(")"))]

    def _tuple(self, node: ast.Tuple | ast.List | ast.Set, inside: bool) -> Doc:
        return self._collection(node, node.elts)

    _list = _set = _tuple

    def _dict(self, node: ast.Dict, inside: bool) -> Doc:
        items = [
            ["**", self.sub(v, _EXPR, True)] if k is None else [self.sub(k, TEST, True), ": ",
                                                               self.sub(v, TEST, True)]
            for k, v in zip(node.keys, node.values)
        ]
        return self._brackets(node, [group(i) for i in items])

    def _collection(self, node: ast.expr, elements: list[ast.expr]) -> Doc:
        return self._brackets(node, [group(self.sub(e, TEST, True)) for e in elements])

    @staticmethod
    def _brackets(node: ast.expr, items: list[Doc]) -> Doc:
        opening, closing = _BRACKETS[type(node)]
        if not items:
            return opening + closing
        if len(items) == 1:
            trailing = "," if isinstance(node, ast.Tuple) else ""
        else:
            trailing = if_break(",")
        return group(opening, indent(SOFT, *join([",", LINE], items), trailing), SOFT, closing)

    def _comprehension(self, node: Any) -> Doc:
        if isinstance(node, ast.DictComp):
            out: list[Doc] = [self.sub(node.key, TEST, True), ": ", self.sub(node.value, TEST, True)]
        else:
            out = [self.sub(node.elt, TEST, True)]
        for generator in node.generators:
            target = flat_tuple(generator.target) if isinstance(generator.target, ast.Tuple) else self.expr(
                generator.target, True)
            out += [LINE, "async for " if generator.is_async else "for ", target, " in ",
                    self.sub(generator.iter, TEST + 1, True)]
            for condition in generator.ifs:
                out += [LINE, "if ", self.sub(condition, TEST + 1, True)]
        return out

    def _listcomp(self, node: Any, inside: bool) -> Doc:
        opening, closing = _BRACKETS[type(node)]
        # its brackets break first: the comprehension breaks at `for` only where it does not fit on
        # a line of its own between them, as ruff breaks it
        return group(opening, indent(SOFT, group(self._comprehension(node))), SOFT, closing)

    _setcomp = _dictcomp = _generatorexp = _listcomp

    # -- what statements put after `=`, `return`, `in` --------------------------------------------------

    def value(self, node: ast.expr, bare_tuple: bool = False) -> Doc:
        """A statement's expression: broken at its own brackets, else put in brackets that show
        only when it breaks; both when its first line fits either way (`x = a * f(` ...)."""
        if isinstance(node, ast.Tuple) and len(node.elts) > 1 and bare_tuple:  # `return a, b`
            items = [group(self.sub(e, TEST, True)) for e in node.elts]
            broken = group(if_break("("), indent(SOFT, *join([",", LINE], items), if_break(",")), SOFT,
                            if_break(")"))
            if _omittable(node):
                flat = join([", "], [self.sub(e, TEST, False) for e in node.elts])
                return ("best", flat, broken)
            return broken
        if _fluent_dots(node):  # ruff's fluent style: `(`, then `f(x)` and each `.at[i]`, `.set(v)` a line
            return group(if_break("("), indent(SOFT, group(self.expr(node, True))), SOFT, if_break(")"))
        if _own_brackets(node) or isinstance(node, (ast.Lambda, ast.Tuple)) or not _breakable(node):
            return self.expr(node, False)
        broken = group(if_break("("), indent(SOFT, group(self.expr(node, True))), SOFT, if_break(")"))
        if _omittable(node):
            return ("best", self.expr(node, False), broken)
        return broken


def flat_tuple(node: ast.Tuple) -> str:
    """A tuple target without brackets (`for a, b in`), never broken; a one-tuple keeps them (`(a,)`)."""
    text = ", ".join(double_quotes(ast.unparse(e)) for e in node.elts)
    return f"({text},)" if len(node.elts) == 1 else text


_CHAIN = (ast.Call, ast.Subscript, ast.Attribute)


def _fluent_dots(node: ast.expr) -> list[ast.Attribute]:
    """The attributes of a call chain after a call, a subscript or a value in parentheses
    (`f(x).at[i].set(v)`, `(a + b).at[i].set(v)`: `.at` and `.set`), when there are two or more:
    ruff then lays the chain out one attribute a line when it breaks (its fluent style); else none."""
    dots = []
    while isinstance(node, _CHAIN):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, (ast.Call, ast.Subscript)) or _parenthesized(node.value):
                dots.append(node)
            node = node.value
        else:
            node = node.func if isinstance(node, ast.Call) else node.value
    return dots if len(dots) > 1 else []


def _parenthesized(node: ast.expr) -> bool:
    """Whether a chain's value is written in parentheses: a looser operator, an int (`(1).real`)."""
    return (isinstance(node, ast.Constant) and type(node.value) is int) or _precedence(node) < _ATOM


def _breakable(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _breakable(node.operand)
    return not isinstance(node, (ast.Name, ast.Constant, ast.Attribute)) or any(
        isinstance(n, (ast.Call, ast.Subscript)) for n in ast.walk(node)
    )


def _count(node: ast.expr) -> int:
    """How many operators bind loosest at the top of `node`."""
    if isinstance(node, ast.BinOp):
        return 1 + (_count(node.left) if _precedence(node.left) == _precedence(node) else 0)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.Compare):
        return len(node.ops)
    return 1


def _first(node: ast.expr) -> ast.expr | None:
    """The leftmost operand, down through operators, calls, attributes and subscripts, stopping
    at one in parentheses; None when `node` starts with an operator (`-x`)."""
    if isinstance(node, ast.BinOp):
        inner, least = node.left, _precedence(node) + isinstance(node.op, ast.Pow)
    elif isinstance(node, (ast.BoolOp, ast.Compare)):
        inner = node.values[0] if isinstance(node, ast.BoolOp) else node.left
        least = _precedence(node) + 1
    elif isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        inner, least = (node.func if isinstance(node, ast.Call) else node.value), _ATOM
    else:
        return None if isinstance(node, ast.UnaryOp) else node
    return inner if _precedence(inner) < least else _first(inner)


def _last(node: ast.expr) -> ast.expr:
    """The rightmost operand, down through operators, stopping at one in parentheses."""
    if isinstance(node, ast.BinOp):
        inner, least = node.right, _precedence(node) + (not isinstance(node.op, ast.Pow))
    elif isinstance(node, ast.UnaryOp):
        inner, least = node.operand, _precedence(node)
    elif isinstance(node, (ast.BoolOp, ast.Compare)):
        inner = node.values[-1] if isinstance(node, ast.BoolOp) else node.comparators[-1]
        least = _precedence(node) + 1
    else:
        return node
    return inner if _precedence(inner) < least else _last(inner)


def _bracketed(node: ast.expr | None) -> bool:
    """Whether an operand has non-empty brackets a statement may break at: a call, a display,
    or an operand in parentheses; never a subscript (ruff's rule: that looks odd)."""
    if node is None or isinstance(node, ast.Subscript):
        return False
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda)):
        return True  # `_first` and `_last` stop at an operator only where it is in parentheses
    if isinstance(node, ast.Call):
        return bool(node.args or node.keywords)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    return type(node) in _BRACKETS and bool(getattr(node, "elts", True))


def _omittable(node: ast.expr) -> bool:
    """Whether a statement's expression may go without brackets of its own (ruff's rule): one
    loosest operator, and an operand in brackets at its end (or its start) to break at."""
    if isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr)) or _count(node) > 1:
        return False
    if isinstance(node, ast.Tuple):
        return len(node.elts) == 2 and (_bracketed(_last(node.elts[1])) or _bracketed(_first(node.elts[0])))
    return _bracketed(_last(node)) or _bracketed(_first(node))
