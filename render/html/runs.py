"""Which lines of a file ran in a trace, as far as the trace shows.

The frame hook records every line a call of user code ran (`Seen.lines`): a def's body ran when
the def was called, and inside it a branch (of an `if`, or an `except`) did not run when no line of
it ran in any call. Where a call has no such record (a trace made otherwise), the evidence is what
else the trace holds: the expressions that emitted equations, where locals were bound and where
user functions were called; then a branch did not run when, in every call, it left no evidence and
either its sibling branch did (`if`/`else` are exclusive), or it ends in `raise` and the call
returned, or it ends in `return` and the call went on past the `if`. A branch with no evidence
either way counts as run: dimming code that ran would mislead more than leaving a skipped branch
bright.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

_Def = ast.FunctionDef | ast.AsyncFunctionDef


def _same(file: str, target: Path) -> bool:
    try:
        return Path(file).resolve() == target
    except (OSError, ValueError):
        return False


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _end(nodes: list[ast.stmt]) -> int:
    return max(n.end_lineno or n.lineno for n in nodes)


_Evidence = tuple[set[int], bool, bool]
"""Per call of a def: the lines shown to have run, whether it raised, whether those are every line
it ran (the frame hook's record) or only what the trace otherwise shows."""


class Runs:
    """`ran`: the lines of `path` that ran in the trace (called defs, less the branches shown skipped)."""

    def __init__(self, trace: Any, path: str, tree: ast.Module) -> None:
        target = Path(path).resolve()
        defs = {_first_line(n): n for n in ast.walk(tree) if isinstance(n, _Def)}
        per_def: dict[int, list[_Evidence]] = {}
        for call in trace.root.walk():
            if _same(call.file, target) and call.line in defs:
                lines = self._evidence(trace, call, target)
                per_def.setdefault(call.line, []).append((lines, call.raised, bool(call.seen.lines)))
        self.called = set(per_def)
        """First lines (decorator or `def`) of the defs called in the trace."""
        self.ran: set[int] = set()
        skipped: set[int] = set()
        for line, calls in per_def.items():
            node = defs[line]
            self.ran.update(range(line, (node.end_lineno or node.lineno) + 1))
            skipped.update(self._skipped_lines(node.body, calls))
        self.ran -= skipped

    @staticmethod
    def _evidence(trace: Any, call: Any, target: Path) -> set[int]:
        lines: set[int] = {call.line}
        sites = [trace.eqn_sites[i] for i in call.eqns]
        sites += [child.call_site for child in call.children]
        for site in sites:
            if site is not None and _same(site.file, target):
                lines.update(range(site.line, site.end_line + 1))
        lines.update(line for _, line, _ in call.seen.bindings)
        lines.update(call.seen.lines)
        return lines

    def _skipped_lines(self, body: list[ast.stmt], calls: list[_Evidence]) -> set[int]:
        """Lines of a block that ran which did not: skipped branches, and nested defs never called."""
        found: set[int] = set()
        for node in body:
            if isinstance(node, _Def):
                if _first_line(node) not in self.called:
                    found.update(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))
                continue
            if isinstance(node, ast.If):
                branches = [node.body] + ([node.orelse] if node.orelse else [])
                end = node.end_lineno or node.lineno
                for index, branch in enumerate(branches):
                    others = branches[:index] + branches[index + 1 :]
                    if all(self._skipped(branch, others, end, call) for call in calls):
                        header = (node.test.end_lineno or node.lineno) + 1  # a comment above the body too
                        first = min(branch[0].lineno, header) if index == 0 else _end(node.body) + 1
                        found.update(range(first, _end(branch) + 1))
                    else:
                        found |= self._skipped_lines(branch, calls)
                continue
            for name in ("body", "orelse", "finalbody"):
                part = getattr(node, name, None)
                if isinstance(part, list) and part and isinstance(part[0], ast.stmt):
                    found |= self._skipped_lines(part, calls)
            for handler in getattr(node, "handlers", []):
                start, end = handler.body[0].lineno, _end(handler.body)
                ran = [not exact or any(start <= line <= end for line in lines) for lines, _, exact in calls]
                if not any(ran):
                    found.update(range(handler.lineno, end + 1))  # no exception was caught here
                else:
                    found |= self._skipped_lines(handler.body, calls)
        return found

    @staticmethod
    def _skipped(branch: list[ast.stmt], others: list[list[ast.stmt]], if_end: int,
                 call: _Evidence) -> bool:
        lines, raised, exact = call
        start, end = branch[0].lineno, _end(branch)
        if any(start <= line <= end for line in lines):
            return False
        if exact:  # every line the call ran is known: none of the branch's
            return True
        if any(_end(other) >= line >= other[0].lineno for other in others for line in lines):
            return True
        last = branch[-1]
        if isinstance(last, ast.Raise) and not raised:
            return True
        return isinstance(last, ast.Return) and any(line > if_end for line in lines)
