"""transformers' decoders at their default call (`use_cache=True`: each layer fills a `DynamicCache`)
export their layers as one loop, as with `use_cache=False`: the loop collects each layer's cache
entries, the model def returns them as one list, and its caller builds the cache's structure from it
(render/lower/loop_outputs.py). Executed and compared with torch, logits and every cache entry."""

from __future__ import annotations

import ast
import functools
import re
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.ir import Loop
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import Capture

transformers = pytest.importorskip("transformers")

LAYERS = 2


def decoder(kind: str, entry: str = "lm") -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=LAYERS, n_head=2, n_positions=16,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config).eval()
        return model.transformer if entry == "base" else model
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=LAYERS, num_attention_heads=2, num_key_value_heads=1,
                                      max_position_embeddings=16)
    model = transformers.LlamaForCausalLM(config).eval()
    return model.model if entry == "base" else model


@functools.cache
def exported(kind: str, entry: str = "lm") -> tuple[torch.nn.Module, torch.Tensor, Any, str]:
    model = decoder(kind, entry)
    ids = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(0))
    program = lower(Capture()(model, ids))  # every size as traced: one trace
    return model, ids, program, render_program(program, source="test")


def layer_calls(program: Any, layers: int = LAYERS) -> tuple[list[Loop], str]:
    """The loops over the decoder layers, and the layer def's name."""
    layer = next(f for f in program.functions if len(f.calls) == layers and "Layer" in f.calls[0].function
                 or f.calls[0].function == "GPT2Block.forward")
    def calls_layer(loop: Loop) -> bool:
        calls = [n for n in ast.walk(loop.node()) if isinstance(n, ast.Call)]
        return any(getattr(n.func, "id", "") == layer.name for n in calls)

    loops = [s for f in program.functions for s in f.body if isinstance(s, Loop) and calls_layer(s)]
    return loops, layer.name


def matches_torch(text: str, model: torch.nn.Module, ids: torch.Tensor) -> Any:
    """Runs the export; its logits and every cache entry are torch's. Its cache's layers."""
    module = load_module(text)
    got = module.forward(module.load_params(model), jnp.asarray(ids.numpy()))
    with torch.no_grad():
        want = model(ids)
    np.testing.assert_allclose(got["logits"], want.logits.numpy(), rtol=1e-5, atol=1e-6)
    layers = got["past_key_values"]["layers"]
    for mine, theirs in zip(layers, want.past_key_values.layers, strict=True):
        np.testing.assert_allclose(mine["keys"], theirs.keys.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine["values"], theirs.values.numpy(), rtol=1e-5, atol=1e-6)
    return layers


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_decoder_layers_at_the_default_call_are_one_loop_and_match_torch(kind):
    model, ids, program, text = exported(kind)
    loops, layer = layer_calls(program)
    assert len(loops) == 1 and len(loops[0].calls) == LAYERS, text
    assert text.count(f"{layer}(") == 2, text  # its def and the loop's one call, not one per layer
    # torch's cache layer holds keys, then values: the layer def gives them back in that order
    assert "past_key_values.append((keys, values))" in text, text
    assert re.search(rf"hidden_states, keys, values = {layer}\(", text), text
    assert re.search(r"for \w+, \w+ in past_key_values\s*\]", text), text  # the caller's comprehension
    layers = matches_torch(text, model, ids)
    assert isinstance(layers, list) and len(layers) == LAYERS


def test_a_decoder_entry_fills_the_cache_structure_in_its_loop():
    """The base model as the entry: its own return holds the cache, built in the loop."""
    model, ids, program, text = exported("llama", "base")
    loops, _ = layer_calls(program)
    assert len(loops) == 1 and 'layers.append({"keys": keys, "values": values})' in text, text
    report = check_export(load_module(text), program, Entry(model, (ids,), {}))
    assert report.ok and "['past_key_values']['layers'][1]['values']" in report.table(), report.table()


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_the_cache_loop_in_class_styles(style):
    model, ids, program, _ = exported("llama")
    text = module_source(program, "test", style, model)
    assert "for decoder_layer in self.layers:" in text and "past_key_values.append(" in text, text
    report = check_export(load_module(text), program, Entry(model, (ids,), {}), run=runner(style))
    assert report.ok and "['past_key_values']['layers'][1]['keys']" in report.table(), report.table()


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_a_cache_passed_in_is_zipped_into_the_layer_loop(kind):
    """A decode step given the prompt's `DynamicCache`: each layer's entries come in as one list the
    loop zips with the layers, and the caller passes it from the cache's own structure."""
    model = decoder(kind)
    with torch.no_grad():
        cache = model(torch.randint(0, 32, (1, 6))).past_key_values
    ids = torch.randint(0, 32, (1, 1))
    args = (ids, None, None, cache) if kind == "llama" else (ids, cache)
    program = lower(Capture()(model, *args))
    text = render_program(program, source="test")
    loops, layer = layer_calls(program)
    assert len(loops) == 1 and text.count(f"{layer}(") == 2, text
    header = r'for \w+, \(keys, values\) in zip\(params\["(layers|h)"\], past_key_values\):'
    assert re.search(header, text), text
    # the loop rebinds its own names (nothing outside it reads them); the list it fills is the new
    # cache, beside the one passed in, and the caller's takes the passed-in one's name, dead by then
    assert f"hidden_states, keys, values = {layer}(" in text, text
    assert "new_past_key_values.append((keys, values))" in text, text
    assert re.search(r"outputs, past_key_values = \w+\(", text), text  # (`transformer_outputs`)
    assert not re.search(r"\b(keys|values|past_key_values)_\d", text), text
    assert '[(layer["keys"], layer["values"]) for layer in past_key_values["layers"]]' in text, text
    report = check_export(load_module(text), program, Entry(model, args, {}))
    assert report.ok and "['past_key_values']['layers'][1]['values']" in report.table(), report.table()


