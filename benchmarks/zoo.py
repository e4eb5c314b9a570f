"""``python -m benchmarks.zoo`` (``make zoo``): third-party models through annotate, one table.

For each model of `benchmarks.zoo_models` (those whose library is installed), in a fresh process
as a user would run it: comments mode (``annotate FILE``), then ``annotate FILE --export -o
OUT --check``; then the export is imported and run in another process where torch cannot be
imported, on the same params and inputs, and must give the same numbers as under --check.

    python -m benchmarks.zoo                 # every model
    python -m benchmarks.zoo llama bert      # some
    python -m benchmarks.zoo --subset        # the five tests/test_zoo.py runs

Columns: comments (ok, or the exit code), check (the largest error of any leaf against torch,
or the exit code), lines and defs of the export, seconds of the --export --check run, the
peak resident memory of the model's process, and the torch-free run. Exit status 1 if a row fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.readability import SHARE, plain, statements
from benchmarks.zoo_models import MODELS, SUBSET, Model

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600
_MAX_ABS = re.compile(r"max abs (\S+)")
BANNED = re.compile(r"jnp\.copy\(|lax\.(gather|scatter\w*|slice)\(|jax\.jit\(_")
"""What no export of the zoo may hold (issue 29): copies, gathers, scatters and slices spelled as
`lax` calls, and jitted private helpers."""
_LIBRARIES = {"transformers": "transformers", "timm": "timm", "x-transformers": "x_transformers"}


@dataclass
class Row:
    model: str
    library: str
    family: str
    comments: str = "-"
    check: str = "-"
    lines: int = 0
    defs: int = 0
    seconds: float = 0.0
    peak_mb: float = 0.0
    no_torch: str = "-"
    plain: str = "-"
    note: str = ""

    @property
    def ok(self) -> bool:
        checked = not self.check.startswith(("exit", "-")) and "MISMATCH" not in self.check
        return self.comments == "ok" and self.no_torch == "ok" and checked and self.plain.endswith("ok")


def available(model: Model) -> bool:
    return importlib.util.find_spec(_LIBRARIES[model.library]) is not None


def run_model(model: Model, workdir: Path) -> Row:
    """One model, in a worker process (for its own memory peak), then the torch-free run."""
    folder = workdir / model.name
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "benchmarks.zoo", "--worker", model.name, str(folder)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return Row(model.name, model.library, model.family, note=f"timed out after {TIMEOUT} s")
    result = folder / "row.json"
    if not result.exists():
        last = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return Row(model.name, model.library, model.family, note=f"worker failed: {last[0]}")
    row = Row(**json.loads(result.read_text()))
    if (folder / "run.pkl").exists():
        row.no_torch, note = _without_torch(folder, env)
        row.note = row.note or note
    return row


def _without_torch(folder: Path, env: dict[str, str]) -> tuple[str, str]:
    command = [sys.executable, "-m", "benchmarks.zoo", "--without-torch", str(folder)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode == 0:
        return "ok", ""
    return "FAILED", (done.stderr.strip().splitlines() or ["no output"])[-1]


# -- in the worker process -----------------------------------------------------------------------


def worker(name: str, folder: Path) -> None:
    """Comments mode, then --export --check, through annotate's own command line; then the
    export's params, inputs and outputs saved (as NumPy) for the torch-free run."""
    import resource

    from jaxside.annotate.cli import main

    model = next(m for m in MODELS if m.name == name)
    source = folder / f"{name}.py"
    source.write_text(model.source())
    row = Row(model.name, model.library, model.family)
    code, err = _annotate(main, [str(source), "-q", "-o", str(folder / "comments.py"), "--force"])
    row.comments = "ok" if code == 0 else f"exit {code}"
    row.note = "" if code == 0 else _error_line(err)
    export = folder / f"{name}_jax.py"
    start = time.perf_counter()
    code, err = _annotate(main, [str(source), "-q", "--export", "-o", str(export), "--force", "--check"])
    row.seconds = round(time.perf_counter() - start, 1)
    errors = [float(e) for e in _MAX_ABS.findall(err)]
    if code in (0, 1):
        row.check = (f"{max(errors):.1e}" if errors else "ok") + ("" if code == 0 else " MISMATCH")
        random = re.search(r"--check: (\d+) random", err)
        if random:
            row.check += f" ({random.group(1)} random)"
    else:
        row.check = f"exit {code}"
        row.note = row.note or _error_line(err)
    if export.exists():
        text = export.read_text()
        row.lines = text.count("\n")
        row.defs = len(re.findall(r"^\s*def ", text, re.MULTILINE))
        row.plain = readable(text)
        if code in (0, 1):
            _save_run(source, export, folder)
    row.peak_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    (folder / "row.json").write_text(json.dumps(asdict(row)))


def readable(text: str) -> str:
    """The export's share of plain statements (`benchmarks.readability`, issue 29: at least 95%), and
    ``ok``, or the forms no export may hold (`BANNED`)."""
    found = statements(text)
    share = sum(plain(s) for s in found) / max(len(found), 1)
    banned = sorted({match.group(0) for match in BANNED.finditer(text)})
    verdict = "ok" if share >= SHARE and not banned else "MISSED " + " ".join(banned)
    return f"{share:.0%} {verdict}".strip()


