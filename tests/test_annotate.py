"""`annotate FILE`: every sample annotated, its code untouched, every line that made JAX commented."""

from __future__ import annotations

import ast
import functools
import html
import re

import pytest
from conftest import SAMPLES, load_sample
from golden import assert_golden

from jaxside.annotate.cli import main
from jaxside.render.comments import SourceMap, annotate_file, same_code
from jaxside.render.lower import lower
from jaxside.tracing import capture

NAMES = ["seed_example", "mlp", "cnn", "llama_model", "rnn", "moe"]


@functools.cache
def annotated(name: str) -> tuple[str, str, object]:
    module = load_sample(name)
    fn, args, *rest = module.example()
    trace = capture(fn, *args, **(rest[0] if rest else {}))
    path = str(SAMPLES / f"{name}.py")
    return path, annotate_file(lower(trace), path), trace


@pytest.mark.parametrize("name", NAMES)
def test_code_untouched_and_every_line_that_made_jax_is_commented(name):
    path, text, trace = annotated(name)
    source = open(path, encoding="utf-8").read()
    assert same_code(source, text)
    source_map = SourceMap(source)
    out_lines = text.splitlines()
    made_jax = {
        source_map.statement_at(site.line).lineno
        for site in trace.eqn_sites
        if site is not None and site.file == path and source_map.statement_at(site.line) is not None
    }
    assert made_jax
    # The defs of the functions that ran carry `# jax: def ...`.
    defs = {source_map.statement_at(call.line).lineno for call in trace.root.walk()
            if call.file == path and source_map.statement_at(call.line) is not None}
    original = source.splitlines()
    # Map each original line to its place in the output; the other output lines were inserted.
    position, index = {}, 0
    for number, line in enumerate(original, start=1):
        while not (out_lines[index] == line or line.strip() and out_lines[index].startswith(f"{line}  # ")):
            index += 1
        position[number] = index
        index += 1
    inserted = set(range(len(out_lines))) - set(position.values())
    assert all(out_lines[i].lstrip().startswith("#") for i in inserted), [out_lines[i] for i in inserted]
    # A comment beside line n belongs to n's statement; one inserted below n, to the statement
    # whose header ends at n. Every comment must sit where its statement is, no line off.
    commented = set()
    for number in position:
        node = source_map.statement_at(number)
        beside = len(out_lines[position[number]]) > len(original[number - 1])
        below = position[number] + 1 in inserted
        if beside:
            assert node is not None, f"a comment beside line {number}, which is no statement"
            commented.add(node.lineno)
        if below:
            owners = [n for n in position if (s := source_map.statement_at(n)) is not None
                      and s.lineno == n and source_map.header_end(s) == number]
            assert owners, f"a comment below line {number}, which ends no statement"
            commented.update(owners)
    # Calls into user code made JAX through their callee; a return shows what is returned.
    calls = {source_map.statement_at(call.call_site.line).lineno for call in trace.root.walk()
             if call.call_site is not None and call.call_site.file == path}
    returns = {n for n in commented if isinstance(source_map.statement_at(n), ast.Return)}
    expected = made_jax | defs | calls
    assert expected <= commented, f"lines that made JAX without a comment: {sorted(expected - commented)}"
    assert commented <= expected | returns, f"comments where no JAX was made: {sorted(commented - expected)}"


@pytest.mark.parametrize("name", [n for n in NAMES if n != "llama_model"])  # the Llama's is docs/
def test_golden_annotated(name):
    assert_golden("annotate", f"{name}.py", annotated(name)[1])


def test_llama_loop_and_shared_defs_show_counts():
    _, text, _ = annotated("llama_model")
    block = "# jax: def transformer_block_forward(params, state, x, input_pos, freqs_cis, mask, *, config)"
    assert block + "  ×2" in text
    assert "# jax: def rms_norm_forward(params, x, *, config)  ×5" in text
    assert "# x, new_layer_state = transformer_block_forward(" in text


def test_cli_writes_the_annotated_file_and_html(tmp_path, capsys):
    out, page = tmp_path / "seed_annotated.py", tmp_path / "seed.html"
    source = SAMPLES / "seed_example.py"
    before = source.read_bytes()
    assert main([str(source), "-o", str(out), "--html", str(page)]) == 0
    assert source.read_bytes() == before
    text = out.read_text(encoding="utf-8")
    ast.parse(text)
    assert "# activation = " in text and "jnp.sin(activation)" in text
    shown = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
    assert "activation = weight @ hidden" in shown  # the JAX column, its highlighting stripped
    assert capsys.readouterr().out == ""


def test_shapes_flag_adds_avals(capsys):
    assert main([str(SAMPLES / "seed_example.py"), "--shapes"]) == 0
    assert "# f32[4,4]" in capsys.readouterr().out


def test_readme_showcase_is_the_current_annotated_llama():
    """docs/llama_model_annotated.py, the Llama's golden file, is what `annotate` prints for it."""
    showcase = (SAMPLES.parent / "docs" / "llama_model_annotated.py").read_text(encoding="utf-8")
    hint = "regenerate: annotate samples/llama_model.py -o docs/llama_model_annotated.py"
    assert showcase == annotated("llama_model")[1], hint
