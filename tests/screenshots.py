"""The HTML view's screenshots in docs/, regenerated in headless Chromium: `make screenshots`.

docs/llama_view.png: the Llama sample's TransformerBlock beside its JAX, a statement hovered.
docs/hf_llama_view.png, docs/hf_llama_view_dark.png: transformers' Llama (tests/models/run_hf_llama.py)
as its page opens, light and dark.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from browser import chrome

from jaxside.annotate.loading import load_file
from jaxside.render.html import side_by_side
from jaxside.render.lower import lower
from jaxside.tracing import Capture

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def page(example: Path, folder: Path) -> Path:
    """The view of the file holding `example()`'s entry, written into `folder`."""
    model, args, *kwargs = load_file(str(example)).example()
    torch.manual_seed(0)
    trace = Capture()(model, *args, **(kwargs[0] if kwargs else {}))
    target = folder / f"{example.stem}.html"
    target.write_text(side_by_side(lower(trace)), encoding="utf-8")
    return target


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="jaxside-shots-") as folder:
        sample = page(ROOT / "samples" / "llama_model.py", Path(folder))
        library = page(ROOT / "tests" / "models" / "run_hf_llama.py", Path(folder))
        with chrome(width=1400, height=1000) as driver:
            driver.get(sample.as_uri())
            driver.execute_script("""
                const def = document.getElementById('def-transformer_block_forward').closest('tr');
                def.scrollIntoView({block: 'start'}); scrollBy(0, -40);
                const st = def.nextElementSibling.querySelector('.st[data-site]');
                st.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));""")
            driver.save_screenshot(str(DOCS / "llama_view.png"))
        for dark, name in ((False, "hf_llama_view.png"), (True, "hf_llama_view_dark.png")):
            with chrome(width=1400, height=1000, dark=dark) as driver:
                driver.get(library.as_uri())
                driver.save_screenshot(str(DOCS / name))
    print("wrote", *(DOCS / n for n in ("llama_view.png", "hf_llama_view.png", "hf_llama_view_dark.png")),
          file=sys.stderr)


if __name__ == "__main__":
    main()
