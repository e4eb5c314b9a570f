"""The review's page: port lines beside their torch lines, a legend, and the first divergence, in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import chrome, in_view, needs_browser

from jaxside.annotate.cli import main
from jaxside.annotate.review.page import _aligned

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _line(path: Path, text: str) -> int:
    (number,) = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line]
    return number


def test_rows_follow_the_port_with_each_torch_line_once():
    # torch 10 paired with port 3 and 5; torch 12 with port 4 and another file's line 1; torch 11 had
    # no port value; lines are (file, number), the port's files in the order given.
    t, p, q = "model.py", "port.py", "layers.py"
    table = {(t, 10): ({(p, 3), (p, 5)}, 0.0, True, True), (t, 11): (set(), None, True, False),
             (t, 12): ({(p, 4), (q, 1)}, 2.0, False, True)}
    port_lines = [(p, n) for n in range(1, 7)] + [(q, 1)]
    assert _aligned(table, port_lines) == [
        ((p, 1), []), ((p, 2), []), ((p, 3), [(t, 10)]), (None, [(t, 11)]), ((p, 4), [(t, 12)]),
        ((p, 5), []), ((p, 6), []), ((q, 1), [])]


@needs_browser()
def test_broken_rope_review_page_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from selenium.webdriver.common.by import By

    # The rotary halves swapped: one line of the correct port edited.
    good = "[even * cos - odd * sin, odd * cos + even * sin]"
    bad = "[odd * cos + even * sin, even * cos - odd * sin]"
    port = tmp_path / "llama_port.py"
    port.write_text((SAMPLES / "llama_port.py").read_text().replace(good, bad))
    page = tmp_path / "review.html"
    assert main(["review", str(SAMPLES / "llama_model.py"), str(port), "--html", str(page)]) == 1
    report = capsys.readouterr().out
    # The text report's numbers: per torch line of llama_model.py its max error, and the first divergence's.
    reported = dict(re.findall(r"^llama_model\.py:(\d+)\s+\S+\s+(\S+)", report, re.M))
    (first_error,) = re.findall(r"^  max error (\S+)$", report, re.M)
    torch_line = _line(SAMPLES / "llama_model.py", "rotated = torch.stack(")
    port_line = _line(port, "rotated = jnp.stack(")
    with chrome() as driver:
        driver.get(page.as_uri())
        legend = driver.find_element(By.CSS_SELECTOR, ".legend").text
        assert all(word in legend for word in ("paired, equal", "paired, differs", "first divergence"))
        # The banner names the torch line; its link leads to the marked row, with both lines in it.
        banner = driver.find_element(By.ID, "first")
        assert f"llama_model.py:{torch_line}" in banner.text and f"{port.name}:{port_line}" in banner.text
        banner.find_element(By.TAG_NAME, "a").click()
        (first,) = driver.find_elements(By.CSS_SELECTOR, "tr.first")
        assert in_view(driver, first)
        cells = first.find_elements(By.TAG_NAME, "td")
        assert cells[0].text == str(torch_line) and cells[1].text.strip().startswith("rotated = torch.stack(")
        assert cells[3].text == str(port_line) and cells[4].text.strip().startswith("rotated = jnp.stack(")
        mark = first.find_element(By.CSS_SELECTOR, ".q .ln")
        assert "first divergence" in driver.execute_script(
            "return getComputedStyle(arguments[0], '::after').content", mark)
        # A correct line sits beside the torch line it computes, in green.
        keys = driver.find_element(By.ID, f"p-L{_line(port, 'values = cache')}")
        assert "ok" in keys.get_attribute("class").split()
        assert keys.find_element(By.CSS_SELECTOR, "td.t").text.strip() == "v_out[:, :, input_pos] = v_val"
        # Every port line is on the page once, in order.
        numbers = [int(n) for n in driver.execute_script(
            "return [...document.querySelectorAll('tr.r td:nth-child(4)')].map(td => td.textContent)") if n]
        assert numbers == list(range(1, len(port.read_text().splitlines()) + 1))
        # The page's numbers are the report's: each torch line's max error, and the banner's.
        shown = driver.execute_script("""
            const found = {};
            document.querySelectorAll('tr.r').forEach(row => {
              const lines = row.cells[0].textContent.split('\\n');
              const errors = row.cells[2].textContent.split('\\n');
              lines.forEach((line, i) => { if (/^\\d+$/.test(line)) found[line] = errors[i]; });
            });
            return found;""")
        assert len(reported) > 10 and {line: shown.get(line) for line in reported} == reported
        assert f"max error {first_error}" in banner.text
        # Nothing is clipped at 900 px, folds open or closed.
        driver.set_window_size(900, 1000)
        driver.execute_script("document.querySelectorAll('tbody.fold.closed button').forEach(b => b.click())")
        clipped = driver.execute_script(
            "return [...document.querySelectorAll('td, .ln')].filter(e => e.getClientRects().length"
            " && e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.slice(0, 60))")
        assert clipped == []
