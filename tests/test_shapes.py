"""Shape-generic exports: traced at one shape, run at others, equal to torch eager there.

Each test exports a model the way `annotate --export` does (the capture again at other sizes),
runs the module at shapes it was not traced at, and compares with torch on the same inputs.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import pytest
import torch
from conftest import SAMPLES, load_sample

from jaxside.annotate.check import check, load_module, to_jax
from jaxside.annotate.sizes import other_shape
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import Capture


def export(fn: Any, *args: Any) -> tuple[Any, Any]:
    """(module, program) of `fn` traced at `args`, its sizes generic where they follow the inputs."""
    trace = Capture()(fn, *args)
    program = lower(trace, lambda resize: Capture(resize=resize)(fn, *args))
    return load_module(render_program(program, source="test")), program


@functools.cache
def sample(name: str) -> tuple[Any, tuple, Any, Any]:
    fn, args = load_sample(name).example()[:2]
    return (fn, tuple(args), *export(fn, *args))


def assert_matches(module: Any, program: Any, fn: Any, *args: Any) -> None:
    comparisons = check(module, program, fn, args, {})
    assert comparisons
    for comparison in comparisons:
        assert comparison.rel <= 1e-5 and comparison.ok, comparison.line()


@pytest.mark.parametrize(
    ("name", "shape"),
    [("mlp", (3, 32)), ("mlp", (17, 32)), ("cnn", (5, 3, 16, 16)), ("cnn", (2, 3, 24, 24)),
     ("cnn", (1, 3, 32, 32)), ("cnn", (3, 3, 16, 28)), ("rnn", (7, 5, 8)), ("moe", (3, 6, 32)),
     ("moe", (2, 11, 32))],
)
def test_sample_runs_at_another_shape(name, shape):
    fn, args, module, program = sample(name)
    assert program.sizes is not None and program.sizes.generic
    torch.manual_seed(1)
    assert_matches(module, program, fn, torch.randn(shape))


def test_sizes_are_expressions_the_torch_code_named():
    _, _, module, program = sample("llama_model")
    text = render_program(program, source="test")
    assert "bsz, seqlen, _ = x.shape" in text
    assert "jnp.reshape(q, (bsz, seqlen, config.n_head, config.head_dim))" in text
    assert "(1, 8, 4, 16)" not in text
    generic = [[str(d) for d in dims if not d.state] for dims in program.sizes.generic]
    assert generic == [["idx.shape[0]"], ["idx.shape[1]", "input_pos.shape[0]"], []]
    length = {str(d) for d in program.sizes.generic[2]}  # the caches' length, and the mask's
    assert {"layers.1.attention.kv_cache.v_cache.shape[2]", "causal_mask.shape[1]"} <= length
    params, state = module.load_params(llama_model(1))
    with pytest.raises(ValueError, match=r"input_pos\.shape\[0\] must equal idx\.shape\[1\]"):
        module.forward(params, state, jax.numpy.zeros((1, 4), "int32"), jax.numpy.arange(5))


def llama_model(max_batch_size: int) -> torch.nn.Module:
    module = load_sample("llama_model")
    torch.manual_seed(0)
    model = module.build("tiny")
    model.setup_caches(max_batch_size=max_batch_size, max_seq_length=model.config.block_size)
    return model


@pytest.mark.parametrize("batch", [1, 2])
def test_llama_prefill_then_decodes_continue_the_cache(batch):
    """Traced on an 8-token prefill at batch 1; run a prefill, a 1-token and a 3-token decode."""
    _, args, module, program = sample("llama_model")
    model = llama_model(batch)
    params, state = module.load_params(model)
    forward = jax.jit(module.forward)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(batch)
    start = 0
    for length in (8, 1, 3):
        idx = torch.randint(0, vocab, (batch, length), generator=generator)
        input_pos = torch.arange(start, start + length)
        logits, state = forward(params, state, *to_jax((idx, input_pos)))
        with torch.no_grad():
            expected = model(idx, input_pos)
        assert logits.shape == tuple(expected.shape)
        np.testing.assert_allclose(np.asarray(logits), expected.numpy(), rtol=1e-4, atol=1e-5)
        start += length
    cache = model.layers[0].attention.kv_cache.k_cache
    new_cache = state["layers"][0]["attention"]["kv_cache"]["k_cache"]
    np.testing.assert_allclose(np.asarray(new_cache), cache.numpy(), rtol=1e-5, atol=1e-6)


class SizeBranch(torch.nn.Module):
    """Takes a Python branch on the sequence length: the export cannot follow it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] > 4:
            return self.proj(x[:, :4]).sum(1)
        return self.proj(x).mean(1)


