"""The side-by-side view, traced from a real two-file model and looked at in a real headless Chromium."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import torch
from browser import chrome, in_view, needs_browser
from html_rows import by_id

from jaxside.annotate.loading import load_file
from jaxside.render.html import side_by_side
from jaxside.render.html.highlight import lines
from jaxside.render.lower import lower
from jaxside.tracing import Capture

HELPER = '''\
import torch


def gate(x):
    return torch.sigmoid(x) * x
'''

MODEL = '''\
"""A model for the view: config, __init__, a skipped branch, two identical layers, a call to another file."""

import torch
from torch import nn

from view_helper import gate

WIDTH = 8
DEPTH = 2


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.scale = 2.0
        self.enabled = True

    def forward(self, x):
        if x.shape[0] > 100:
            x = x * 0.5
            x = torch.tanh(x)
        else:
            x = torch.sin(x)
        return gate(self.proj(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(DEPTH)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
'''


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("view")
    (folder / "view_helper.py").write_text(HELPER)
    model_file = folder / "view_model.py"
    model_file.write_text(MODEL)
    module = load_file(str(model_file))
    torch.manual_seed(0)
    trace = Capture(watch=[str(folder / "view_helper.py")])(module.Net().eval(), torch.randn(4, 8))
    page = folder / "view.html"
    page.write_text(side_by_side(lower(trace), str(model_file)), encoding="utf-8")
    return page, MODEL


def _line(text: str) -> int:
    (number,) = [n for n, line in enumerate(MODEL.splitlines(), start=1) if text in line]
    return number


def test_highlighted_lines_keep_the_text_and_close_every_span():
    source = 'x = """a\nb"""  # note\n  y = f(x, 2)\n'
    rendered = lines(source, cuts={3: [6, 10]})
    assert [re.sub(r"<[^>]+>", "", line).replace("&quot;", '"') for line in rendered] == source.splitlines()
    assert all(line.count("<span") == line.count("</span>") for line in rendered)
    assert "<i data-c=6>f(<wbr>x,<wbr></i>" in rendered[2]  # a long line may wrap after ( and ,


def test_page_is_one_offline_file(view):
    text = view[0].read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text) and "<link" not in text
    assert "<style>" in text and "<script>" in text
    assert "color-scheme: light dark" in text and "light-dark(" in text  # dark as the system is
    assert "word-break: break-all" not in text


@needs_browser()
def test_both_columns_linked_and_dimmed_in_chromium(view):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    page, _ = view
    with chrome() as driver:
        driver.get(page.as_uri())
        row = lambda n: driver.find_element(By.ID, f"f0-L{n}")  # noqa: E731

        # The first screen shows where the JAX is: config and __init__ are folded away.
        init = row(_line("self.proj = nn.Linear"))
        assert not init.is_displayed()
        layer_def = row(_line("if x.shape[0] > 100") - 1)  # Layer.forward
        assert in_view(driver, layer_def)
        # Both columns hold the code, highlighted: torch text on the left, its JAX on the right.
        sin_row = row(_line("x = torch.sin(x)"))
        assert sin_row.find_element(By.CSS_SELECTOR, "td.t").text.strip() == "x = torch.sin(x)"
        jax = sin_row.find_element(By.CSS_SELECTOR, "td.j")
        assert re.fullmatch(r"\w+ = jnp\.sin\(\w+\)", jax.text.strip()), jax.text
        badge = jax.find_element(By.CSS_SELECTOR, ".cnt")  # ran once in each of the 2 layers
        drawn = driver.execute_script("return getComputedStyle(arguments[0], '::after').content", badge)
        assert drawn == '"×2"', drawn

        spans = layer_def.find_elements(By.CSS_SELECTOR, "td.t span")
        colours = {e.value_of_css_property("color") for e in spans}
        assert len(colours) >= 2, "the def line is not highlighted"
        # The repeated layer is shown once, with its count.
        assert layer_def.find_element(By.CSS_SELECTOR, "td.j .cnt").get_attribute("data-t") == "×2"
        # The branch that did not run is dimmed; the one that ran is not.
        skipped = row(_line("x = torch.tanh(x)"))
        assert "dim" in skipped.get_attribute("class")
        assert float(skipped.find_element(By.CSS_SELECTOR, "td.t").value_of_css_property("opacity")) < 0.6
        assert float(sin_row.find_element(By.CSS_SELECTOR, "td.t").value_of_css_property("opacity")) == 1

        # Hover a JAX statement: the torch expression it came from is marked.
        statement = sin_row.find_element(By.CSS_SELECTOR, ".st[data-site]")
        ActionChains(driver).move_to_element(statement).perform()
        marked = "".join(e.text for e in sin_row.find_elements(By.CSS_SELECTOR, "td.t i.mk"))
        assert marked == "torch.sin(x)"
        # Hover a torch line: its JAX lights up.
        ActionChains(driver).move_to_element(sin_row.find_element(By.CSS_SELECTOR, "td.t")).perform()
        assert "hot" in sin_row.get_attribute("class")

        # Every link on the page leads somewhere on the page.
        targets = driver.execute_script("return [...document.querySelectorAll('a[href^=\"#\"]')]"
                                        ".map(a => a.getAttribute('href').slice(1))")
        assert targets and all(driver.find_elements(By.ID, t) for t in targets), targets
        # The call into the other file goes to its def, unfolded, and Back returns to the call.
        call_row = row(_line("return gate(self.proj(x))"))
        # (in the statement's layout for this column's width: the others are not displayed)
        links = call_row.find_elements(By.CSS_SELECTOR, "a.fn[href='#def-gate']")
        (link,) = [a for a in links if a.is_displayed()]
        link.click()
        target = driver.find_element(By.ID, "def-gate")
        assert in_view(driver, target) and "torch.sigmoid" in target.find_element(
            By.XPATH, "./ancestor::tr").find_element(By.XPATH, "following-sibling::tr").text
        back = driver.find_element(By.ID, "back")
        assert "view_model.py:" in back.text
        back.click()
        driver.execute_script("return new Promise(r => setTimeout(r, 300))")
        assert in_view(driver, call_row)
        # Folds open from their bar.
        driver.find_element(By.CSS_SELECTOR, "tbody.fold tr.bar button").click()
        assert row(1).is_displayed()


@needs_browser()
def test_dark_theme_follows_the_system_and_identifiers_never_break(view):
    from selenium.webdriver.common.by import By

    page, _ = view
    with chrome(width=700, dark=True) as driver:
        driver.get(page.as_uri())
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        red, green, blue = map(int, re.findall(r"\d+", background)[:3])
        assert red + green + blue < 150, background
        driver.find_element(By.ID, "unfold").click()
        broken = driver.execute_script(
            "return [...document.querySelectorAll('a.fn, span.f, span.b, span.m')]"
            ".filter(e => e.getClientRects().length > 1).map(e => e.textContent)")
        assert broken == []


RUNS_SOURCE = '''\
def f(x, flag):
    if flag is None:
        raise ValueError("no flag")
    if x is None:
        return None
    y = x + 1
    # a comment in code that ran
    return y


def never(x):
    return x
'''


def test_lines_that_did_not_run_are_told_from_the_evidence(tmp_path: Path):
    """A raise-only branch of a call that returned, and a return branch the call went past, did not run;
    a def never called did not run; comments in code that ran count as run."""
    import ast

    from jaxside.render.html.runs import Runs
    from jaxside.tracing.trace import Call, Seen, Site

    file = tmp_path / "runs.py"
    file.write_text(RUNS_SOURCE)
    site = Site(str(file), 6, 6, 8, 13, "x + 1")
    call = Call("f", str(file), 1, eqns=[0], seen=Seen(bindings=[("y", 6, object())]))
    root = Call("<entry>", str(file), 0, children=[call])
    trace = type("FakeTrace", (), {"root": root, "eqn_sites": [site]})()
    runs = Runs(trace, str(file), ast.parse(RUNS_SOURCE))
    not_run = {n for n in range(1, len(RUNS_SOURCE.splitlines()) + 1) if n not in runs.ran}
    assert not_run == {3, 5, 9, 10, 11, 12}


def test_both_columns_hold_the_code_without_a_browser(view):
    """The page's text, read without a browser: each torch line that ran beside the JAX it made."""
    page, source = view
    rows = by_id(page.read_text(encoding="utf-8"))
    model = {int(key.split("-L")[1]): row for key, row in rows.items() if key.startswith("f0-L")}
    assert [model[n].cell("t") for n in sorted(model)] == [line.strip() for line in source.splitlines()]
    jax = {n: model[n].cell("j") for n in model}
    assert re.fullmatch(r"(\w+) = jnp\.sin\(x\)\s*×2", jax[_line("x = torch.sin(x)")]), jax
    returned = jax[_line("return gate(self.proj(x))")]
    assert '@ params["proj"]["weight"].T' in returned and "×2" in returned, returned
    assert "gate(" in returned, returned  # the call inline, or its result named on the line before
    last = " ".join(returned.replace("×2", "").split()).partition("return ")[2]  # the layout's lines joined
    assert re.fullmatch(r"(\( )?(gate\(.+\)|\w+) \* config\.scale( \))?", last), returned
    # What did not run has no JAX: the other branch, __init__, the config.
    for text in ("x = torch.tanh(x)", "self.proj = nn.Linear", "WIDTH = 8"):
        assert jax[_line(text)] == "" and "dim" in model[_line(text)].classes, text
    ran = [n for n, row in model.items() if "j" in row.classes]
    assert len(ran) >= 5 and all(jax[n] for n in ran), {n: jax[n] for n in ran}
    # The helper file's function, in a section of its own, with its JAX.
    helper = [row for key, row in rows.items() if key.startswith("f1-L")]
    (sigmoid,) = [row for row in helper if row.cell("t") == "return torch.sigmoid(x) * x"]
    assert re.search(r"(sigmoid|logistic)\(x\) \* x", sigmoid.cell("j")), sigmoid.cell("j")


