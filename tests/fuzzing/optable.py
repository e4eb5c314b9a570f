"""Write `docs/ops.md`: each primitive torchax puts in a jaxpr, how jaxside renders it, and its aten ops.

    .venv/bin/python tests/fuzzing/optable.py          # rewrites docs/ops.md (about a minute)

It traces every case of `fuzzing.catalog` with `tracing.capture`, proves each equation's
rendering exact with `fuzzing.harness.check_program` (the same check `tests/test_ops.py`
runs), and records which aten op (from each equation's name stack) produced which
primitive.  `tests/test_ops.py` reads the table back to hold it to the current run.
"""

from __future__ import annotations

import ast
import itertools
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as a script: make `fuzzing` and the project importable
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from jax.extend.core import ClosedJaxpr, Jaxpr  # noqa: E402

from fuzzing.catalog import CASES  # noqa: E402
from fuzzing.harness import Seen, check_program  # noqa: E402
from jaxside.render.rules import REWRITES, Flat, render_eqn  # noqa: E402
from jaxside.render.rules.catalogue import CATALOGUE, ending_in, terminals  # noqa: E402
from jaxside.render.rules.idioms import PATTERNS  # noqa: E402

DOC = ROOT / "docs" / "ops.md"
TABLE_HEADER = "| primitive | rendered as | tested |"
MAX_FORMS = 3
MAX_FORM_LENGTH = 110
_numbers = re.compile(r"\b\d+(\.\d*)?(e-?\d+)?\b")  # forms that differ only in numbers are one form


@dataclass
class Survey:
    """What running the catalog found."""

    forms: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Primitive -> distinct renderings, operands named x, y, z, ..."""
    tested: set[str] = field(default_factory=set)
    """Primitives whose every equation passed `check_program`."""
    failed: dict[str, str] = field(default_factory=dict)
    """Primitive -> the first check failure."""
    aten: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Aten op (or torch function) -> primitives its equations used, nested ones included."""
    not_traced: dict[str, str] = field(default_factory=dict)
    """Catalog case -> why torchax could not trace it."""


def survey() -> Survey:
    result = Survey()
    seen = Seen()
    broken: set[str] = set()
    for case in CASES:
        try:
            trace = case.trace()
        except Exception as error:  # torchax's limitation: recorded in the document
            result.not_traced[case.name] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            continue
        record(result, trace.jaxpr.jaxpr)
        try:
            checks = check_program(trace.jaxpr, seen)
        except AssertionError as error:
            message = str(error)
            result.failed[case.name] = message.splitlines()[0]
            broken.add(message.split()[0])  # check messages start with the primitive's name
            continue
        result.tested.update(c.primitive for c in checks)
    result.tested -= broken
    return result


def record(result: Survey, jaxpr: Jaxpr, aten: str | None = None) -> None:
    """Adds the forms and aten ops of `jaxpr`'s equations (nested ones too) to `result`."""
    for eqn in jaxpr.eqns:
        op = aten or str(eqn.source_info.name_stack).split("/")[0] or "(untagged)"
        name = eqn.primitive.name
        result.aten[op].add(name)
        form = doc_form(eqn)
        known = {_numbers.sub("N", f) for f in result.forms[name]}
        if _numbers.sub("N", form) not in known and len(result.forms[name]) < MAX_FORMS:
            result.forms[name].append(form)
        for key, value in eqn.params.items():
            if key == "update_jaxpr":  # scatter's combiner: lax rebuilds it, it is never rendered
                continue
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, (ClosedJaxpr, Jaxpr)):
                    record(result, sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub, op)


class _DocEmitter(Flat):
    """Renders for the document: nested functions and constants appear by name only."""

    def __init__(self) -> None:
        self.count = 0

    def constant(self, value: Any, hint: str) -> ast.expr:
        return ast.Name("const", ast.Load())

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        return ast.Name(hint if hint.isidentifier() else "body", ast.Load())

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        return [ast.Name(f"{hint}_out{i}", ast.Load()) for i in range(len(jaxpr.jaxpr.outvars))]


def doc_form(eqn: Any) -> str:
    """How `eqn` renders, its operands named `x`, `y`, `z`, ..."""
    names = itertools.chain("xyzwuvpqrst", (f"a{i}" for i in itertools.count()))
    args = [ast.Name(next(names), ast.Load()) for _ in eqn.invars]
    text = ast.unparse(render_eqn(eqn, args, _DocEmitter()))
    return text if len(text) <= MAX_FORM_LENGTH else text[: MAX_FORM_LENGTH - 1] + "…"