class Entries:
    """A cache of the user's own, filled layer by layer as `DynamicCache` is."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: Entries) -> torch.Tensor:
        k = self.proj(x)
        cache.keys.append(k)
        return x + torch.tanh(k)


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(3))

    def forward(self, x: torch.Tensor, cache: Entries) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, cache)
        return x


class Top(torch.nn.Module):
    def __init__(self, doubled: bool) -> None:
        super().__init__()
        self.stack, self.doubled = Stack(), doubled

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        cache = Entries()
        h = self.stack(x, cache)
        return h, [k * 2 for k in cache.keys] if self.doubled else cache.keys


@pytest.mark.parametrize("doubled", [False, True])
def test_a_caller_reads_the_collected_entries_as_a_list_or_unpacks_them(doubled):
    """The stack's loop collects each layer's entry; the caller returns the list itself, or, where
    it computes with each entry, unpacks the list again. Both exact."""
    torch.manual_seed(0)
    model, x = Top(doubled).eval(), torch.randn(2, 8)
    program = lower(Capture()(model, x))
    text = render_program(program, source="test")
    loops, _ = layer_calls(program, 3)
    assert len(loops) == 1 and text.count("layer_forward(") == 2 and "cache.append(k)" in text, text
    if doubled:
        assert re.search(r"h, \[k, k_1, k_2\] = stack_forward", text), text
    else:
        assert "h, cache = stack_forward(params[\"stack\"], x)\n    return h, cache\n" in text, text
    report = check_export(load_module(text), program, Entry(model, (x,), {}))
    assert report.ok and "[1][2]" in report.table(), report.table()


@functools.cache
def gemma2() -> tuple[torch.nn.Module, torch.Tensor, Any, str]:
    """A tiny Gemma 2 of 4 layers, sliding-window and full attention alternating."""
    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=16, sliding_window=3)
    assert config.layer_types[:2] == ["sliding_attention", "full_attention"]
    model = transformers.Gemma2ForCausalLM(config).eval()
    ids = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(0))
    program = lower(Capture()(model, ids))
    return model, ids, program, render_program(program, source="test")


def test_layers_reading_alternating_masks_loop_over_a_list_of_them():
    """Each Gemma 2 layer reads its own type's mask: the loop zips the layers with the list of the
    masks they read, built before it; the cache entries, returned full layers' first, come back in
    layer order. Exact against torch, logits and every cache entry."""
    model, ids, program, text = gemma2()
    loops, layer = layer_calls(program, 4)
    assert len(loops) == 1 and len(loops[0].calls) == 4 and text.count(f"{layer}(") == 2, text
    masks = re.search(r"(\w+) = \[\s*(\w+),\s*(\w+),\s*\2,\s*\3,?\s*\]\n", text)
    # each mask named by its key in torch's `causal_mask_mapping` (not `cswcm`)
    assert masks and (masks.group(2), masks.group(3)) == ("sliding_attention", "full_attention"), text
    assert f'for decoder_layer, attention_mask in zip(params["layers"], {masks.group(1)}):' in text, text
    matches_torch(text, model, ids)


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_the_mask_list_loop_in_class_styles(style):
    model, ids, program, _ = gemma2()
    text = module_source(program, "test", style, model)
    assert re.search(r"for decoder_layer, attention_mask in zip\(self\.layers, \w+\):", text), text
    report = check_export(load_module(text), program, Entry(model, (ids,), {}), run=runner(style))
    assert report.ok and "['past_key_values']['layers'][3]['keys']" in report.table(), report.table()


def test_t5_blocks_after_the_first_loop_over_the_rest_of_the_list():
    """T5's block 0 computes the position bias (a def of its own); blocks 1.. loop over
    `params["block"][1:]`, in the encoder and in the decoder, whose self- and cross-attention
    caches are each one list, led by block 0's entries. Exact against torch, every cache entry."""
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=3, num_heads=2,
                                   decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    ids = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(0))
    kwargs = {"decoder_input_ids": torch.randint(0, 32, (1, 3), generator=torch.Generator().manual_seed(1))}
    program = lower(Capture()(model, ids, **kwargs))
    text = render_program(program, source="test")
    assert text.count('for layer_module in params["block"][1:]:') == 2, text
    assert re.search(r"(\w+) = \[\(keys, values\)\]\n", text), text  # block 0's self-attention entries
    assert re.search(r"for \w+, \w+ in \w+\s*\]", text), text  # the caller's comprehension
    report = check_export(load_module(text), program, Entry(model, (ids,), kwargs))
    table = report.table()
    assert report.ok and "['cross_attention_cache']" in table and "['layers'][2]['values']" in table, table
