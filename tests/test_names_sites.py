"""Values named as torch names them at the call site (issue 29): the exported code runs and matches
torch, and its names are the ones a porter would write.

tests/models/site_names.py is written for this (a gpt-fast-style decoder); transformers' Llama is the
material nobody here wrote (its returned KV cache)."""

from __future__ import annotations

import functools
import re

import pytest
import torch
from conftest import load_model

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture


def _model() -> object:
    return load_model("site_names")


@functools.cache
def _exported(dtype: torch.dtype = torch.float32) -> tuple[object, tuple, object, str]:
    model, args = _model().build(dtype)
    program = lower(capture(model, *args))  # static sizes: the names are the same, the lowering faster
    return model, args, program, render_program(program, source="tests/models/site_names.py")


def _def(text: str, name: str) -> str:
    """The text of the def `name` in a module's text."""
    return text.partition(f"\ndef {name}(")[2].partition("\n\n\n")[0]


@functools.cache
def _matches_torch(dtype: torch.dtype = torch.float32, style: str | None = None) -> str:
    model, args, program, text = _exported(dtype)
    if style is not None:
        text = module_source(program, "tests/models/site_names.py", style, model)
    run = runner(style) if style else None
    report = check_export(load_module(text), program, Entry(model, args, {}), run=run)
    assert report.ok, report.table()
    return text


def test_a_gated_product_is_named_for_the_whole_product():
    text = _matches_torch()
    body = _def(text, "feed_forward")
    assert "silu_times_w3 = silu * (x @ " in body, body  # not `silu = silu(...) * (...)`
    assert "return silu_times_w3 @ " in body, body


def test_a_module_result_takes_the_local_torch_binds_it_to():
    text = _matches_torch()
    block = _def(text, "block_forward")
    assert "attn_out = attention_forward(" in block and "h = x + attn_out" in block, block
    entry = _def(text, "forward")
    assert "x = norm_forward(params[\"norm\"], x)" in entry, entry  # `x = self.norm(x)`


def test_an_unnamed_call_named_as_its_def_stays_in_its_expression():
    """`out = h + self.feed_forward(self.ffn_norm(h))`: no `feed_forward_out` line; read twice (by
    `F.normalize`), it needs a name, and only there the functional export says `_out`."""
    text = _matches_torch()
    assert "out = h + feed_forward(params[\"feed_forward\"], " in _def(text, "block_forward")
    assert "feed_forward_out = feed_forward(" in _def(text, "forward")


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_class_styles_give_the_suffixed_name_back(style):
    """A method is no module-level name: the value is `feed_forward`, as `self.feed_forward` makes it."""
    text = _matches_torch(style=style)
    assert not re.search(r"\bfeed_forward_out\b", text), text
    assert "feed_forward = self.feed_forward(x * 2.0)" in text
    assert "out = h + self.feed_forward(self.ffn_norm(h))" in text


def test_a_promotion_cast_is_named_for_its_operand_at_bf16():
    """`pairs[..., 0] * table[..., 0]` with float pairs and a bf16 table: the cast is `table_0`
    (gpt-fast's `xshaped_0_1` before)."""
    text = _matches_torch(torch.bfloat16)
    body = _def(text, "rotate_pairs")
    assert "table_0 = table[..., 0].astype(jnp.float32)" in body, body
    assert "table_1 = table[..., 1].astype(jnp.float32)" in body, body
    assert not re.search(r"\bpairs_\d_\d\b", body), body


def test_a_returned_cache_is_named_as_the_cache():
    """transformers' Llama at its default call: each layer's KV cache is `keys`/`values` (their
    `past_key_values` keys), in that order, at every def they pass through."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, max_position_embeddings=64,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    args = (torch.randint(0, 64, (1, 8)),)
    program = lower(capture(model, *args))
    text = render_program(program, source="transformers LlamaForCausalLM")
    report = check_export(load_module(text), program, Entry(model, args, {}))
    assert report.ok, report.table()
    assert '{"keys": keys, "values": values}' in text, text
    assert not re.search(r"\b(value_states|k_embed)(_\d+)?\b", _def(text, "forward")), text
    layer = _def(text, "llama_decoder_layer_forward")
    # its `(attn_output, attn_weights)` with the weights None: the value itself, beside the cache
    assert re.search(r"\n    hidden_states_1, keys, values = llama_attention_forward\(", layer), layer
    assert layer.rstrip().endswith("return hidden_states, keys, values"), layer
    mlp = _def(text, "llama_mlp_forward")
    assert "act_fn_times_up_proj = act_fn * (" in mlp, mlp


class _Writes(torch.nn.Module):
    """Parts of a value written into another (`d[:, 1:3] = h[:, :2]`) and read (`h[:, -1]`): each part
    is a value of its own, never the whole under torch's name for it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.proj(x)
        d = torch.zeros_like(h)
        d[:, 1:3] = h[:, :2]
        return d + h, torch.tanh(h[:, -1]) * h[:, 0]


def test_a_part_of_a_value_is_never_named_as_the_whole():
    torch.manual_seed(0)
    model, args = _Writes().eval(), (torch.randn(3, 4),)
    program = lower(capture(model, *args))
    text = render_program(program, source="test")
    body = _def(text, "forward")
    bound = re.findall(r"^    (\w+) = ", body, flags=re.M)
    assert bound.count("h") == 1 and not any(re.fullmatch(r"h_\d+", n) for n in bound), text
    assert "h_slice = h[:, :2]" in body or "h[:, :2]" in body, text  # its own name, or read in place
    report = check_export(load_module(text), program, Entry(model, args, {}))
    assert report.ok, report.table()
