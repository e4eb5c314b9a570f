"""`annotate` end to end through `main([...])`: where output goes, the flags, files as users have them."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from html_rows import rows

import jaxside.tracing._progress
from jaxside.annotate.cli import main
from jaxside.annotate.seal import unsealed
from jaxside.render.comments import same_code

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"


class Renderers:
    """Stands in for lowering and the renderers (tested on their own), recording the traces they are given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.traces: list = []
        self.exported: list = []
        self.export_code = 0
        monkeypatch.setattr("jaxside.render.lower.lower", self.lower)
        monkeypatch.setattr("jaxside.render.comments.annotate_file", self.comments)
        monkeypatch.setattr("jaxside.render.html.side_by_side", self.html)
        monkeypatch.setattr("jaxside.annotate.results.run_export", self.export)

    def lower(self, trace, retrace=None, progress=None):
        return types.SimpleNamespace(trace=trace)

    def comments(self, program, path, *, shapes=False):
        trace = program.trace
        self.traces.append(trace)
        # `# jax: ` marks annotate's own output, which -o replaces without --force.
        return f"# jax: {Path(path).name}: {trace.entry}, {len(trace.jaxpr.jaxpr.eqns)} equations\n"

    def html(self, program, path, *, shapes=False):
        self.traces.append(program.trace)
        return f"<html>{program.trace.entry}</html>\n"

    def export(self, options, program, entry, say):
        self.exported.append((options, entry, program.trace))
        return self.export_code


@pytest.fixture
def renderers(monkeypatch):
    return Renderers(monkeypatch)


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


CHATTY = '''\
import dataclasses

import torch
from torch import nn

print("loading model.py")


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: tuple | None = None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, use_cache=True):
        print("tracing forward")
        y = self.proj(x)
        if use_cache:
            return Output(y, (x, y))
        return {"logits": y, "extra": (y * 2, 3)}


def example():
    return Net(), (torch.randn(2, 4),)
'''


