"""Config numbers by name: what torch read from module attributes is `config.<name>` in the export.

Two Llamas at a config whose numbers collide with no number the torch source writes (9 heads,
3 KV heads, width 72, head size 8): one in gpt-fast's style (written here), and transformers'
`LlamaForCausalLM`. Each is exported once, compared with torch, searched for a config number left
as a literal, and run at another config through `config_from(model)` on a model built with it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
from typing import Any

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from jaxside.annotate.check import check, load_module, to_jax
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import Capture

# -- a gpt-fast-style Llama (our own, in its style) -------------------------------------------------


@dataclasses.dataclass
class Args:
    vocab: int = 101
    layers: int = 2
    heads: int = 9
    kv_heads: int = 3
    width: int = 72
    hidden: int = 200
    eps: float = 1e-6


class Norm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(width) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SelfAttention(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.n_head = args.heads
        self.n_kv = args.kv_heads
        self.head_dim = args.width // args.heads
        self.width = args.width
        self.qkv = nn.Linear(args.width, (args.heads + 2 * args.kv_heads) * self.head_dim, bias=False)
        self.out = nn.Linear(args.width, args.width, bias=False)

    def forward(self, x, rope):
        batch, length, _ = x.shape
        kv_width = self.n_kv * self.head_dim
        q, k, v = self.qkv(x).split([self.width, kv_width, kv_width], dim=-1)
        q = q.view(batch, length, self.n_head, self.head_dim)
        k = k.view(batch, length, self.n_kv, self.head_dim)
        v = v.view(batch, length, self.n_kv, self.head_dim)
        q, k = rotate(q, rope), rotate(k, rope)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k = k.repeat_interleave(self.n_head // self.n_kv, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, length, self.width))


def rotate(x, rope):
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    cos, sin = rope[None, :, None, :, 0], rope[None, :, None, :, 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    turned = torch.stack([even * cos - odd * sin, odd * cos + even * sin], -1)
    return turned.flatten(3)


class Block(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = Norm(args.width, args.eps), Norm(args.width, args.eps)
        self.attn = SelfAttention(args)
        self.up = nn.Linear(args.width, args.hidden, bias=False)
        self.down = nn.Linear(args.hidden, args.width, bias=False)

    def forward(self, x, rope):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.down(F.silu(self.up(self.ffn_norm(x))))


class FastLlama(nn.Module):
    def __init__(self, args: Args) -> None:
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.width)
        self.blocks = nn.ModuleList(Block(args) for _ in range(args.layers))
        self.norm = Norm(args.width, args.eps)
        angles = torch.outer(torch.arange(40.0), 1e-2 ** (torch.arange(0, args.width // args.heads, 2) / 8))
        self.register_buffer("rope", torch.stack([angles.cos(), angles.sin()], -1))

    def forward(self, idx):
        x = self.embed(idx)
        rope = self.rope[: idx.shape[1]]
        for block in self.blocks:
            x = block(x, rope)
        return self.norm(x)


def hf_llama(heads: int = 9, kv_heads: int = 3, width: int = 72) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=101, hidden_size=width, intermediate_size=200, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=40,
        use_cache=False, rms_norm_eps=1e-6,
    )
    return transformers.LlamaForCausalLM(config).eval()


def fast_llama(**changes: Any) -> nn.Module:
    torch.manual_seed(0)
    return FastLlama(Args(**changes)).eval()


BUILDERS = {"fast": fast_llama, "hf": hf_llama}
OTHER = {"fast": dict(heads=4, kv_heads=2, width=64), "hf": dict(heads=4, kv_heads=2, width=64)}


@functools.cache
def traced(kind: str) -> tuple[nn.Module, Any, Any]:
    model = BUILDERS[kind]()
    idx = torch.randint(0, 101, (2, 8), generator=torch.Generator().manual_seed(0))
    return model, idx, Capture()(model, idx)


@functools.cache
def exported(kind: str) -> tuple[nn.Module, Any, Any, str]:
    model, idx, trace = traced(kind)
    program = lower(trace, lambda resize: Capture(resize=resize)(model, idx))
    text = render_program(program, source="test")
    return model, idx, program, text


# 9 heads, 3 KV heads (and 3 groups), width 72, head size 8 (and half of it), the split at 72 + 24,
# eps, 1/sqrt(8) as a float32 literal
CONFIG_NUMBERS = {9, 3, 72, 8, 24, 96, 4, 1e-06, 0.35355338}


def literals(text: str) -> list[tuple[str, Any]]:
    """(def, number) for each number in a def body that could be a config number: not an axis
    (`axis=3`), a permutation (`jnp.transpose(x, (0, 2, 1, 3))`) or an index (`x[..., 0]`)."""
    found = []
    for function in ast.parse(text).body:
        if not isinstance(function, ast.FunctionDef) or function.name in ("load_params", "config_from"):
            continue
        skip: set[int] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.keyword) and node.arg in ("axis", "axes"):
                skip |= {id(n) for n in ast.walk(node)}
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "jnp.transpose":
                skip |= {id(n) for n in ast.walk(node.args[1])}
            if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith(".shape"):
                skip |= {id(n) for n in ast.walk(node.slice)}  # leading dimensions: `x.shape[:3]`
            if isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Constant, ast.Tuple)):
                index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                skip |= {id(n) for item in index if isinstance(item, ast.Constant) for n in ast.walk(item)}
        found += [
            (function.name, node.value) for node in ast.walk(function)
            if isinstance(node, ast.Constant) and id(node) not in skip and type(node.value) in (int, float)
        ]
    return found


@pytest.mark.parametrize("kind", ["fast", "hf"])
def test_no_config_number_is_a_literal(kind):
    model, idx, program, text = exported(kind)
    left = [(name, v) for name, v in literals(text) if v in CONFIG_NUMBERS]
    assert not left, left
    assert "def config_from(model):" in text and "@dataclasses.dataclass(frozen=True)" in text
    comparisons = check(load_module(text), program, model, (idx,), {})
    assert comparisons and all(c.ok and c.rel <= 1e-5 for c in comparisons), [c.line() for c in comparisons]


def test_the_fast_llama_reads_like_its_torch():
    text = exported("fast")[3]
    for line in [
        "kv_width = config.n_kv * config.head_dim",
        "[config.width, config.width + kv_width]",
        "jnp.reshape(q, (batch, length, config.n_head, config.head_dim))",
        "jnp.repeat(k, config.n_head // config.n_kv, axis=1)",
        "(*x.shape[:3], -1, 2)",
        "q.shape[-1] ** -0.5",
        "+ config.eps",
        "def forward(params, idx, *, config=Config()):",
    ]:
        assert line in text, line


def test_the_hf_llama_reads_like_its_torch():
    text = exported("hf")[3]
    for line in ["-1, config.head_dim)", "config.num_key_value_groups", "* config.scaling",
                 "x.shape[-1] // 2", "config.variance_epsilon"]:
        assert line in text, line


@pytest.mark.parametrize("kind", ["fast", "hf"])
def test_config_from_another_model_runs_it(kind):
    """The export traced at 9 heads runs a model built with 4 (and width 64) by its config."""
    module = load_module(exported(kind)[3])
    traced = BUILDERS[kind]()
    assert module.config_from(traced) == module.Config()
    other = BUILDERS[kind](**OTHER[kind])
    config = module.config_from(other)
    assert config != module.Config() and hash(config) == hash(module.config_from(other))
    idx = torch.randint(0, 101, (3, 5), generator=torch.Generator().manual_seed(1))
    forward = jax.jit(module.forward, static_argnames="config")
    got = forward(module.load_params(other), *to_jax((idx,)), config=config)
    with torch.no_grad():
        want = other(idx)
    want = want.logits if hasattr(want, "logits") else want
    got = got["logits"] if isinstance(got, dict) else got
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-4, atol=1e-5)


def test_a_number_that_only_equals_an_attribute_stays_a_literal():
    """`x * 8` where the module has `self.head_dim = 8` but the line does not read it."""

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head_dim = 8
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x).reshape(2, 8) * 8 + self.head_dim

    torch.manual_seed(0)
    model, x = Scaled(), torch.randn(4, 4)
    program = lower(Capture()(model, x))
    text = render_program(program, source="test")
    assert "(2, 8)" in text and "* 8.0 + float(config.head_dim)" in text
    assert check(load_module(text), program, model, (x,), {})[0].ok


@pytest.mark.parametrize("kind", ["fast", "hf"])
def test_names_stage_the_same_bits_under_jit(kind, monkeypatch):
    """The export with config names computes bit for bit what the one with literals does."""
    import jaxside.render.lower.pipeline as pipeline

    model, idx, trace = traced(kind)  # at the traced sizes: the names are all that differs
    named_text = render_program(lower(trace), source="test")
    monkeypatch.setattr(pipeline, "name_config", lambda program, class_names: [])
    literal_text = render_program(lower(trace), source="test")
    assert "class Config" in named_text and "class Config" not in literal_text
    outputs = []
    for text in (exported(kind)[3], named_text, literal_text):  # the generic export's names too
        module = load_module(text)
        out = jax.jit(module.forward)(module.load_params(model), *to_jax((idx,)))
        outputs.append(np.asarray(out["logits"] if isinstance(out, dict) else out))
    assert outputs[0].tobytes() == outputs[1].tobytes() == outputs[2].tobytes()


def test_a_size_unpacked_from_a_shape_is_read_from_it():
    """nanoGPT's `B, T, C = x.size()` then `view(B, T, self.n_head, C // self.n_head)`, and its
    scale `1.0 / math.sqrt(k.size(-1))`."""

    class Heads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n_head = 3
            self.proj = nn.Linear(12, 12)

        def forward(self, x):
            B, T, C = x.size()
            q = self.proj(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            return (q @ q.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))

    torch.manual_seed(0)
    model, x = Heads(), torch.randn(2, 5, 12)
    program = lower(Capture()(model, x))
    text = render_program(program, source="test")
    assert "(x.shape[0], x.shape[1], config.n_head, x.shape[2] // config.n_head)" in text, text
    assert "* (1.0 / math.sqrt(q.shape[-1]))" in text and "\nimport math\n" in text, text
    assert check(load_module(text), program, model, (x,), {})[0].ok


def test_a_field_of_any_value_and_path_is_valid_code():
    """A NaN or infinite default, a child named like a digit but no list position: the `Config`
    class and `config_from` still compile and read back what the model holds."""
    from types import SimpleNamespace

    from jaxside.render import module as module_text
    from jaxside.render.lower.config_fields import ConfigField, accessor

    fields = [ConfigField("fill", -math.inf, "", "fill"), ConfigField("eps", math.nan, "", "eps"),
              ConfigField("n_head", 3, "blocks.²", "n_head")]
    namespace: dict[str, Any] = {"dataclasses": dataclasses}
    exec(module_text.config_class(SimpleNamespace(config=fields)), namespace)
    config = namespace["Config"]()
    assert config.fill == -math.inf and math.isnan(config.eps) and config.n_head == 3
    model = nn.Module()
    model.add_module("blocks", nn.Module())
    model.blocks.add_module("²", nn.Module())
    model.blocks.get_submodule("²").n_head = 3
    assert eval(accessor(fields[2]), {"model": model}) == 3


# -- a MobileViT-style trunk: stages of (downsample, block), each block a def of its own ------------


class _Down(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, 2, 1)

    def forward(self, x):
        return torch.relu(self.conv(x))


class _Attn(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-3)
        self.proj = nn.Linear(dim, dim)
        self.scale = 0.7

    def forward(self, x):
        return self.proj(self.norm(x)) * self.scale


class _Block(nn.Module):
    """Reads no config itself: only its layers do, and it has a different number of them per stage."""

    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Attn(dim) for _ in range(depth)])

    def forward(self, x):
        y = x.permute(0, 2, 3, 1)
        for layer in self.layers:
            y = layer(y) + y
        return y.permute(0, 3, 1, 2)


class _Trunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.ModuleList([])
        cin = 3
        for dim, depth in zip([4, 6, 8], [1, 2, 3]):
            self.trunk.append(nn.ModuleList([_Down(cin, dim), _Block(dim, depth)]))
            cin = dim

    def forward(self, x):
        for down, block in self.trunk:
            x = down(x)
            x = block(x)
        return x.mean((2, 3))


def test_config_reaches_defs_called_through_a_list_of_them():
    """vit-pytorch's MobileViT: the stages' blocks are three defs (their depths differ), so the
    rolled trunk calls them through a list (`for (down, block), block_forward_out in zip(...,
    block_forward_outs)`); the defs read config through their layers, so the call through the
    list passes it, and the entry, which reads none itself, takes it."""
    torch.manual_seed(0)
    model, x = _Trunk().eval(), torch.randn(2, 3, 16, 16)
    program = lower(Capture()(model, x))
    text = render_program(program, source="test")
    assert "block_forward_outs = [block_forward, block_forward_1, block_forward_2]" in text, text
    assert "def forward(params, x, *, config=Config()):" in text, text
    assert "block_forward_out(block, x, config=config)" in text, text
    assert check(load_module(text), program, model, (x,), {})[0].ok
    other = _Trunk().eval()
    for module in other.modules():
        if isinstance(module, _Attn):
            module.scale, module.norm.eps = 1.5, 0.25
    export = load_module(text)
    out = export.forward(export.load_params(other), *to_jax((x,)), config=export.config_from(other))
    np.testing.assert_allclose(np.asarray(out), other(x).detach().numpy(), rtol=1e-5, atol=1e-5)
