"""The side-by-side page as people use it, in headless Chromium, on a library model run through an
`example()` file (transformers' Llama, tiny): what the first screen shows, what a copy gives, that
nothing is clipped, that the browser's find reaches folded code, and stepping with the keyboard."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from browser import chrome, in_view, needs_browser

from jaxside.annotate.loading import load_file
from jaxside.render.html import side_by_side
from jaxside.render.lower import lower
from jaxside.tracing import Capture

EXAMPLE = Path(__file__).resolve().parent / "models" / "run_hf_llama.py"

pytestmark = needs_browser()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The page of the entry's file (what `annotate run_hf_llama.py --html` shows) and the page of the
    example file itself, which made no JAX, from one trace."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("page")
    model, args, kwargs = load_file(str(EXAMPLE)).example()
    trace = Capture()(model, *args, **kwargs)
    found = {"library": folder / "library.html", "example": folder / "example.html"}
    program = lower(trace)
    found["library"].write_text(side_by_side(program), encoding="utf-8")
    found["example"].write_text(side_by_side(program, str(EXAMPLE)), encoding="utf-8")
    return found


@pytest.fixture(scope="module")
def driver():
    with chrome(width=1400, height=1000) as browser:
        yield browser


def _open(driver, page: Path, width: int = 1400, height: int = 1000) -> None:
    driver.set_window_size(width, height)
    driver.get("about:blank")
    driver.get(page.as_uri())


COPY = """const data = new DataTransfer();
document.dispatchEvent(new ClipboardEvent('copy', {clipboardData: data, bubbles: true, cancelable: true}));
return data.getData('text/plain');"""
"""What a copy of the current selection puts on the clipboard (the page's `copy` handler)."""


def _code_on_screen(driver) -> tuple[int, float]:
    """Lines of code (torch or JAX) wholly in the window, and the share of its height the rows holding
    code cover."""
    return driver.execute_script("""
        const inside = box => box.height > 4 && box.top >= 0 && box.bottom <= innerHeight;
        const lines = [...document.querySelectorAll('td .ln')].filter(
          ln => ln.textContent.trim() && inside(ln.getBoundingClientRect())).length;
        let covered = 0;
        document.querySelectorAll('tr.r').forEach(row => {
          const box = row.getBoundingClientRect();
          const top = Math.max(box.top, 0), bottom = Math.min(box.bottom, innerHeight);
          if (bottom - top > 4 && row.innerText.trim()) covered += bottom - top;
        });
        return [lines, covered / innerHeight];""")


@pytest.mark.parametrize("shown", ["library", "example"])
def test_the_page_opens_on_the_code_that_ran(driver, pages, shown):
    from selenium.webdriver.common.by import By

    _open(driver, pages[shown])
    lines, share = _code_on_screen(driver)
    assert lines >= 30 and share >= 0.5, (lines, share)
    # The call tree at the top starts at the entry, marked, and each def in it is a link to its code.
    tree = driver.find_element(By.CSS_SELECTOR, "nav.tree")
    assert in_view(driver, tree)
    first = tree.find_element(By.CSS_SELECTOR, "li")
    assert "LlamaForCausalLM.forward" in first.text and "entry" in first.text
    links = [a.get_attribute("href").split("#")[1] for a in tree.find_elements(By.TAG_NAME, "a")]
    assert len(links) >= 8 and all(driver.find_elements(By.ID, target) for target in links)
    (entry,) = driver.find_elements(By.CSS_SELECTOR, "tr.entry")
    assert "def forward" in entry.find_element(By.CSS_SELECTOR, "td.t").text
    # Following a link in the tree shows that def's code.
    tree.find_element(By.LINK_TEXT, "llama_mlp_forward").click()
    assert in_view(driver, driver.find_element(By.ID, "def-llama_mlp_forward"))
    if shown == "example":  # the file that made no JAX comes after the files that did
        titles = [h.text for h in driver.find_elements(By.TAG_NAME, "h2")]
        assert titles[0] == "modeling_llama.py" and titles.index("run_hf_llama.py") > 0, titles


def _drag(driver, start, end) -> None:
    """Press at the top left of `start`, release at the bottom right of `end`, as a hand would."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", start)
    driver.execute_script("scrollBy(0, -60)")  # below the sticky column heads
    first, last = start.size, end.size  # offsets are from the element's centre
    actions = ActionChains(driver)
    actions.move_to_element_with_offset(start, -first["width"] // 2 + 1, -first["height"] // 2 + 4)
    actions.click_and_hold()
    actions.move_to_element_with_offset(end, last["width"] // 2 - 2, last["height"] // 2 - 4)
    actions.release().perform()


def test_a_drag_over_a_def_copies_that_column_clean(driver, pages):
    from selenium.webdriver.common.by import By

    _open(driver, pages["library"], height=1400)  # the def and its JAX on one screen
    signature = driver.find_element(By.ID, "def-llama_decoder_layer_forward")
    row = signature.find_element(By.XPATH, "./ancestor::tr")
    section, first, last = row.get_attribute("data-f"), int(row.get_attribute("data-l")), int(
        signature.get_attribute("data-end"))
    statements = [st for n in range(first, last + 1)
                  for st in driver.find_elements(By.CSS_SELECTOR, f"#{section}-L{n} td.j .st")]
    assert len(statements) > 5
    # A drag from the JAX def's first line to its last statement.
    _drag(driver, signature.find_element(By.CSS_SELECTOR, ".ln"),
          [ln for ln in statements[-1].find_elements(By.CSS_SELECTOR, ".ln") if ln.is_displayed()][-1])
    copied = driver.execute_script(COPY)
    tree = ast.parse(copied)  # Python as it stands, indentation and all
    (function,) = tree.body
    assert isinstance(function, ast.FunctionDef) and function.name == "llama_decoder_layer_forward"
    assert len(function.body) >= 5 and re.search(r"\n    \w", copied)
    for foreign in ("torch.", "self.", "×", "called from", "copy def", "entry", "modeling_llama.py"):
        assert foreign not in copied, (foreign, copied)
    # The "copy def" button selects the same def and copies the same text.
    driver.execute_script("getSelection().removeAllRanges()")
    signature.find_element(By.CSS_SELECTOR, "button[data-copy=def]").click()
    assert driver.execute_script(COPY) == copied
    # So does every def's button: one def, named as its signature says, that parses.
    buttons = driver.find_elements(By.CSS_SELECTOR, "button[data-copy=def]")
    assert len(buttons) >= 8
    for button in buttons:
        driver.execute_script("arguments[0].click()", button)
        (function,) = ast.parse(driver.execute_script(COPY)).body
        statement = button.find_element(By.XPATH, "./ancestor::div[contains(@class, 'st')][1]")
        assert statement.get_attribute("id") == f"def-{function.name}"

    # A drag in the torch column copies the torch lines as they are in the file.
    norm = driver.find_element(By.ID, "def-llama_rms_norm_forward").find_element(By.XPATH, "./ancestor::tr")
    start, end = int(norm.get_attribute("data-l")), int(
        driver.find_element(By.ID, "def-llama_rms_norm_forward").get_attribute("data-end"))
    cells = [driver.find_element(By.CSS_SELECTOR, f"#{norm.get_attribute('data-f')}-L{n} td.t .ln")
             for n in (start, end)]
    _drag(driver, *cells)
    import transformers.models.llama.modeling_llama as modeling

    source = Path(modeling.__file__).read_text(encoding="utf-8").splitlines()[start - 1 : end]
    assert driver.execute_script(COPY) == "\n".join(line.rstrip() for line in source) + "\n"


def test_no_code_is_clipped_at_900_pixels(driver, pages):
    from selenium.webdriver.common.by import By

    _open(driver, pages["library"], width=900)
    driver.find_element(By.ID, "unfold").click()
    clipped = driver.execute_script("""
        return [...document.querySelectorAll('td, .st, .ln')]
          .filter(e => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
          .map(e => e.textContent.slice(0, 60));""")
    assert clipped == []
    assert driver.execute_script("return document.documentElement.scrollWidth <= innerWidth")
    # Long lines wrapped at token boundaries, under a hanging indent: no identifier split.
    broken = driver.execute_script(
        "return [...document.querySelectorAll('a.fn, span.f, span.b, span.o, span.m')]"
        ".filter(e => e.getClientRects().length > 1).map(e => e.textContent)")
    assert broken == []
    wrapped = driver.execute_script(
        "return [...document.querySelectorAll('td.t .ln')].filter(e => e.getClientRects()[0] &&"
        " e.getBoundingClientRect().height > 30).length")
    assert wrapped > 0  # lines too long for the column go on under their indent


def test_the_browsers_find_reaches_folded_code(driver, pages):
    from selenium.webdriver.common.by import By

    _open(driver, pages["library"])
    # A line of code in a closed fold, found nowhere else on the page.
    text = driver.execute_script("""
        for (const cell of document.querySelectorAll('tbody.fold.closed td.t .fc')) {
          const line = cell.textContent.trim();
          if (/^[A-Za-z_][\\w .]{12,}$/.test(line) && document.body.textContent.split(line).length === 2)
            return line;
        }
        return null;""")
    assert text, "no closed fold with a plain line of code"
    hidden = driver.execute_script(
        "return [...document.querySelectorAll('tbody.fold.closed .fc')].filter("
        "c => c.textContent.includes(arguments[0])).length", text)
    assert hidden == 1
    # The browser's find-in-page machinery (a text fragment) reveals it: the fold opens.
    driver.get("about:blank")
    driver.get(pages["library"].as_uri() + "#:~:text=" + quote(text))
    driver.execute_script("return new Promise(r => setTimeout(r, 300))")
    (cell,) = [c for c in driver.find_elements(By.CSS_SELECTOR, "td.t") if c.text.strip() == text]
    assert cell.is_displayed() and in_view(driver, cell)
    fold = cell.find_element(By.XPATH, "./ancestor::tbody")
    assert "closed" not in fold.get_attribute("class")
    assert not fold.find_elements(By.CSS_SELECTOR, ".fc[hidden]")


def test_keys_step_through_statements_and_light_their_partner(driver, pages):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _open(driver, pages["library"])
    focused = lambda: driver.execute_script(  # noqa: E731
        "const e = document.activeElement; return e && e.matches('.st') ? e : null")
    keys = ActionChains(driver)
    keys.send_keys("j").perform()
    previous = focused()
    assert previous is not None
    outline = driver.execute_script("return getComputedStyle(arguments[0]).outlineStyle", previous)
    assert outline != "none"  # the focus is seen
    # Step on until a statement with a torch site: each step moves down, and lights the partner.
    for _ in range(12):
        keys.send_keys("j").perform()
        current = focused()
        assert current is not None and current != previous
        assert current.location["y"] >= previous.location["y"]
        previous = current
        if current.get_attribute("data-site"):
            break
    assert current.get_attribute("data-site")
    marked = driver.execute_script("return [...document.querySelectorAll('td.t i.mk')]")
    assert marked and "hot" in current.get_attribute("class")
    # Enter reveals the partner: the torch span is pinned, and in view.
    keys.send_keys(Keys.ENTER).perform()
    pinned = driver.execute_script("return [...document.querySelectorAll('td.t i.pin')]")
    assert pinned and in_view(driver, pinned[0]) and "pin" in current.get_attribute("class")
    keys.send_keys("k").perform()
    assert focused() is not None and focused() != current
    # The jump flash is not the hover colour.
    flash, hot = driver.execute_script(
        "const s = getComputedStyle(document.documentElement);"
        "return [s.getPropertyValue('--flash'), s.getPropertyValue('--hot')]")
    assert flash.strip() != hot.strip()


def test_a_torch_expression_lights_the_statements_it_made(driver, pages):
    _open(driver, pages["library"])
    # Each torch piece of a line whose JAX statements came from different expressions: hovering it
    # lights only the statements whose torch span holds it, the innermost such span.
    found = driver.execute_script("""
        const results = [];
        for (const row of document.querySelectorAll('tr.r')) {
          const sts = [...row.querySelectorAll('td.j .st[data-site]')];
          if (new Set(sts.map(s => s.dataset.site)).size < 2) continue;
          for (const piece of row.querySelectorAll('td.t i[data-c]')) {
            piece.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
            const lit = sts.filter(s => s.classList.contains('hot'));
            const c = +piece.dataset.c, n = +row.dataset.l;
            const holds = lit.every(s => {
              const [l1, c1, l2, c2] = s.dataset.site.split(' ').map(Number);
              return (n > l1 || c >= c1) && (n < l2 || c < c2);
            });
            results.push([lit.length, sts.length, holds]);
          }
        }
        return results;""")
    assert found, "no line with statements from different expressions"
    assert all(holds for _, _, holds in found)
    assert any(0 < lit < total for lit, total, _ in found), found


LAYOUTS = """
    const probe = document.createElement('span');
    probe.textContent = '0'.repeat(50);
    document.querySelector('td.j .st .ln').appendChild(probe);
    const ch = probe.getBoundingClientRect().width / 50;
    probe.remove();
    const found = [];
    const bound = (v, kind) => +((v.className.match(new RegExp(kind + '(\\\\d+)')) || [0, 0])[1]);
    document.querySelectorAll('td.j .st').forEach(st => {
      const lines = [...st.children].filter(c => c.classList.contains('ln'));
      if (!lines.some(v => bound(v, 'lo') || bound(v, 'hi')) || !st.getClientRects().length) return;
      const room = st.clientWidth / ch;
      const shown = lines.filter(v => v.getClientRects().length);
      const inRange = v => bound(v, 'lo') <= room && (!bound(v, 'hi') || room < bound(v, 'hi'));
      const one = shown.length > 0 && lines.every(v => inRange(v) === shown.includes(v));
      const low = Math.max(...shown.map(v => bound(v, 'lo')));
      const highs = shown.map(v => bound(v, 'hi')).filter(Boolean);
      found.push([one ? 1 : 0, room, low, highs.length ? Math.min(...highs) : 0]);
    });
    return found;"""
"""Per statement laid out at several widths (its lines, each shown at the widths of the layouts it
belongs to): 1 when the lines shown are exactly those whose widths take the room, the room in
characters, and the width range they share (0: unbounded)."""


@pytest.mark.parametrize("width", [900, 1600])
def test_jax_is_laid_out_for_the_columns_width(driver, pages, width):
    _open(driver, pages["library"], width=width)
    found = driver.execute_script(LAYOUTS)
    assert found, "no statement laid out at several widths"
    for shown, room, low, high in found:
        assert shown == 1 and low <= room and (not high or room < high), (shown, room, low, high)
    if width == 1600:  # wider than 80 characters where the column has the room
        assert any(low >= 100 for _, _, low, _ in found), found


def test_the_reader_chooses_theme_and_code_size(driver, pages):
    from selenium.webdriver.common.by import By

    _open(driver, pages["library"])
    background = "return getComputedStyle(document.body).backgroundColor"
    code_size = "return parseFloat(getComputedStyle(document.querySelector('td.t .ln')).fontSize)"
    light, size = driver.execute_script(background), driver.execute_script(code_size)
    try:
        theme = driver.find_element(By.ID, "theme")
        theme.click()  # auto -> light -> dark
        theme.click()
        assert theme.text == "theme: dark"
        red, green, blue = map(int, re.findall(r"\d+", driver.execute_script(background))[:3])
        assert red + green + blue < 150 and driver.execute_script(background) != light
        driver.find_element(By.ID, "larger").click()
        assert driver.execute_script(code_size) > size
        # Kept for the next page opened in this browser.
        _open(driver, pages["example"])
        assert driver.find_element(By.ID, "theme").text == "theme: dark"
        assert driver.execute_script(code_size) > size
    finally:
        driver.execute_script("localStorage.clear()")
