"""Names and loops in the forms public model files write (tests/models/torch_forms.py: vit-pytorch's
`for attn, ff in self.layers`, transformers' `(attn_output, None)` and Gemma 2's dict of masks,
minGPT's lambda MLP, item updates): each export runs and matches torch leaf by leaf, and reads as
torch wrote it."""

from __future__ import annotations

import functools
import re

from conftest import load_model

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture

SOURCE = "tests/models/torch_forms.py"


def _forms() -> object:
    return load_model("torch_forms")


@functools.cache
def _exported(name: str, style: str | None = None) -> str:
    """The export of model `name` (in `style`), after checking it against torch leaf by leaf."""
    model, args = _forms().build(name)
    program = lower(capture(model, *args))
    if style is None:
        text = render_program(program, source=SOURCE)
    else:
        text = module_source(program, SOURCE, style, model)
    run = runner(style) if style else None
    report = check_export(load_module(text), program, Entry(model, args, {}), run=run)
    assert report.ok, report.table()
    return text


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_a_loop_over_pairs_unpacks_them_as_torch_does_and_keeps_the_carry_name():
    """`for attn, ff in self.layers: x = attn(x) + x; x = ff(x) + x`: not `item[0]`, `item[1]` and
    `x_1` for the value between the two."""
    lines = _lines(_exported("pairs"))
    start = lines.index('for attn, ff in params["layers"]:')
    assert lines[start + 1 : start + 4] == [
        "x = mixer_forward(attn, x, config=config) + x",
        "x = feed_forward(ff, x, config=config) + x",
        "return x",
    ], lines
    assert not any(re.search(r"\bitem\b|\bx_1\b", line) for line in lines[start - 3 : start + 4])


def test_pairs_the_params_do_not_hold_whole_are_not_unpacked():
    """`for attn, ff in self.layers` where `ff` (a ReLU) has no parameters: `params["layers"][i]`
    holds one item, so unpacking it into two would fail; the element stays one name."""
    lines = _lines(_exported("halves"))
    assert not any(line.startswith("for attn, ff in") for line in lines), lines
    assert any(re.fullmatch(r"for \w+ in params\[\"layers\"\]:", line) for line in lines), lines


def test_a_def_whose_other_returned_items_are_none_returns_the_value_itself():
    """transformers' `return attn_output, attn_weights` (None): the def returns `attn_output`, its
    caller binds it (no `(hidden_states_1,) = ...` or `[0]`); the entry keeps torch's `(x, None)`."""
    text = _exported("decoder")
    attention = text.partition("\ndef attention_forward(")[2].partition("\n\n\n")[0]
    assert attention.rstrip().endswith("return attn_output"), attention
    assert re.search(r"\n    hidden_states_1 = attention_forward\(", text), text
    code = text.partition("\ndef forward(")[2].partition("\ndef load_params")[0]
    assert "[0]" not in code and "(hidden_states_1,)" not in code, code
    assert "return x, None" in text, text


def test_values_of_a_dict_display_are_named_by_their_keys():
    """Gemma 2's `{"full_attention": create_causal_mask(...), "sliding_attention": ...}`: each mask
    named by its key, not after the function that made it."""
    lines = _lines(_exported("decoder"))
    assert "full_attention = (jnp.tril(scores) - 1.0) * 1000000000.0" in lines, lines
    assert "sliding_attention = (jnp.tril(jnp.triu(scores, k=-2)) - 1.0) * 1000000000.0" in lines, lines
    assert "attention_masks = [sliding_attention, full_attention]" in lines, lines


def test_a_module_called_through_a_lambda_is_named_by_its_attribute():
    """minGPT's `self.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))`: the GELU's value is `act`, the
    module it is, not `mlpf`, the lambda that called it."""
    text = _exported("block")
    assert "act = new_gelu_forward(m_c_fc)" in _lines(text), text
    assert "mlpf" not in text, text


def test_an_item_update_is_a_new_version_of_its_array():
    """`e[..., 1] += 1.0`: `e = e.at[..., 1].set(...)`, not a value named `idiom`."""
    lines = _lines(_exported("bump"))
    assert "e = e.at[..., 1].set(e[..., 1] + 1.0)" in lines, lines
    assert not any("idiom" in line for line in lines), lines


def test_a_slice_written_into_another_tensor_stays_in_the_set():
    """`d[:, 1:3] = h[:, :2]`: one line, `d = d.at[:, 1:3].set(h[:, :2])`, no `h_slice` of its own."""
    lines = _lines(_exported("write"))
    assert "d = d.at[:, 1:3].set(h[:, :2])" in lines, lines
    assert not any("h_slice" in line for line in lines), lines


def test_the_forms_in_a_class_style():
    """The returned value itself and the names hold in a class style too (NNX; Equinox writes the
    same bodies, tests/test_styles.py)."""
    text = _exported("decoder", "nnx")
    assert re.search(r"return attn_output\n", text), text
    assert "attention_masks = [sliding_attention, full_attention]" in text, text
    block = _exported("block", "nnx")
    assert "act = self.mlp.act(m_c_fc)" in block and "mlpf" not in block, block