def registered_aten_ops() -> tuple[list[str], list[str]]:
    """The aten ops and torch functions torchax registers a lowering for."""
    from torchax.ops import ops_registry

    aten = sorted({str(op) for op in ops_registry.all_aten_ops})
    functions = sorted({getattr(f, "__name__", str(f)) for f in ops_registry.all_torch_functions})
    return aten, functions


def markdown(result: Survey) -> str:
    aten_ops, functions = registered_aten_ops()
    lines = [
        "# Operations: what each primitive renders as",
        "",
        "Generated by `tests/fuzzing/optable.py` from the cases in `tests/fuzzing/catalog.py`; do not",
        "edit by hand.  Each case is a small torch function traced with `jaxside.tracing.capture`; every",
        "equation of every jaxpr (sub-jaxprs included) is rendered by `jaxside.render.rules.render_eqn`,",
        "re-traced, and compared with the original (primitive, params, operand wiring, output types),",
        "then run on random inputs (infinities, NaN, -0.0 and a denormal among them) and compared",
        "bit for bit.  *tested* says that held for every equation of that primitive the cases made.",
        "",
        "Forms below name the operands `x`, `y`, `z`, ...; `body` is a nested function the",
        "rendering emits for a sub-jaxpr.  A primitive has several forms when the idiomatic one is",
        "exact only for some operands (`a @ b` for a plain matmul, `lax.dot_general` otherwise).",
        "",
        "## Primitives",
        "",
        TABLE_HEADER,
        "| --- | --- | --- |",
    ]
    for name in sorted(result.forms):
        tested = "yes" if name in result.tested else "no"
        lines.append(f"| `{name}` | {forms_cell(result.forms[name])} | {tested} |")
    lines += [
        "",
        "Known limits of exactness, by design (see `render/rules/`):",
        "",
        "- A `jit` renders as the `jnp`/`jax.nn`/`lax` call that staged it (`jnp.where`, `jax.nn.silu`,",
        "  `lax.fft`) when tracing that call on the same operand types gives the same equation;",
        "  otherwise as `jax.jit(body)(...)`, whose name may differ from the original's.",
        "- A `custom_jvp_call` renders as the function that defined it, found by its name and",
        "  source location; a private one (`jax._src.numpy.linalg._det`) is called by its private",
        "  path, because only that function carries its derivative rule.",
        "- Identity `reshape`/`broadcast_in_dim`/`transpose`/`convert_element_type`/`squeeze`",
        "  equations render as their operand: jax stages nothing for them either.",
        "- Primitives with no public function that binds them alone (`platform_index`, `cond`,",
        "  `custom_linear_solve`, `fft`, `cholesky`, `svd`, ...) render as `<primitive>.bind(...)`,",
        "  jaxpr params rebuilt with `jax.make_jaxpr`.",
        "",
        "## Rewrites: the same bits under `jax.jit`, not the same equation",
        "",
        "An export promises what torchax computed, bit for bit under `jax.jit`.  These forms",
        "re-trace to other equations than the ones they render, and are exact for the reason given;",
        "`tests/fuzzing/rewrites.py` proves each on jitted outputs with -0.0, NaN, +-inf and",
        "denormals among the inputs (`jaxside.render.rules.REWRITES` is the list; a rule that takes one",
        "says so, and the fuzzer then holds that program to its bits alone).",
        "",
        "| rewrite | why it is exact |",
        "| --- | --- |",
        *[f"| `{name}` | {_cell(why)} |" for name, why in REWRITES.items()],
        "",
        "## Idioms: runs of equations written as the `jnp` expression that stages them",
        "",
        "`jaxside.render.rules.idioms` replaces a run of equations by one expression when tracing that",
        "expression stages the very same equations, wired the same way (checked each time, never",
        "assumed), and nothing else reads the values made inside the run.  So these are exact in",
        "the strict sense, the export re-tracing to the same primitives and params, except where a row",
        "names a rewrite (above): there the expression traced and matched is the reference, and the one",
        "written computes its bits under jit.  An idiom may have several results (`q, k, v =",
        "jnp.split(...)`): the export joins them in one statement only when they come from one torch",
        "expression.",
        "",
        "| run ends in | written as |",
        "| --- | --- |",
        *[f"| {names} | {_cell(' '.join((fn.__doc__ or '').split()))} |" for names, fn in _idioms()],
        "",
        "## The catalogue: library functions written as themselves",
        "",
        "`jaxside.render.rules.catalogue.CATALOGUE` lists the public `jax.nn`, `jax.numpy` and",
        "`jax.random` functions that have a torch counterpart.  None of their equations is written",
        "down here: each is recognised by what it stages, found by tracing the function itself (so a",
        "new jax release moves the patterns with it).  A function that stages one `jit` is the `jit`",
        "rule's known call (`render/rules/known_calls.py`, draws in `render/rules/draw_calls.py`); one",
        "that stages a run of plain equations is proposed for each equation of the primitive its run",
        "ends in and matched like any idiom (exact: the export re-traces to the same equations).",
        "`make bench` prints how many an export writes by name (row `8 catalogue`).",
        "",
        "| function | torch | written | run ends in |",
        "| --- | --- | --- | --- |",
        *[f"| `{e.path}` | {_cell(e.torch)} | {'<br>'.join(f'`{_cell(c)}`' for c in e.calls)} | "
          f"{', '.join(f'`{t}`' for t in sorted(terminals()) if e in ending_in(t)) or '(one equation)'} |"
          for e in CATALOGUE],
        "",
        "## Aten ops and the primitives they produced",
        "",
        "Nested primitives (inside a `jit` body, say) are listed under the aten op that made the",
        "outer equation.",
        "",
        "| aten op | primitives |",
        "| --- | --- |",
    ]
    for op in sorted(result.aten):
        lines.append(f"| `{op}` | {', '.join(f'`{p}`' for p in sorted(result.aten[op]))} |")
    seen_ops = {op.removeprefix("aten::").split(".")[0] for op in result.aten}
    untouched = [op for op in aten_ops if op.removeprefix("aten.").split(".")[0] not in seen_ops]
    lines += [
        "",
        "## Coverage of torchax's lowerings",
        "",
        f"torchax registers {len(aten_ops)} aten ops and {len(functions)} torch functions.  The",
        f"catalog's {len(CASES)} cases reached {len(result.aten)} of them (some through torch's",
        "decompositions).  Registered ops no case reached (their primitives are among those above",
        "whenever they lower to the same jax functions):",
        "",
        ", ".join(f"`{op}`" for op in untouched),
        "",
        "Cases torchax could not trace (its limitations, not jaxside's):",
        "",
    ]
    lines += [f"- `{name}`: {_cell(reason)}" for name, reason in sorted(result.not_traced.items())]
    if result.failed:
        lines += ["", "Cases whose rendering failed the check:", ""]
        lines += [f"- `{name}`: {_cell(reason)}" for name, reason in sorted(result.failed.items())]
    return "\n".join(lines) + "\n"


