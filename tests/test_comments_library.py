"""Comments written into a library's model file (timm's ConvNeXt, issue 35): statements under a
flag (`if downsample:` and its body) in a def of two forms, counted, leave the file's code as it was."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from jaxside.render.comments import annotate_file, same_code
from jaxside.render.source import read_source

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm is not installed")


def test_convnext_atto_comments_keep_timms_code():
    import torch

    from jaxside.render.lower import lower
    from jaxside.tracing import capture

    importlib.import_module("benchmarks.zoo_shim")  # a stand-in torchvision, imported before timm
    timm = importlib.import_module("timm")
    convnext = importlib.import_module("timm.models.convnext")

    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False).eval()
    trace = capture(model, torch.randn(1, 3, 64, 64))
    out = annotate_file(lower(trace), convnext.__file__)
    assert same_code(read_source(convnext.__file__), out)
    # the statement under the flag is one comment line per line of it, the count on its first
    assert "        # if downsample:\n        #     downsample_x = " in out
    assert "# jax: def convnext_stage_forward(params, x, *, downsample=True, config)  ×4" in out


def test_comments_that_would_break_the_file_are_one_line_exit_3_and_nothing_printed(
    tmp_path, capsys, monkeypatch
):
    file = tmp_path / "model.py"
    file.write_text("import torch\n\n\ndef f(x):\n    return x * 2.0\n\n\ndef example():\n"
                    "    return f, (torch.ones(2),)\n", encoding="utf-8")
    from jaxside.annotate.cli import main

    def breaking(source_map, notes, **_):  # a writer with the bug of issue 35
        return source_map.source.replace("    return x * 2.0\n", "    # y = x * 2.0\n    y  ×3\n")

    monkeypatch.setattr("jaxside.render.comments.place", breaking)
    assert main(["-q", str(file)]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: {file}:6: JAX comments here: a comment would break the code")
