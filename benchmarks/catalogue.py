"""Row 8: the catalogue's coverage, the library functions an export writes as themselves.

Each entry of `render.rules.catalogue.CATALOGUE` (public `jax.nn` / `jax.numpy` / `jax.random`
functions with a torch counterpart) is called in a JAX function on its probe operands, traced
with `capture` and exported as `annotate --export` writes it; the entry is recognised when its
def writes the function by name (`jax.nn.gelu(x, approximate=False)`), not the equations it
stages (`jnp.copy(0.5 * x * lax.erfc(...))`).  The unrecognised are listed.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import tempfile
from pathlib import Path

from benchmarks._common import Result

ROW = "8 catalogue"
TARGET = 1.0
"""Target: every catalogued function recognised."""


def recognised() -> list[tuple[str, str, bool]]:
    """(path, the entry's call, whether the export writes it by name) for every entry."""
    import jax
    import jax.numpy as jnp

    from jaxside.render.lower import lower
    from jaxside.render.module import render_program
    from jaxside.render.rules.catalogue import CATALOGUE
    from jaxside.tracing import capture

    def operands(entry):  # noqa: ANN001, ANN202
        return [jax.random.key(0) if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
                else jnp.zeros(shape, dtype) for shape, dtype in entry.probe]

    source = "import jax\nimport jax.numpy as jnp\n\n" + "".join(
        f"def call_{i}({', '.join(f'_{j}' for j in range(len(entry.probe)))}):\n"
        f"    return {entry.calls[0].format(**dict(entry.filled))}\n\n" for i, entry in enumerate(CATALOGUE))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "catalogue_calls.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("catalogue_calls", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found = []
        for i, entry in enumerate(CATALOGUE):
            trace = capture(getattr(module, f"call_{i}"), *operands(entry))
            text = render_program(lower(trace), source=source)
            body = next(ast.unparse(node) for node in ast.parse(text).body
                        if isinstance(node, ast.FunctionDef) and node.name == f"call_{i}")
            found.append((entry.path, entry.calls[0].format(**dict(entry.filled)), entry.path + "(" in body))
    sys.modules.pop("catalogue_calls", None)
    return found


def run(smoke: bool = False) -> list[Result]:
    found = recognised()
    hits = sum(ok for _, _, ok in found)
    share = hits / len(found)
    missing = ", ".join(path for path, _, ok in found if not ok)
    verdict = "smoke" if smoke else ("ok" if share >= TARGET else "MISSED")
    return [Result(ROW, "functions recognised / catalogued", f"{hits}/{len(found)}",
                   missing and f"not: {missing}", share, f">= {TARGET:.0%}", verdict)]


if __name__ == "__main__":
    for _, code, ok in recognised():
        print(f"{'yes' if ok else 'NO '}  {code}")
