"""Row 7: how much of an export reads as JAX a person writes, and how long the Llama's is.

Per sample (each `samples/*.py` with an `example()` that is a torch model): the share of the
statements in the exported defs that are free of `lax` calls spelling out dimension numbers or
primitives (`lax.dot_general`, `lax.gather`, `*DimensionNumbers`, `<primitive>_p.bind`,
`jax.jit(helper)`, ...) and of noise from torch's defaults (`* 1.0`, `+ 0`, `0 + 1 *`).  Then the
Llama's def bodies (lines that are not blank, comments or docstrings) against the same count for
the hand-written port `samples/llama_port.py`.

Each export is the one `annotate --export` writes by default: sizes generic in the inputs, with
its shape guards.  Line counts depend on the line length, so the port is counted as `ruff format`
lays it out at the export's (`MODULE_WIDTH`, 88), not at the 100 columns it is written in.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from benchmarks._common import Result

ROW = "7 readability"
SHARE = 0.95
"""Target: the share of plain statements in every sample's export."""
LINES = 1.3
"""Target: the Llama export's body lines over the hand port's."""

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("mlp", "cnn", "rnn", "moe", "llama_model", "seed_example")
# Calls whose arguments are lax plumbing a person would not write (dimension numbers, primitives,
# private helpers), and the noise torch's defaults leave.  `lax.conv_general_dilated` with layout
# strings and `lax.reduce_window` are how people write convolutions and pooling in JAX: not counted.
LAX_PLUMBING = re.compile(
    r"lax\.(dot_general|gather|scatter\w*|broadcast_in_dim|pad|slice|select_n|dynamic_slice"
    r"|dynamic_update_slice)\(|DimensionNumbers|_p\.bind\(|jax\.jit\(_"
)
NOISE = re.compile(r"\* 1(\.0)?\b(?!\.)|(?<![\w.])1(\.0)? \*|\+ 0(\.0)?\b(?!\.)|(?<![\w.])0(\.0)? \+")


def _load(name: str):  # noqa: ANN202  (a sample module)
    path = ROOT / "samples" / f"{name}.py"
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(path):
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def statements(text: str) -> list[str]:
    """The simple statements of a module's defs (not `load_params` and its helpers), as source."""
    found: list[str] = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name not in ("load_params", "_lists", "_is_state"):
            for inner in ast.walk(node):
                docstring = isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Constant)
                simple = isinstance(inner, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr))
                if simple and not docstring:
                    found.append(ast.unparse(inner))
    return found


def plain(statement: str) -> bool:
    return not LAX_PLUMBING.search(statement) and not NOISE.search(statement)


def body_lines(text: str, skip: tuple[str, ...] = ("load_params", "_lists", "_is_state")) -> int:
    """Lines inside the module's top-level defs that hold code: no blanks, comments, docstrings."""
    tree = ast.parse(text)
    lines = text.splitlines()
    count = 0
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name in skip:
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        if not body:
            continue
        for line in lines[body[0].lineno - 1 : node.end_lineno]:
            if line.strip() and not line.strip().startswith("#"):
                count += 1
    return count


def export_sample(name: str) -> str:
    """What `annotate samples/<name>.py --export` writes."""
    from jaxside.render.lower import lower
    from jaxside.render.module import render_program
    from jaxside.tracing import Capture

    fn, args, *rest = _load(name).example()
    kwargs = rest[0] if rest else {}
    def retrace(resize: dict[str, tuple[int, ...]]):  # noqa: ANN202  (a Trace)
        return Capture(resize=resize)(fn, *args, **kwargs)

    program = lower(Capture()(fn, *args, **kwargs), retrace)
    return render_program(program, source=f"samples/{name}.py")


def formatted(text: str) -> str:
    """`text` as `ruff format` lays it out at the export's line length."""
    from jaxside.render.layout import MODULE_WIDTH

    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff), "format", "--isolated", "--line-length", str(MODULE_WIDTH), "-"]
    return subprocess.run(command, input=text, capture_output=True, text=True, check=True).stdout


def run(smoke: bool = False) -> list[Result]:
    results = []
    texts = {}
    for name in SAMPLES[:2] if smoke else SAMPLES:
        texts[name] = export_sample(name)
        found = statements(texts[name])
        count = sum(plain(s) for s in found)
        share = count / len(found)
        verdict = "smoke" if smoke else ("ok" if share >= SHARE else "MISSED")
        results.append(Result(ROW, f"plain statements, {name}", f"{count}/{len(found)}", "", share,
                              f">= {SHARE:.0%}", verdict))
    if not smoke:
        port = body_lines(formatted((ROOT / "samples" / "llama_port.py").read_text()))
        ours = body_lines(texts["llama_model"])
        ratio = ours / port
        results.append(Result(ROW, "Llama body lines vs llama_port.py", f"{ours} lines", f"{port} lines",
                              ratio, f"<= {LINES}x", "ok" if ratio <= LINES else "MISSED"))
    return results
