"""What an export returns: the torch structure (tuples, NamedTuples, dataclasses, caches, views),
random ops drawn from an explicit key, and --check blaming the user's code when torch eager fails."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np
import torch
from torch import nn

from jaxside.annotate.check import check, entry_inputs, load_module, run_jitted
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture, example_key, random_outputs


def exported(model, *args, **kwargs):
    trace = capture(model, *args, **kwargs)
    program = lower(trace)
    return program, load_module(render_program(program, source="test"))


def run_export(model, *args, **kwargs):
    program, module = exported(model, *args, **kwargs)
    inputs = entry_inputs(module, program, model, args, kwargs)
    return run_jitted(getattr(module, program.entry.name), inputs)


def assert_checks(model, *args, **kwargs):
    program, module = exported(model, *args, **kwargs)
    comparisons = check(module, program, model, args, kwargs)
    assert comparisons and all(c.ok for c in comparisons), [c.line() for c in comparisons]
    return comparisons


class OneTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return (self.lin(x),)


class Pair(NamedTuple):
    logits: torch.Tensor
    scale: float


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: tuple
    loss: torch.Tensor | None = None


class Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x):
        h = self.lin(x)
        return Output(logits=h, hidden=(x, h.relu())), Pair(h.sum(-1), 0.5)


def test_a_one_tuple_stays_a_tuple():
    x = torch.randn(2, 4)
    got = run_export(OneTuple(), x)
    assert isinstance(got, tuple) and len(got) == 1
    assert_checks(OneTuple(), x)


def test_dataclasses_and_named_tuples_become_dicts_of_their_fields():
    model, x = Structured(), torch.randn(3, 4)
    output, pair = run_export(model, x)
    assert set(output) == {"logits", "hidden", "loss"} and output["loss"] is None
    assert pair["scale"] == 0.5
    expected = model(x)[1].logits.detach().numpy()
    np.testing.assert_allclose(np.asarray(pair["logits"]), expected, rtol=1e-5, atol=1e-6)
    paths = [c.what for c in assert_checks(model, x)]
    assert paths == ["[0]['logits']", "[0]['hidden'][0]", "[0]['hidden'][1]", "[0]['loss']",
                     "[1]['logits']", "[1]['scale']"]


class Cache:
    """A cache class of the user's own, as transformers' `DynamicCache` keeps its tensors."""

    def __init__(self):
        self.layers = []
        self.seen = 0

    def update(self, k):
        self.layers.append(k)
        self.seen += k.shape[1]


class CachingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        cache = Cache()
        for lin in self.lin:
            x = lin(x)
            cache.update(x * 2)
        return {"out": x, "cache": cache}


def test_an_object_holding_tensors_is_returned_as_a_dict_of_its_tensor_attributes():
    model, x = CachingModel(), torch.randn(2, 4)
    got = run_export(model, x)
    assert set(got["cache"]) == {"layers"} and len(got["cache"]["layers"]) == 2
    assert "['cache']['layers'][1]" in [c.what for c in assert_checks(model, x)]


class Labelled(nn.Module):
    def forward(self, x):
        return {"activation": "relu", "out": x.relu(), "extra": None, "count": x.shape[0]}


def test_constant_leaves_are_returned_and_compared_as_they_are():
    got = run_export(Labelled(), torch.randn(3))
    assert got["activation"] == "relu" and got["extra"] is None and got["count"] == 3
    assert [c.what for c in assert_checks(Labelled(), torch.randn(3))] == [
        "['activation']", "['out']", "['extra']", "['count']"
    ]


class GrowingCache:
    def __init__(self, keys):
        self.layers = [{"keys": k} for k in keys]
        self.steps = 0


class Decoder(nn.Module):
    """A decode step: the cache comes in as an object, grows in place, and is returned."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, cache):
        for layer in cache.layers:
            layer["keys"] = torch.cat([layer["keys"], self.proj(x)], dim=0)
        cache.steps += 1
        return x + cache.layers[-1]["keys"].sum(0), cache


def test_a_cache_passed_in_is_a_dict_argument_like_the_one_returned():
    model = Decoder()
    cache = GrowingCache([torch.randn(3, 4), torch.randn(3, 4)])
    program, module = exported(model, torch.randn(1, 4), cache)
    assert program.entry.params == ["params", "x", "cache"]
    assert len(cache.layers[0]["keys"]) == 3 and cache.steps == 0  # tracing left the user's cache alone
    out, new_cache = run_export(model, torch.randn(1, 4), cache)
    assert new_cache["layers"][1]["keys"].shape == (4, 4)
    # The returned cache is the next call's argument.
    again, newer = jax.jit(module.forward)(module.load_params(model), np.ones((1, 4), np.float32), new_cache)
    assert newer["layers"][0]["keys"].shape == (5, 4)
    comparisons = check(module, program, model, (torch.randn(1, 4), cache), {})
    assert [c.what for c in comparisons] == ["[0]", "[1]['layers'][0]['keys']", "[1]['layers'][1]['keys']"]
    assert all(c.ok for c in comparisons)


