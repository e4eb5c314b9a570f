"""Class styles on the module layouts of vit-pytorch and T5: a list of lists of modules unpacked in
the loop (`for attn, ff in self.layers:`), `Sequential`s whose items are called by index, nested,
or hold a module with a def and no tensors (LeViT's `pool`), a child of another class per instance
(CaiT's `LayerScale.fn`), and a `ModuleList` of other layer types per instance called by index
(T5's `T5Block.layer`, `self.layer[-1]`). Each export is checked against torch and clean under ruff;
``JAXSIDE_STYLES_ALL=1`` adds transformers' T5 itself."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.lower import lower
from jaxside.tracing import capture

RUFF = Path(sys.executable).parent / "ruff"
STYLES = ["nnx", "equinox"]


class Flatten(nn.Module):  # einops' `Rearrange` in a `Sequential`: a def, no tensors
    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.to_qkv = nn.Linear(width, width * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(width, width), nn.Dropout(0.0))

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        return self.to_out(torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v)


class FeedForward(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Dropout(0.0), nn.Linear(2 * width, width))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Pairs(nn.Module):
    def __init__(self, width: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Sequential(Flatten(), nn.LayerNorm(width))
        self.stem = nn.Sequential(nn.Sequential(nn.Linear(width, width), nn.Tanh()), nn.Linear(width, width))
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([Attention(width), FeedForward(width)]))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten())

    def forward(self, x: Tensor) -> Tensor:
        x = self.embed(x)
        x = self.stem[1](self.stem[0](x))
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.pool(x.transpose(1, 2))


class LayerScale(nn.Module):
    def __init__(self, width: int, fn: nn.Module) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((width,), 0.1))
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x) * self.scale


class Scaled(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList([
            nn.ModuleList([LayerScale(width, Attention(width)), LayerScale(width, FeedForward(width))])
            for _ in range(2)
        ])

    def forward(self, x: Tensor) -> Tensor:
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


class Branches(nn.Module):  # vit-pytorch's ParallelViT: `Parallel` of attentions, of feed-forwards
    def __init__(self, make: type[nn.Module], width: int = 8) -> None:
        super().__init__()
        self.fns = nn.ModuleList([make(width) for _ in range(2)])

    def forward(self, x: Tensor) -> Tensor:
        return sum(fn(x) for fn in self.fns)


class Parallel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attend = Branches(Attention)
        self.feed = Branches(FeedForward)

    def forward(self, x: Tensor) -> Tensor:
        x = self.attend(x) + x
        return self.feed(x) + x


class Swap(nn.Module):  # DeepViT's `Rearrange` pair around a norm: one def, two modules
    def __init__(self, first: int, second: int) -> None:
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(self.first, self.second)


class Normed(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.norm = nn.Sequential(Swap(1, 2), nn.LayerNorm(width), Swap(2, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x) * 2.0


class Mix(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: Tensor, context: Tensor) -> Tensor:
        return x + torch.softmax(self.proj(x) @ context.transpose(-1, -2), dim=-1) @ context


class Block(nn.Module):
    def __init__(self, width: int, cross: bool) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Attention(width)])
        if cross:
            self.layer.append(Mix(width))
        self.layer.append(FeedForward(width))

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        x = self.layer[0](x) + x
        if context is not None:
            x = self.layer[1](x, context)
        return self.layer[-1](x) + x


class Stack(nn.Module):
    def __init__(self, width: int, cross: bool) -> None:
        super().__init__()
        self.block = nn.ModuleList([Block(width, cross) for _ in range(2)])

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        for block in self.block:
            x = block(x, context)
        return x


class EncoderDecoder(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.encoder = Stack(width, cross=False)
        self.decoder = Stack(width, cross=True)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return self.decoder(y, self.encoder(x))


@functools.cache
def _lowered(model: type[nn.Module], *shapes: tuple[int, ...]) -> tuple[nn.Module, tuple[Tensor, ...], Any]:
    """The model traced and lowered once for both styles (static shapes)."""
    torch.manual_seed(0)
    built, inputs = model().eval(), tuple(torch.randn(*shape) for shape in shapes)
    return built, inputs, lower(capture(built, *inputs), None)


def _exported(model: type[nn.Module], shapes: list[tuple[int, ...]], style: str, tmp_path: Path) -> str:
    built, inputs, program = _lowered(model, *shapes)
    text = module_source(program, "tests/test_style_layouts.py", style, built)
    report = check_export(load_module(text), program, Entry(built, inputs, {}), run=runner(style))
    assert report.ok, report.table()
    path = tmp_path / f"export_{style}.py"
    path.write_text(text)
    done = subprocess.run([str(RUFF), "check", "--isolated", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return text


@pytest.mark.parametrize("style", STYLES)
def test_a_list_of_lists_is_unpacked_as_torch_unpacks_it(style, tmp_path):
    text = _exported(Pairs, [(2, 8, 2, 3)], style, tmp_path)
    assert "for attn, ff in self.layers:" in text and "attn(x)" in text
    if style == "nnx":  # NNX 0.12 takes modules in a list inside an `nnx.List` only
        assert "self.layers = nnx.List(layers)" in text and "nnx.List(\n" in text
    else:
        assert "layers: list[tuple[Attention, FeedForward]]" in text
    assert "self.embed[0](x)" in text  # the `Sequential`'s item with a def and no tensors
    assert 'net=[\n            _layer_norm(tensors, path + "net.0."),' in text or "None," in text
    # torch's positions kept: the GELU and Dropout of `net` hold nothing, `net[4]` is the last Linear
    assert "self.net[4]" in text
    if style == "nnx":  # a Sequential's Linear is an `nnx.Linear` beside its LayerNorm: judged by position
        assert "return self.net[4](" in text and '_linear_layer(tensors, path + "net.4.")' in text


@pytest.mark.parametrize("style", STYLES)
def test_a_child_of_another_class_per_instance_is_built_from_its_tensors(style, tmp_path):
    text = _exported(Scaled, [(2, 5, 8)], style, tmp_path)
    assert 'if path + "fn.norm.weight" in tensors:\n        fn = _attention(' in text
    assert "for attn, ff in self.layers:" in text


@pytest.mark.parametrize("style", STYLES)
def test_lists_of_as_many_modules_of_other_classes_are_told_apart_by_a_tensor(style, tmp_path):
    text = _exported(Parallel, [(2, 5, 8)], style, tmp_path)
    assert 'if path + "fns.0.norm.weight" in tensors:\n        fns = [' in text


@pytest.mark.parametrize("style", STYLES)
def test_one_def_of_two_modules_of_a_sequential_calls_each(style, tmp_path):
    """Two `Swap`s of one `Sequential` run one def taking no params: each call runs its own."""
    text = _exported(Normed, [(2, 8, 5)], style, tmp_path)
    assert "self.norm[0](x)" in text and "self.norm[2](" in text


@pytest.mark.parametrize("style", STYLES)
def test_a_module_list_of_other_layers_per_instance_is_built_by_its_length(style, tmp_path):
    """T5's `T5Block.layer`: [self-attention, feed-forward] in the encoder, with a cross-attention
    between them in the decoder, called by index (`self.layer[-1]`)."""
    text = _exported(EncoderDecoder, [(2, 5, 8), (2, 3, 8)], style, tmp_path)
    assert 'if _count(tensors, path + "layer.") == 2:\n        layer = [' in text


def test_the_exports_build_and_run_without_torch(tmp_path):
    """Both exports imported, built from NumPy weights and run in a process where `import torch`
    fails."""
    model, (x,), program = _lowered(Pairs, (2, 8, 2, 3))
    for style in STYLES:
        (tmp_path / f"exported_{style}.py").write_text(module_source(program, "pairs.py", style, model))
    np.savez(tmp_path / "weights.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
    np.save(tmp_path / "x.npy", x.numpy())
    with torch.no_grad():
        np.save(tmp_path / "want.npy", model(x).numpy())
    script = f"""
