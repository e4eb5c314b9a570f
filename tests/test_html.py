"""The HTML view: self-contained, aligned, and rendered by a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from render.comments import Note, SourceMap
from render.html import render_page

SOURCE = textwrap.dedent('''\
    import torch


    def block(x, w):
        h = x @ w
        return torch.sin(h) + h
''')


def page() -> str:
    notes = {4: Note(["jax: def block_fn(x, w)"], 2), 5: Note(["h = x @ w"], 2),
             6: Note(["sin_h = jnp.sin(h)", "out = sin_h + h"], 2)}
    return render_page(SourceMap(SOURCE), notes, {"block_fn": (4, 6)}, "block.py in JAX")


def test_page_is_self_contained_and_aligned():
    text = page()
    assert "http://" not in text and "https://" not in text and "<link" not in text
    # One row per torch line, the JAX of a line in the same row.
    assert text.count(" data-line=") == len(SOURCE.splitlines())
    assert '<td class=torch>    h = x @ w</td><td class=jax>h = x @ w<span class="count">  ×2</span>' in text


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(chromium() is None and not os.environ.get("CI"), reason="no chromium here")
def test_chromium_renders_both_columns(tmp_path: Path):
    from PIL import Image

    assert chromium(), "CI must have Debian's chromium (make test installs it)"
    html_file = tmp_path / "view.html"
    html_file.write_text(page(), encoding="utf-8")
    shot = tmp_path / "view.png"
    subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,400",
         f"--screenshot={shot}", html_file.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    image = Image.open(shot).convert("RGB")
    width, height = image.size
    pixels = image.load()

    def inked(x0: int, x1: int, color) -> int:
        return sum(color(pixels[x, y]) for x in range(x0, x1, 2) for y in range(0, height, 2))

    def dark(p):
        return sum(p) < 250

    def jax_blue(p):  # the JAX column's text colour, #0a3069
        return p[2] > p[0] + 40 and sum(p) < 450

    assert inked(40, width // 2, dark) > 200, "the torch column rendered no text"
    assert inked(width // 2 + 40, width, jax_blue) > 200, "the JAX column rendered no text"