def _idioms() -> list[tuple[str, Any]]:
    """Each pattern of `render.rules.idioms`, with the primitives that end its runs."""
    by_fn: dict[Any, list[str]] = {}
    for name, fn in PATTERNS.items():
        by_fn.setdefault(fn, []).append(f"`{name}`")
    return [(", ".join(names), fn) for fn, names in by_fn.items()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def forms_cell(forms: list[str]) -> str:
    """A primitive's forms as its table cell."""
    return "<br>".join(f"`{_cell(form)}`" for form in forms)


def documented(path: Path = DOC) -> dict[str, bool]:
    """The primitives `docs/ops.md` lists, and whether it says they are tested."""
    return {name: tested for name, (_, tested) in documented_rows(path).items()}


def documented_rows(path: Path = DOC) -> dict[str, tuple[str, bool]]:
    """The primitives `docs/ops.md` lists, each with its forms cell and whether it is tested."""
    rows: dict[str, tuple[str, bool]] = {}
    in_table = False
    for line in path.read_text().splitlines():
        if line == TABLE_HEADER:
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = (" | ".join(cells[1:-1]), cells[-1] == "yes")
    return rows


def main() -> int:
    result = survey()
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(markdown(result))
    print(f"wrote {DOC}: {len(result.forms)} primitives, {len(result.tested)} tested, "
          f"{len(result.not_traced)} cases torchax could not trace", file=sys.stderr)
    return 0 if not result.failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