BRANCHES = '''\
import torch


def f(x, extra=None, cache=None):
    if extra is not None:
        x = x + extra
    if cache is not None:
        if isinstance(cache, dict):
            cache = cache["x"]
    try:
        n = int(x.shape[0])
    except TypeError:
        n = 0
    if n > 1:
        x = x * 2
    return torch.sin(x)
'''


def test_branches_that_left_no_trace_are_told_from_the_lines_that_ran(tmp_path: Path):
    """A branch with no sibling, no `raise` or `return`, whose lines would have made no array
    operation or none at all (a cache picked, an exception caught), did not run: the frame hook
    saw every line each call ran (GPT-2's cross-attention and `EncoderDecoderCache` branches)."""
    import ast

    from jaxside.render.html.runs import Runs

    file = tmp_path / "branches.py"
    file.write_text(BRANCHES)
    trace = Capture(watch=[str(file)])(load_file(str(file)).f, torch.ones(3), cache=[1])
    runs = Runs(trace, str(file), ast.parse(BRANCHES))
    not_run = {n for n in range(1, len(BRANCHES.splitlines()) + 1) if n not in runs.ran}
    assert not_run == {1, 2, 3, 6, 9, 12, 13}, not_run


def test_gpt2s_branches_that_never_ran_are_dimmed():
    """transformers' GPT-2 (a tiny config, as the zoo builds it): the cross-attention branches and
    the `EncoderDecoderCache` one left no array operation that would tell, yet did not run."""
    import ast

    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2 import modeling_gpt2

    from jaxside.render.html.runs import Runs

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=4, n_positions=64)).eval()
    trace = Capture()(model, torch.randint(0, 64, (1, 8)))
    source = Path(modeling_gpt2.__file__).read_text(encoding="utf-8")
    runs = Runs(trace, modeling_gpt2.__file__, ast.parse(source))
    numbered = list(enumerate(source.splitlines(), 1))

    def at(text: str) -> list[int]:
        return [n for n, line in numbered if line.strip().startswith(text)]

    skipped = [*at("hidden_states = self.ln_cross_attn("), *at("query_states = self.q_attn("),
               *at("curr_past_key_values = past_key_values.self_attention_cache")]
    ran = [*at("hidden_states = self.ln_2("), *at("query_states, key_states, value_states = self.c_attn(")]
    ran += [n for n, line in numbered if line.strip() == "curr_past_key_values = past_key_values"]
    assert len(skipped) == 3 and len(ran) == 3, (skipped, ran)
    assert not set(skipped) & runs.ran and set(ran) <= runs.ran


