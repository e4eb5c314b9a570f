"""The search for which sizes move (`render.lower.merge.size_search`): the same sizes as trying each
set alone first, from fewer retraces.

The model is the gpt-fast Llama sample at tiny size traced on a sequence as long as its KV cache has
heads (2): equal sizes tie the cache's heads to the sequence, and moving them together is refused,
which is the 70B command's case (a sequence of 8, 8 KV heads) at a size a test can afford.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import load_sample

from jaxside.annotate.check import check, load_module
from jaxside.render.lower import lower
from jaxside.render.lower.merge import input_sizes
from jaxside.render.module import render_program
from jaxside.tracing import Capture


class Counted:
    """The capture again at other sizes, counting the retraces torch takes and those it refuses."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args
        self.taken = self.refused = 0

    def __call__(self, resize: dict[str, tuple[int, ...]]) -> Any:
        try:
            trace = Capture(resize=resize)(self.fn, *self.args)
        except Exception:
            self.refused += 1
            raise
        self.taken += 1  # each lowered once: `lower` lowers every retrace it gets
        return trace


def llama_heads_as_long_as_the_sequence() -> tuple[Any, tuple[Any, ...]]:
    llama = load_sample("llama_model")
    torch.manual_seed(0)
    config = llama.ModelArgs(block_size=16, vocab_size=32, n_layer=1, n_head=4, n_local_heads=2, dim=32)
    model = llama.Transformer(config)
    model.setup_caches(max_batch_size=1, max_seq_length=config.block_size)
    args = (torch.randint(0, config.vocab_size, (1, 2)), torch.arange(2))
    assert model.layers[0].attention.kv_cache.k_cache.shape[1] == args[0].shape[1]  # the tie by size
    return model.eval(), args


def sizes(program: Any) -> tuple[Any, ...]:
    generic = [[str(d) for d in dims] for dims in program.sizes.generic]
    fixed = [([str(d) for d in dims], why) for dims, why in program.sizes.fixed]
    bounded = [([str(d) for d in dims], why) for dims, why in program.sizes.bounded]
    return generic, fixed, bounded


@pytest.fixture(scope="module")
def exports() -> dict[str, Any]:
    """The export with the search, and with each set tried alone first (the search turned off)."""
    model, args = llama_heads_as_long_as_the_sequence()
    trace = Capture()(model, *args)
    found: dict[str, Any] = {"model": model}
    for way in ("search", "set by set"):
        retrace = Counted(model, *args)
        with pytest.MonkeyPatch.context() as patch:
            if way == "set by set":
                patch.setattr(input_sizes, "search", lambda *given: None)
            program = lower(trace, retrace)
        found[way] = (program, retrace)
    return found


def test_the_search_finds_the_sizes_trying_each_set_alone_finds(exports):
    (searched, _), (alone, _) = exports["search"], exports["set by set"]
    assert sizes(searched) == sizes(alone)
    assert render_program(searched, source="test") == render_program(alone, source="test")
    generic, fixed, _ = sizes(searched)
    assert [[d for d in dims if "cache" not in d] for dims in generic] == [
        ["idx.shape[0]"], ["idx.shape[1]", "input_pos.shape[0]"],
        ["freqs_cis.shape[0]", "causal_mask.shape[0]", "causal_mask.shape[1]"],
    ]
    heads, width = (dims for dims, _ in fixed)
    cache = "layers.0.attention.kv_cache"
    assert heads == [f"{cache}.k_cache.shape[1]", f"{cache}.v_cache.shape[1]"]
    assert width == [d.replace("[1]", "[3]") for d in heads]


def test_the_search_takes_three_retraces_where_each_set_alone_takes_nine(exports):
    _, searched = exports["search"]
    _, alone = exports["set by set"]
    # The search: every set together (at batch 2, then refused), the sequence without the cache's
    # heads refused while the head width moves too, the batch without the cache's refused, then
    # the plan written (two more); each part left out refused alone (three), the untie refused.
    assert (searched.taken, searched.refused) == (3, 6)
    assert (alone.taken, alone.refused) == (9, 4)


def test_the_export_runs_at_another_batch_and_sequence(exports):
    program, _ = exports["search"]
    module = load_module(render_program(program, source="test"))
    model = exports["model"]
    model.setup_caches(max_batch_size=3, max_seq_length=model.config.block_size)
    try:
        args = (torch.randint(0, model.config.vocab_size, (3, 5)), torch.arange(5))
        comparisons = check(module, program, model, args, {})
    finally:
        model.setup_caches(max_batch_size=1, max_seq_length=model.config.block_size)
    assert comparisons and all(c.ok for c in comparisons), [c.line() for c in comparisons]


class ProductLimit(torch.nn.Module):
    """Takes each size alone up to three times the traced one, but not both at once: the search
    finds `x`'s alone, `y` then moves alone too, so each set is tried alone as before."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] * y.shape[0] > 72:
            raise ValueError(f"at most 72 pairs, not {x.shape[0]} * {y.shape[0]}")
        return x.sum() * y.mean()


def test_a_part_the_search_left_out_that_moves_alone_sends_it_set_by_set():
    model, args = ProductLimit(), (torch.randn(4), torch.randn(6))
    trace = Capture()(model, *args)
    found = {}
    for way in ("search", "set by set"):
        retrace = Counted(model, *args)
        with pytest.MonkeyPatch.context() as patch:
            if way == "set by set":
                patch.setattr(input_sizes, "search", lambda *given: None)
            found[way] = (sizes(lower(trace, retrace)), retrace.taken, retrace.refused)
    assert found["search"][0] == found["set by set"][0]
    generic, fixed, _ = found["search"][0]
    assert generic == [] and [dims for dims, _ in fixed] == [["x.shape[0]"], ["y.shape[0]"]]
    assert all("72 pairs" in why for _, why in fixed)  # moving both at once is refused
    assert found["search"][1:] == found["set by set"][1:]  # the same retraces, in another order