def test_user_prints_go_to_stderr_and_stdout_carries_only_the_result(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    assert main([str(file)]) == 0
    out, err = capsys.readouterr()
    assert out == f"# jax: model.py: Net, {len(renderers.traces[0].jaxpr.jaxpr.eqns)} equations\n"
    assert err.splitlines() == [
        "annotate: loading torch and jax",  # before the heavy imports: the first thing on screen
        "annotate: importing model.py",
        "loading model.py",
        "annotate: building the model and its inputs",
        "annotate: tracing Net",
        "tracing forward",
        f"annotate: rendering {len(renderers.traces[0].jaxpr.jaxpr.eqns)} equations",
    ]
    assert main([str(file), "-q"]) == 0
    assert capsys.readouterr().err == "loading model.py\ntracing forward\n"


def test_outputs_of_any_pytree_shape_and_static_python_flags(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    assert main([str(file)]) == 0
    assert main([str(file), "--kwargs", "dict(use_cache=False)"]) == 0
    as_dataclass, as_dict = renderers.traces
    assert [path for path, _ in as_dataclass.outputs] == ["['logits']", "['hidden'][0]", "['hidden'][1]"]
    assert [path for path, _ in as_dict.outputs] == ["['logits']", "['extra'][0]"]
    assert list(as_dict.static_outputs.values()) == [3]
    # The flag stayed a Python constant: no jaxpr input for it.
    assert [i.name for i in as_dict.inputs if i.kind == "arg"] == ["x"]


def test_output_file_written_only_when_changed(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    target = tmp_path / "out" / "model_annotated.py"
    target.parent.mkdir()
    assert main([str(file), "-o", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(f"annotate: wrote {target}\n")
    written = target.read_text()
    os.utime(target, (0, 0))
    assert main([str(file), "-o", str(target)]) == 0
    assert capsys.readouterr().err.endswith(f"annotate: {target} unchanged\n")
    assert target.stat().st_mtime == 0 and target.read_text() == written


def test_html_alone_writes_only_the_page(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    page = tmp_path / "view.html"
    assert main([str(file), "--html", str(page)]) == 0
    assert capsys.readouterr().out == "" and unsealed(page.read_bytes()) == b"<html>Net</html>\n"


def test_export_and_check_go_to_the_exporter_with_its_exit_code(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    renderers.export_code = 1  # a --check mismatch
    flags = ["--export", "--check", "--rtol", "1e-4", "--kwargs", "dict(use_cache=False)"]
    assert main([str(file), *flags]) == 1
    ((options, entry, trace),) = renderers.exported
    assert options.jax.check and options.jax.rtol == 1e-4 and entry.kwargs == {"use_cache": False}
    assert type(entry.fn).__name__ == "Net" and trace.entry == "Net"
    assert capsys.readouterr().out == ""


def test_the_stand_ins_flags_for_real(tmp_path, capsys):
    """What `Renderers` stands in for, run for real on the same model: the comments on stdout, -o and
    --html here; --export --check for both output shapes (a dataclass, and a dict with a Python
    constant) below."""
    file = write(tmp_path / "model.py", CHATTY)
    assert main([str(file), "-q"]) == 0
    out = capsys.readouterr().out
    linear = 'y = x @ params["proj"]["weight"].T + params["proj"]["bias"]'
    assert f"        y = self.proj(x)  # {linear}\n" in out
    assert "    def forward(self, x, use_cache=True):  # jax: def forward(params, x)\n" in out
    target, page = tmp_path / "annotated.py", tmp_path / "view.html"
    assert main([str(file), "-q", "-o", str(target), "--html", str(page)]) == 0
    assert unsealed(target.read_bytes()).decode("utf-8") == out  # the file is stdout's text, sealed
    (proj,) = [r for r in rows(page.read_text(encoding="utf-8")) if r.cells[1:2] == ["y = self.proj(x)"]]
    assert proj.cell("j").startswith('y = x @ params["proj"]["weight"].T'), proj.cell("j")


@pytest.mark.parametrize("kwargs", [
    "dict(use_cache=False)",
    "dict(use_cache=True)",
])
def test_export_and_check_for_real(tmp_path, capsys, kwargs):
    file = write(tmp_path / "model.py", CHATTY)
    exported = tmp_path / "model_jax.py"
    code = main([str(file), "-q", "--export", "-o", str(exported), "--check", "--kwargs", kwargs])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "max abs" in err and exported.read_text(encoding="utf-8").startswith('"""JAX for')


def test_watch_records_a_helper_module(tmp_path, capsys, renderers):
    write(tmp_path / "lib" / "helpers.py", "def gate(x):\n    return x * x.sigmoid()\n")
    file = write(tmp_path / "project" / "model.py", f'''\
        import sys
        sys.path.insert(0, {str(tmp_path / "lib")!r})
        import torch
        from helpers import gate

        def block(x):
            return gate(x) + 1
    ''')
    base = [str(file), "--entry", "block", "--inputs", "torch.ones(3)"]
    assert main(base) == 0
    assert main([*base, "--watch", str(tmp_path / "lib" / "helpers.py")]) == 0
    assert main([*base, "--watch", "helpers"]) == 0  # a module name FILE can import
    unwatched, *watched = renderers.traces
    assert [c.function for c in unwatched.root.children] == []
    for trace in watched:
        assert [c.function for c in trace.root.children] == ["gate"]


def test_a_module_imported_from_files_own_directory_is_recorded(tmp_path, capsys, renderers):
    write(tmp_path / "helpers.py", "def gate(x):\n    return x * x.sigmoid()\n")
    file = write(tmp_path / "model.py", '''\
        import torch
        from helpers import gate

        def block(x):
            return gate(x) + 1
    ''')
    assert main([str(file), "--entry", "block", "--inputs", "torch.ones(3)"]) == 0
    assert [c.function for c in renderers.traces[0].root.children] == ["gate"]


def test_progress_is_reported_on_stderr_for_long_traces(tmp_path, capsys, renderers, monkeypatch):
    monkeypatch.setattr(jaxside.tracing._progress, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(jaxside.tracing._progress, "PROGRESS_EVERY", 0.0)
    assert main([str(SAMPLES / "mlp.py")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("annotate: tracing the root module (MLP): ") for line in lines)
    assert any(line.startswith("annotate: tracing fc2 (Linear): ") for line in lines)
    assert any(line.startswith("annotate: recording: ") for line in lines)


def test_package_modeling_file_with_relative_imports(tmp_path, capsys, renderers):
    write(tmp_path / "mylib" / "__init__.py", "")
    write(tmp_path / "mylib" / "utils.py", '''\
        import torch

        def rotate_half(x):
            a, b = x.chunk(2, dim=-1)
            return torch.cat((-b, a), dim=-1)
    ''')
    write(tmp_path / "mylib" / "models" / "__init__.py", "from . import modeling\n")
    file = write(tmp_path / "mylib" / "models" / "modeling.py", '''\
        import torch
        from torch import nn

        from ..utils import rotate_half

        print("modeling.py ran")


        class Rotary(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.proj = nn.Linear(dim, dim)

            def forward(self, x):
                return self.proj(rotate_half(x))
    ''')
    before = file.read_bytes()
    assert main([str(file), "-q", "--entry", "Rotary(8)", "--inputs", "torch.randn(2, 8)"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# jax: modeling.py: Rotary") and err == "modeling.py ran\n"
    (trace,) = renderers.traces
    assert trace.root.function == "Rotary.forward" and trace.root.file == str(file)
    assert file.read_bytes() == before and "mylib" not in sys.modules


def test_abstract_70b_llama_annotates_without_allocating_a_weight(capsys, monkeypatch):
    import jaxside.annotate.loading
    import jaxside.render.comments

    entries, traces = [], []
    find_entry, annotate_file = jaxside.annotate.loading.find_entry, jaxside.render.comments.annotate_file

    def recording_find_entry(*args, **kwargs):
        entries.append(find_entry(*args, **kwargs))
        return entries[-1]

    def recording_annotate_file(program, *args, **kwargs):
        traces.append(program.trace)
        return annotate_file(program, *args, **kwargs)

    monkeypatch.setattr(jaxside.annotate.loading, "find_entry", recording_find_entry)
    monkeypatch.setattr(jaxside.render.comments, "annotate_file", recording_annotate_file)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = main([str(SAMPLES / "llama_model.py"), "--abstract", "--entry", 'build("70B")',
                 "--inputs", "(torch.zeros(1, 8, dtype=torch.long), torch.arange(8))"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (entry,), (trace,) = entries, traces
    model = entry.fn
    assert len(model.layers) == 80 and sum(p.numel() for p in model.parameters()) > 68e9
    tensors = [*model.parameters(), *model.buffers(), *entry.args]
    assert all(t.device.type == "meta" for t in tensors)  # meta tensors have no storage at all
    # Every weight is a jaxpr input (a shape); none was baked in as a constant.
    assert len(trace.inputs) == len(tensors)
    assert sum(getattr(c, "nbytes", 0) for c in trace.jaxpr.consts) < 1e6
    assert "×80" in out  # the 80 layers, annotated once with their count
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kb < 2e6, f"peak memory grew by {grown_kb / 1e6:.1f} GB"


def test_python_m_annotate_exits_with_the_code(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "jaxside", str(tmp_path / "absent.py")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: {tmp_path / 'absent.py'}: no such file; give the path of the torch .py file to annotate\n"
    )


def test_annotates_the_samples_for_real(capsys):
    for sample in ("seed_example", "mlp", "llama_model"):
        file = SAMPLES / f"{sample}.py"
        before = file.read_bytes()
        assert main([str(file)]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert same_code(file.read_text(encoding="utf-8"), out) and file.read_bytes() == before
        assert "  # jax: def " in out or "# jax: def " in out, out[:400]
        assert torch.zeros(1).device.type == "cpu"


# -- conventions: -o -, -q, -v, --version, --help -------------------------------------------------


def test_dash_output_is_stdout(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    assert main([str(file), "-q", "-o", "-"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("# jax: model.py: Net") and not (tmp_path / "-").exists()


def test_verbose_prints_each_phase_with_its_time(tmp_path, capsys, renderers):
    file = write(tmp_path / "model.py", CHATTY)
    assert main([str(file), "-v"]) == 0
    phases = [line for line in capsys.readouterr().err.splitlines() if line.startswith("annotate: ")]
    assert [line.rsplit(" (", 1)[0] for line in phases] == [
        "annotate: loading torch and jax", "annotate: importing model.py",
        "annotate: building the model and its inputs", "annotate: tracing Net",
        f"annotate: rendering {len(renderers.traces[0].jaxpr.jaxpr.eqns)} equations",
    ]
    assert all(line.endswith(" s)") for line in phases)


def test_quiet_and_verbose_exclude_each_other(tmp_path, capsys):
    assert main([str(tmp_path / "model.py"), "-q", "-v"]) == 2
    assert capsys.readouterr().err == (
        "error: argument -v/--verbose: not allowed with argument -q/--quiet; see annotate --help\n"
    )


def test_version(capsys):
    from jaxside.annotate import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"annotate (jaxside {__version__})\n"


def test_help_names_review_exit_codes_and_the_docs(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "annotate review TORCH_FILE PORT_FILE" in text
    assert "130 interrupted" in text and "123 internal error" in text
    assert "--force" in text and "- is stdout" in text and "-q, --quiet" in text


def test_first_status_line_comes_before_torch_is_imported(tmp_path):
    # A torch that cannot be imported: whatever the run does next, its first line is already out.
    write(tmp_path / "site" / "torch" / "__init__.py", "raise ImportError('torch is slow to import')\n")
    model = write(tmp_path / "model.py", "def example():\n    return abs, (1,)\n")
    result = subprocess.run(
        [sys.executable, "-m", "jaxside", str(model)], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])},
    )
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == "annotate: loading torch and jax"


# -- the status display ---------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_on_a_terminal_is_one_line_redrawn_and_cleared(monkeypatch):
    from jaxside.annotate.status import Status

    screen = Terminal()
    status = Status(screen)
    assert status.live
    status.modules = {"": 0, "layers.0": 1, "layers.1": 2, "norm": 3}
    status.phase("tracing Net")
    status.progress(jaxside.tracing.Progress("tracing", 2.5, 1234, "layers.1", "Block"))
    print("the user's print", file=status.writer())
    status.say("wrote out.py")
    status.close()
    text = screen.getvalue()
    assert "\n" not in text.split("the user's print")[0]  # the live line never scrolls
    assert "\rannotate: tracing layers.1 (Block): 1,234 equations, module 3 of 4  " in text
    # Every line that stays was written over a cleared live line, and the run ends with it cleared.
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    assert lines == ["the user's print", "annotate: wrote out.py", ""]


def test_status_elsewhere_is_plain_lines():
    from jaxside.annotate.status import Status

    log = io.StringIO()
    status = Status(log)
    assert not status.live
    status.phase("tracing Net")
    status.started -= 5  # the run's clock, not the capture's (3.0 s), on every line
    status.progress(jaxside.tracing.Progress("recording", 3.0, 99))
    status.close()
    assert log.getvalue() == "annotate: tracing Net\nannotate: recording: 99 equations, 5.0 s\n"


def test_a_long_phase_tells_its_steps_after_two_seconds_then_once_a_second(monkeypatch):
    from jaxside.annotate import status as status_module

    clock = [100.0]
    monkeypatch.setattr(status_module.time, "monotonic", lambda: clock[0])
    log = io.StringIO()
    status = status_module.Status(log)
    status.phase("rendering 13,463 equations")
    for step in range(1, 31):  # a step every 0.25 s for 7.5 s
        clock[0] += 0.25
        status.step(f"def {step} of 30")
    status.close()
    assert log.getvalue().splitlines() == [
        "annotate: rendering 13,463 equations",
        "annotate: rendering 13,463 equations: def 8 of 30, 2.0 s",
        "annotate: rendering 13,463 equations: def 12 of 30, 3.0 s",
        "annotate: rendering 13,463 equations: def 16 of 30, 4.0 s",
        "annotate: rendering 13,463 equations: def 20 of 30, 5.0 s",
        "annotate: rendering 13,463 equations: def 24 of 30, 6.0 s",
        "annotate: rendering 13,463 equations: def 28 of 30, 7.0 s",
    ]


def test_a_generic_export_tells_each_retrace(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "jaxside", str(ROOT / "samples" / "mlp.py"), "--export", "-o",
         str(tmp_path / "out.py")], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    # Both sizes at once: x's width is a Linear's in_features, torch refuses it (no lowering);
    # then the batch alone follows.
    first = lines.index("annotate: sizes: trace 1 at x [16, 64]")
    assert lines[first + 1:first + 3] == ["annotate: sizes: trace 2 at x [16, 32]",
                                          "annotate: sizes: lowering trace 2 (30 equations)"]
    assert lines[-2] == "annotate: writing the results"