import sys
sys.modules["torch"] = None
sys.path.insert(0, {str(tmp_path)!r})
import numpy as np, jax.numpy as jnp, exported_nnx, exported_equinox
weights = dict(np.load({str(tmp_path / "weights.npz")!r}))
for module in (exported_nnx, exported_equinox):
    out = module.from_torch(weights)(jnp.asarray(np.load({str(tmp_path / "x.npy")!r})))
    np.testing.assert_allclose(np.asarray(out), np.load({str(tmp_path / "want.npy")!r}), rtol=1e-5, atol=1e-5)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


T5 = """\
import torch


def example():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      decoder_start_token_id=0)
    model = T5ForConditionalGeneration(config).eval()
    return model, (torch.randint(0, 64, (1, 8)),), dict(decoder_input_ids=torch.randint(0, 64, (1, 4)))
"""


@pytest.mark.skipif(not os.environ.get("JAXSIDE_STYLES_ALL"), reason="slow: JAXSIDE_STYLES_ALL=1 runs it")
@pytest.mark.parametrize("style", STYLES)
def test_transformers_t5_exports_in_the_class_styles(style, tmp_path, capsys):
    pytest.importorskip("transformers")
    from jaxside.annotate.cli import main

    model = tmp_path / "t5_model.py"
    model.write_text(T5)
    out = tmp_path / "t5_export.py"
    code = main([str(model), "--export", "--style", style, "--check", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert 'if _count(tensors, path + "layer.") == 2:\n        layer = [' in text


IN_PLACE = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        x.mul_(2.0)
        return self.fc(x)


def example():
    return Net().eval(), (torch.randn(2, 4),)
"""

ALIKE = """\
import torch


class Up(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x).tanh()


class Down(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x).sigmoid()


class Scale(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) * 0.5


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = torch.nn.ModuleList([Scale(Up()), Scale(Down())])

    def forward(self, x):
        for part in self.parts:
            x = part(x)
        return x


def example():
    return Net().eval(), (torch.randn(2, 4),)
"""


@pytest.mark.parametrize(("source", "line", "said"), [
    (IN_PLACE, "    def forward(self, x):", "the torch code writes its inputs in place"),
    (ALIKE, "        self.fn = fn", "`Scale.fn` holds modules of other classes in other instances, with no"),
])
def test_a_refusal_names_the_torch_line_at_fault(source, line, said, tmp_path, capsys):
    """Every class-style refusal says where: the torch def that does what the style cannot write,
    or the line assigning the module at fault."""
    from jaxside.annotate.cli import main

    model = tmp_path / "model.py"
    model.write_text(source)
    out = tmp_path / "out.py"
    code = main([str(model), "--export", "--style", "equinox", "--static-shapes", "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    number = source.splitlines().index(line) + 1
    assert code == 2 and err[-1].startswith(f"error: {model}:{number}: --style equinox: {said}"), err
    assert not out.exists()