def test_a_size_dependent_branch_fixes_that_size_with_a_clear_error():
    torch.manual_seed(0)
    model = SizeBranch()
    x = torch.randn(2, 3, 4)
    module, program = export(model, x)
    fixed = {str(d): why for dims, why in program.sizes.fixed for d in dims}
    assert "changes with the size" in fixed["x.shape[1]"]
    assert [str(d) for dims in program.sizes.generic for d in dims] == ["x.shape[0]"]
    assert_matches(module, program, model, torch.randn(5, 3, 4))  # batch stays generic
    params = module.load_params(model)
    with pytest.raises(ValueError, match=r"x\.shape\[1\] is fixed at 3"):
        module.forward(params, jax.numpy.zeros((2, 6, 4)))
    text = render_program(program, source="test")
    assert "`x.shape[1]` = 3: `forward` changes with the size" in " ".join(text.split())


def test_static_shapes_keep_every_size_as_traced():
    fn, args = load_sample("mlp").example()[:2]
    program = lower(Capture()(fn, *args))
    assert program.sizes is None
    assert "shapes and non-tensor inputs are baked in" in render_program(program, source="test")


def test_check_runs_at_a_smaller_and_a_larger_shape_and_static_shapes_keeps_the_traced_ones(tmp_path, capsys):
    from jaxside.annotate.cli import main

    out = tmp_path / "cnn_jax.py"
    assert main([str(SAMPLES / "cnn.py"), "--export", "-o", str(out), "--check"]) == 0
    err = capsys.readouterr().err
    assert "and at a smaller shape (x: [2, 3, 8, 8]):" in err  # the batch of 2 stays: no size 1
    assert "and at a larger shape (x: [4, 3, 32, 32]):" in err
    assert err.count(" ok\n") == 3
    generic = out.read_text(encoding="utf-8")
    assert main([str(SAMPLES / "cnn.py"), "--export", "-o", str(out), "--check", "--static-shapes"]) == 0
    assert "and at a" not in capsys.readouterr().err  # no other shape: every size as traced
    static = out.read_text(encoding="utf-8")
    assert "(x.shape[0], -1)" in generic and "(2, -1)" in static and "x.shape" not in static