def test_a_statements_layouts_share_their_common_lines():
    """Each layout of a statement is its lines shown at that width, in order; a line two layouts
    in a row share is written once (pages carried every layout whole, 35% larger)."""
    from jaxside.render.html.statements import BODY, WIDTHS, layouts
    from jaxside.render.layout import wrap_text

    text = ('attn_output = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores + causal_mask, axis=-1), '
            "value_states)")
    page = layouts(text)
    pieces = [p for p in re.split(r"(?=<span class=(?:'ln[ ']|ln[ >]))", page) if p]
    lines = []
    for piece in pieces:
        classes = re.match(r"<span class=(?:'([^']*)'|ln)", piece)[1] or ""
        low, high = re.search(r"lo(\d+)", classes), re.search(r"hi(\d+)", classes)
        lines.append((html.unescape(re.sub(r"<[^>]+>", "", piece)),
                      int(low[1]) if low else 0, int(high[1]) if high else 10**6))
    for width in WIDTHS:
        want = [BODY + line for line in wrap_text(text, len(BODY), width)]
        assert [t for t, low, high in lines if low <= width < high] == want, width
    distinct = {tuple(BODY + line for line in wrap_text(text, len(BODY), width)) for width in WIDTHS}
    assert len(distinct) >= 3 and len(lines) < sum(len(layout) for layout in distinct)


def test_rows_name_their_place_once_per_file(view):
    """A torch row's label (`view_model.py:12`, for Back) is its table's file name and its line,
    not an attribute of every row."""
    page, _ = view
    text = page.read_text(encoding="utf-8")
    assert "<table data-name='view_model.py'>" in text
    assert not re.search(r"<tr id=f\d+-L\d+ [^>]*data-label", text)