def _annotate(main: Any, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    return (lines or [err.strip().splitlines()[-1] if err.strip() else ""])[-1]


def _save_run(source: Path, export: Path, folder: Path) -> None:
    """The export's inputs and its result on them (under jit), as NumPy arrays in plain containers."""
    import inspect

    import jax
    import numpy as np
    import torch

    from jaxside.annotate.check import load_module, run_jitted, to_jax
    from jaxside.tracing import example_key, is_key, plain_output

    spec = importlib.util.spec_from_file_location(f"zoo_{source.stem}", source)
    assert spec is not None and spec.loader is not None
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    fn, args, *rest = user.example()
    module = load_module(export.read_text())
    entry = "forward" if isinstance(fn, torch.nn.Module) else fn.__name__
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    arguments = inspect.signature(target).bind(*args, **(rest[0] if rest else {})).arguments
    parameters = inspect.signature(getattr(module, entry)).parameters.values()
    names = [p.name for p in parameters if p.kind != p.KEYWORD_ONLY]  # not `config`: it defaults
    inputs: list[Any] = []
    if names[:2] == ["params", "state"]:
        inputs += list(module.load_params(fn))
    elif names[:1] in (["params"], ["state"]):
        loaded = module.load_params(fn)
        inputs.append(loaded[1] if names[0] == "state" and isinstance(loaded, tuple) else loaded)
    for name in names[len(inputs):]:
        inputs.append(to_jax(plain_output(arguments[name])) if name in arguments else example_key())
    result = run_jitted(getattr(module, entry), inputs)

    def numpy(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array):
            return "<key>" if is_key(leaf) else np.asarray(leaf)
        return leaf

    saved = {
        "entry": entry, "inputs": jax.tree_util.tree_map(numpy, inputs),
        "result": jax.tree_util.tree_map(numpy, result),
    }
    (folder / "run.pkl").write_bytes(pickle.dumps(saved))


# -- in the torch-free process -------------------------------------------------------------------


def without_torch(folder: Path) -> None:
    """Import the export where torch cannot be imported, run it on the saved inputs, compare."""
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    import jax
    import numpy as np

    saved = pickle.loads((folder / "run.pkl").read_bytes())
    export = next(folder.glob("*_jax.py"))
    namespace: dict[str, Any] = {"__name__": "zoo_export"}
    # dont_inherit: not this file's `from __future__ import annotations` (`Config` needs real types)
    exec(compile(export.read_text(), str(export), "exec", dont_inherit=True), namespace)
    inputs = jax.tree_util.tree_map(lambda x: jax.random.key(0) if isinstance(x, str) and x == "<key>" else x,
                                    saved["inputs"])
    result = jax.jit(namespace[saved["entry"]])(*inputs) if _all_arrays(saved["result"]) else (
        namespace[saved["entry"]](*inputs)
    )
    got, want = jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(saved["result"])
    if jax.tree_util.tree_structure(result) != jax.tree_util.tree_structure(saved["result"]):
        raise SystemExit("the export returned another structure than under --check")
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_array_equal(np.asarray(g), w)
        elif g != w:
            raise SystemExit(f"the export returned {g!r} where --check saw {w!r}")


def _all_arrays(tree: Any) -> bool:
    import jax
    import numpy as np

    return all(isinstance(leaf, np.ndarray) for leaf in jax.tree_util.tree_leaves(tree))


# -- the table -----------------------------------------------------------------------------------

_COLUMNS = [("model", 14), ("library", 14), ("family", 24), ("comments", 9), ("check", 22), ("lines", 6),
            ("defs", 5), ("seconds", 8), ("peak MB", 8), ("no torch", 9),
            ("plain", 10)]


def table(rows: list[Row]) -> str:
    header = " ".join(f"{name:<{width}}" for name, width in _COLUMNS)
    lines = [header, "-" * len(header)]
    for row in rows:
        values = [row.model, row.library, row.family, row.comments, row.check, row.lines or "-",
                  row.defs or "-", row.seconds or "-", row.peak_mb or "-", row.no_torch, row.plain]
        lines.append(" ".join(f"{str(v):<{w}}" for v, (_, w) in zip(values, _COLUMNS)))
    notes = [f"  {row.model}: {row.note}" for row in rows if row.note]
    return "\n".join(lines + (["", "notes:", *notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: all whose library is installed)")
    parser.add_argument("--subset", action="store_true", help="the models tests/test_zoo.py runs")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--without-torch", metavar="DIR", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        worker(options.worker[0], Path(options.worker[1]))
        return 0
    if options.without_torch:
        without_torch(Path(options.without_torch))
        return 0
    names = options.models or (SUBSET if options.subset else [m.name for m in MODELS])
    unknown = sorted(set(names) - {m.name for m in MODELS})
    if unknown:
        parser.error(f"no zoo model {', '.join(unknown)}; the zoo has {', '.join(m.name for m in MODELS)}")
    chosen = [m for m in MODELS if m.name in names]
    missing = sorted({m.library for m in chosen if not available(m)})
    if missing:
        print(f"zoo: skipping the models of {', '.join(missing)} (not installed; pip install -e '.[zoo]')",
              file=sys.stderr)
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jaxside-zoo-") as workdir:
        for model in (m for m in chosen if available(m)):
            rows.append(run_model(model, Path(workdir)))
            print(f"zoo: {model.name}: {rows[-1].check} ({rows[-1].seconds} s)", file=sys.stderr, flush=True)
    print(table(rows))
    print(f"\n{sum(r.ok for r in rows)} of {len(rows)} ok in {time.perf_counter() - start:.0f} s")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