def hf_causal_lm(kind: str) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
        )
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.GPT2Config(
        vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_hf_causal_lm_traced_at_1x8_runs_at_2x5_and_1x12(kind):
    model = hf_causal_lm(kind)
    module, program = export(model, torch.randint(0, 128, (1, 8)))
    assert [[str(d) for d in dims] for dims in program.sizes.generic] == [
        ["input_ids.shape[0]"], ["input_ids.shape[1]"]
    ]
    for shape in [(2, 5), (1, 12)]:
        assert_matches(module, program, model, torch.randint(0, 128, shape))


def test_check_at_another_shape_resizes_a_cache_passed_in():
    """A decode step given the prompt's `DynamicCache`: the cache's batch follows `input_ids`'s, so
    the second shape resizes the tensors it holds too (it used to trip the export's own guard)."""
    model = hf_causal_lm("llama")
    with torch.no_grad():
        cache = model(torch.randint(0, 128, (1, 8)), use_cache=True).past_key_values
    args = (torch.randint(0, 128, (1, 1)), None, None, cache)
    module, program = export(model, *args)
    again = other_shape(program, model, args, {})
    assert again is not None
    args2, kwargs2, where = again
    assert "input_ids: [2, 2]" in where and "past_key_values['layers'][1]['values']: [2," in where
    assert cache.layers[0].keys.shape[0] == 1  # the user's cache is left as it was
    comparisons = check(module, program, model, args2, kwargs2)
    assert comparisons and all(c.ok for c in comparisons), [c.line() for c in comparisons]


class BasicBlock(torch.nn.Module):
    """A ResNet block: instances differ in widths and strides; a downsample only where they change."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            conv = nn.Conv2d(inplanes, planes, 1, stride, bias=False)
            self.downsample = nn.Sequential(conv, nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return torch.relu(out + identity)


class ResNetish(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, 1, 1)
        widths = [(8, 8, 1), (8, 8, 1), (8, 16, 2), (16, 16, 1), (16, 32, 2), (32, 32, 1)]
        self.layers = torch.nn.Sequential(*(BasicBlock(*w) for w in widths))
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(self.stem(x)).mean((2, 3)))


def test_blocks_of_other_widths_share_a_def():
    torch.manual_seed(0)
    model = ResNetish().eval()
    module, program = export(model, torch.randn(2, 3, 16, 16))
    blocks = [f for f in program.functions if f.calls[0].function == "BasicBlock.forward"]
    (block,) = blocks  # with a downsample and without: one def, the downsample under a flag
    assert len(block.calls) == 6 and [k.name for k in block.keywords] == ["stride", "downsample", "config"]
    text = render_program(program, source="test")
    # Batch norm's statistics as `v[:, None, None]`: no block's width is written anywhere (it was
    # `jnp.reshape(v, (1, x.shape[1] * 2, 1, 1))` in a downsampling block).
    # (read through `lax.stop_gradient`: a buffer, which torch never differentiates).
    assert 'lax.stop_gradient(params["bn1"]["running_mean"])[:, None, None]' in text
    assert "jnp.reshape" not in text
    assert_matches(module, program, model, torch.randn(5, 3, 16, 16))


def _grouped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """An HF decoder's attention with grouped heads: `repeat_kv`, a causal mask of `tril`."""
    from transformers.models.llama.modeling_llama import repeat_kv

    key_states, value_states = repeat_kv(key, 2), repeat_kv(value, 2)
    causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril(diagonal=0)
    scores = (query @ key_states.transpose(-1, -2)).masked_fill(~causal, float("-inf"))
    return scores.softmax(-1).tril(1) @ value_states


def test_repeat_kv_and_tril_are_jnp_repeat_and_tril_at_every_shape():
    """HF's `repeat_kv` is `jnp.repeat` (n_rep, a config number, written; the batch and the
    sequence read from the shapes: none is written), `torch.ones(L, S).tril()` and `x.tril(1)`
    are `jnp.tril`; the export matches torch at the traced shape and at others."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    shapes = [(2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)]
    module, program = export(_grouped_attention, *(torch.randn(s) for s in shapes))
    text = render_program(program, source="test")
    body = text[text.index("\ndef ") :]
    for expected in ("key_states = jnp.repeat(key, 2, axis=1)", "value_states = jnp.repeat(value, 2, axis=1)",
                     "jnp.tril(jnp.ones((query.shape[2], query.shape[2]), jnp.bool_))",
                     "jnp.tril(jax.nn.softmax(scores, axis=-1), 1)"):
        assert expected in body, body
    code = body.split('"""', 2)[2]  # after the docstring (which names a line of this file)
    assert "jnp.arange" not in code and "broadcast_to" not in code and "5" not in code, body
    for batch, seq in [(2, 5), (3, 7), (1, 12)]:
        inputs = [torch.randn(batch, heads, seq, 8) for heads in (4, 2, 2)]
        assert_matches(module, program, _grouped_attention, *inputs)


def test_asking_torch_about_another_shape_leaves_a_cache_passed_in_as_it_was():
    """`--check` runs torch eager at a shape before comparing there (a shape torch refuses is not
    compared); a `DynamicCache` passed in is updated in place by a step, so it asks on a copy."""
    from jaxside.annotate.check import torch_refusal

    model = hf_causal_lm("llama")
    with torch.no_grad():
        cache = model(torch.randint(0, 128, (1, 8)), use_cache=True).past_key_values
    assert torch_refusal(model, (torch.randint(0, 128, (1, 2)),), {"past_key_values": cache}) is None
    assert cache.layers[0].keys.shape[2] == 8
    assert "IndexError" in torch_refusal(model, (torch.randint(200, 300, (1, 2)),), {})


def test_a_returned_cache_is_named_as_the_cache():
    """HF's Llama at `use_cache=True`: the `DynamicCache` it returns is `keys`, `values` along the
    defs, as the output's path says (`['past_key_values']['layers'][0]['keys']`), not the locals
    that made them (`k_embed`, `value_states`)."""
    model = hf_causal_lm("llama")
    args = (torch.randint(0, 128, (1, 8)), None, None, None, None, None, True)  # use_cache=True
    module, program = export(model, *args)
    text = render_program(program, source="test")
    assert "k_embed, " not in text and '{"keys": keys, "values": values}' in text, text
    assert_matches(module, program, model, *args)