class Views(nn.Module):
    def forward(self, logits, x):
        return logits[:, -1], x.flip(-1)[::2]


def test_returned_views_are_exported():
    args = torch.randn(2, 5, 7), torch.randn(6, 3)
    assert len(assert_checks(Views(), *args)) == 2


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = self.drop(self.lin(x))
        return h + torch.randn_like(h), self.lin(x)


def test_random_ops_draw_from_a_key_argument():
    model, x = Noisy().train(), torch.randn(4, 8)
    program, module = exported(model, x)
    assert program.entry.params[-1] == "key"
    params = module.load_params(model)
    forward = jax.jit(module.forward)
    first, again, other = (forward(params, x.numpy(), example_key(seed)) for seed in (0, 0, 1))
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.allclose(first[0], other[0])
    np.testing.assert_array_equal(first[1], other[1])
    assert random_outputs(program.trace) == {"[0]"}
    comparisons = check(module, program, model, (x,), {})
    assert [(c.what, c.random, c.ok) for c in comparisons] == [("[0]", True, True), ("[1]", False, True)]


def test_without_random_ops_there_is_no_key():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).eval()  # dropout draws only in training
    program, _ = exported(model, torch.randn(4, 8))
    assert program.entry.params == ["params", "input"]


def test_torch_eager_failing_under_check_is_the_users_error(tmp_path, capsys):
    from jaxside.annotate.cli import main

    source = tmp_path / "bad_cache.py"
    source.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class BadCache(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('cache', torch.zeros(4, 8, dtype=torch.bfloat16))\n\n"
        "    def forward(self, x):\n"
        "        self.cache[:2] = x.double()\n"
        "        return torch.nn.functional.scaled_dot_product_attention(self.cache, x, x)\n\n\n"
        "def example():\n"
        "    return BadCache(), (torch.randn(2, 8),)\n"
    )
    code = main([str(source), "--export", "-o", str(tmp_path / "out.py"), "--check"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"{source}:12:" in err and "torch eager" in err and "jaxside bug" not in err


# -- lowering regressions found by the model zoo --------------------------------------------------


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class PartialRotary(nn.Module):
    """Phi-3's partial rotary: `rotate_half` of a lazy slice, on query and key of other head counts."""

    def forward(self, q, k, cos):
        d = cos.shape[-1]
        q_rot, q_pass = q[..., :d], q[..., d:]
        k_rot, k_pass = k[..., :d], k[..., d:]
        q = torch.cat([q_rot * cos + rotate_half(q_rot), q_pass], dim=-1)
        k = torch.cat([k_rot * cos + rotate_half(k_rot), k_pass], dim=-1)
        return q, k


def test_a_call_reading_only_a_lazy_slice_keeps_its_result():
    assert_checks(PartialRotary(), torch.randn(1, 4, 8, 8), torch.randn(1, 2, 8, 8), torch.randn(8, 4))


class SplitHeads(nn.Module):
    """Falcon's multi-query `_split_heads`: the first result is a lazy view its caller materializes."""

    def split(self, fused):
        fused = fused.view(1, 8, 6, 4)
        return fused[..., :-2, :], fused[..., [-2], :], fused[..., [-1], :]

    def forward(self, fused):
        query, key, value = self.split(fused)
        return query.transpose(1, 2) @ key.permute(0, 2, 3, 1) + value.sum()


def test_a_call_returning_a_view_made_elsewhere_keeps_the_positions_of_the_rest():
    assert_checks(SplitHeads(), torch.randn(1, 8, 24))


def test_grouped_mm_outside_the_lowered_layout_names_the_op_the_line_and_the_way_around(tmp_path, capsys):
    from jaxside.annotate.cli import main

    source = tmp_path / "experts.py"
    source.write_text(  # 2-D x 2-D: groups along the contracted axis, not lowered (tracing/_grouped_mm.py)
        "import torch\n\n\n"
        "def experts(x, w, offs):\n"
        "    return torch._grouped_mm(x, w, offs=offs)\n\n\n"
        "def example():\n"
        "    offs = torch.tensor([4, 8], dtype=torch.int32)\n"
        "    return experts, (torch.randn(8, 8), torch.randn(8, 8), offs)\n"
    )
    assert main([str(source)]) == 3
    err = capsys.readouterr().err
    assert f"{source}:5: `torch._grouped_mm(x, w, offs=offs)` calls aten::_grouped_mm" in err
    assert "set_experts_implementation('batched_mm')" in err


class ExpertCounts(nn.Module):
    """transformers' experts count tokens per expert with `histc` (a jitted `searchsorted` scan in
    torchax): the jit's helper def must unpack the scan's `(carry, ys)` by its structure."""

    def forward(self, expert_ids):
        ids, _ = torch.sort(expert_ids)
        return torch.cumsum(torch.histc(ids.float(), bins=4, min=0, max=3), dim=0, dtype=torch.int32)


def test_histc_of_sorted_ids_exports_and_checks():
    assert_checks(ExpertCounts(), torch.tensor([0, 3, 1, 1, 2, 0, 3]))
