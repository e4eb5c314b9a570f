"""Representative torch calls, one family of aten ops each, for op coverage and `docs/ops.md`.

Each `Case` is a small torch function and the inputs to trace it on.  `tests/test_ops.py`
traces every case with `tracing.capture` and proves each equation's rendering exact;
`tests/fuzzing/optable.py` maps the aten ops they hit (from each equation's name stack) to
the primitives they produced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from jaxside.tracing import Trace, capture
from jaxside.tracing._internals import torchax

Inputs = Callable[[torch.Generator], tuple[Any, ...]]


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    inputs: Inputs
    fails: str | None = None
    """Why torchax cannot trace this case (the case stays, to notice when it can)."""

    def make_inputs(self, seed: int = 0) -> tuple[Any, ...]:
        return self.inputs(torch.Generator().manual_seed(seed))

    def trace(self) -> Trace:
        """`capture` the case, with a fresh torchax random key (torchax keeps the last one it split)."""
        torchax.default_env().manual_seed(0)
        return capture(self.fn, *self.make_inputs())


def f32(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g)


def pos(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) + 0.5


def unit(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) * 1.8 - 0.9


def bf16(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g).to(torch.bfloat16)


def f16(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g).to(torch.float16)


def ints(*shape: int, low: int = -5, high: int = 6, dtype: torch.dtype = torch.int64) -> Callable[
    [torch.Generator], torch.Tensor
]:
    return lambda g: torch.randint(low, high, shape, generator=g, dtype=dtype)


def bools(*shape: int) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g) < 0.5


def spd(n: int) -> Callable[[torch.Generator], torch.Tensor]:
    def make(g: torch.Generator) -> torch.Tensor:
        a = torch.randn(n, n, generator=g)
        return a @ a.T + n * torch.eye(n)

    return make


def case(
    name: str, fn: Callable[..., Any], *makers: Callable[[torch.Generator], Any], fails: str | None = None
) -> Case:
    return Case(name, fn, lambda g: tuple(m(g) for m in makers), fails)


CASES: list[Case] = [
    # arithmetic and elementwise math
    case("add", lambda x, y: x + y, f32(3, 4), f32(3, 4)),
    case("add_alpha", lambda x, y: torch.add(x, y, alpha=2), f32(3, 4), f32(3, 4)),
    case("add_scalar", lambda x: x + 1.5, f32(3, 4)),
    case("rsub", lambda x: 2 - x, f32(3, 4)),
    case("mul_broadcast", lambda x, y: x * y, f32(3, 4), f32(4)),
    case("div", lambda x, y: x / y, f32(3, 4), pos(3, 4)),
    case("div_int", lambda x, y: x / y, ints(3, 4), ints(3, 4, low=1)),
    case("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), f32(3, 4), pos(3, 4)),
    case("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), ints(3, 4), ints(3, 4, low=1)),
    case("floor_divide", lambda x, y: x // y, ints(3, 4), ints(3, 4, low=1)),
    case("remainder", lambda x, y: x % y, f32(3, 4), pos(3, 4)),
    case("fmod", lambda x, y: torch.fmod(x, y), f32(3, 4), pos(3, 4)),
    case("neg", lambda x: -x, f32(3, 4)),
    case("abs", lambda x: torch.abs(x), f32(3, 4)),
    case("abs_int", lambda x: torch.abs(x), ints(3, 4)),
    case("sign", lambda x: torch.sign(x), f32(3, 4)),
    case("sgn", lambda x: torch.sgn(x), f32(3, 4)),
    case("signbit", lambda x: torch.signbit(x), f32(3, 4)),
    case("copysign", lambda x, y: torch.copysign(x, y), f32(3, 4), f32(3, 4)),
    case("pow_tensor", lambda x, y: torch.pow(x, y), pos(3, 4), f32(3, 4)),
    case("pow_scalar", lambda x: x**2, f32(3, 4)),
    case("pow_float_scalar", lambda x: x**2.5, pos(3, 4)),
    case("pow_int", lambda x: x**3, ints(3, 4)),
    case("square", lambda x: torch.square(x), f32(3, 4)),
    case("sqrt", lambda x: torch.sqrt(x), pos(3, 4)),
    case("rsqrt", lambda x: torch.rsqrt(x), pos(3, 4)),
    case("reciprocal", lambda x: torch.reciprocal(x), pos(3, 4)),
    case("exp", lambda x: torch.exp(x), f32(3, 4)),
    case("exp2", lambda x: torch.exp2(x), f32(3, 4)),
    case("expm1", lambda x: torch.expm1(x), f32(3, 4)),
    case("log", lambda x: torch.log(x), pos(3, 4)),
    case("log2", lambda x: torch.log2(x), pos(3, 4)),
    case("log10", lambda x: torch.log10(x), pos(3, 4)),
    case("log1p", lambda x: torch.log1p(x), pos(3, 4)),
    case("logaddexp", lambda x, y: torch.logaddexp(x, y), f32(3, 4), f32(3, 4)),
    case("logaddexp2", lambda x, y: torch.logaddexp2(x, y), f32(3, 4), f32(3, 4)),
    case("trig", lambda x: torch.sin(x) + torch.cos(x) + torch.tan(x), f32(3, 4)),
    case("inverse_trig", lambda x: torch.asin(x) + torch.acos(x) + torch.atan(x), unit(3, 4)),
    case("hyperbolic", lambda x: torch.sinh(x) + torch.cosh(x) + torch.tanh(x), f32(3, 4)),
    case("inverse_hyperbolic", lambda x: torch.asinh(x) + torch.atanh(x), unit(3, 4)),
    case("acosh", lambda x: torch.acosh(x + 1.5), pos(3, 4)),
    case("atan2", lambda x, y: torch.atan2(x, y), f32(3, 4), f32(3, 4)),
    case("hypot", lambda x, y: torch.hypot(x, y), f32(3, 4), f32(3, 4)),
    case("rounding", lambda x: torch.floor(x) + torch.ceil(x) + torch.round(x) + torch.trunc(x), f32(3, 4)),
    case("round_decimals", lambda x: torch.round(x, decimals=2), f32(3, 4)),
    case("frac", lambda x: torch.frac(x), f32(3, 4)),
    case("erf", lambda x: torch.erf(x) + torch.erfc(x), f32(3, 4)),
    case("erfinv", lambda x: torch.erfinv(x), unit(3, 4)),
    case("lgamma_digamma", lambda x: torch.lgamma(x) + torch.digamma(x), pos(3, 4)),
    case("polygamma", lambda x: torch.polygamma(1, x), pos(3, 4)),
    case("igamma", lambda x, y: torch.igamma(x, y) + torch.igammac(x, y), pos(3, 4), pos(3, 4)),
    case("i0", lambda x: torch.i0(x), f32(3, 4)),
    case("special_i0e_i1e", lambda x: torch.special.i0e(x) + torch.special.i1e(x), f32(3, 4)),
    case("special_ndtri", lambda x: torch.special.ndtri(x), unit(3, 4)),
    case("special_erfcx", lambda x: torch.special.erfcx(x), f32(3, 4)),
    case("xlogy", lambda x, y: torch.xlogy(x, y), f32(3, 4), pos(3, 4)),
    case("logit", lambda x: torch.logit(x), lambda g: torch.rand(3, 4, generator=g) * 0.8 + 0.1),
    case("nextafter", lambda x, y: torch.nextafter(x, y), f32(3, 4), f32(3, 4)),
    case("lerp", lambda x, y: torch.lerp(x, y, 0.3), f32(3, 4), f32(3, 4)),
    case("addcmul", lambda x, y, z: torch.addcmul(x, y, z, value=0.5), f32(3, 4), f32(3, 4), f32(3, 4)),
    case("clamp", lambda x: torch.clamp(x, -0.5, 0.5), f32(3, 4)),
    case("clamp_min", lambda x: torch.clamp_min(x, 0.1), f32(3, 4)),
    case("clamp_tensor", lambda x, lo: torch.clamp(x, min=lo), f32(3, 4), f32(3, 4)),
    case("maximum", lambda x, y: torch.maximum(x, y) + torch.minimum(x, y), f32(3, 4), f32(3, 4)),
    case("fmax", lambda x, y: torch.fmax(x, y) + torch.fmin(x, y), f32(3, 4), f32(3, 4)),
    case("isnan_isinf", lambda x: torch.isnan(x) | torch.isinf(x) | torch.isfinite(x), f32(3, 4)),
    case("nan_to_num", lambda x: torch.nan_to_num(x / 0.0), f32(3, 4)),
    case("gcd_lcm", lambda x, y: torch.gcd(x, y) + torch.lcm(x, y), ints(3, 4), ints(3, 4)),
    # comparisons, logic, bits
    case("compare", lambda x, y: (x < y) & (x <= y) | (x > y) ^ (x >= y), f32(3, 4), f32(3, 4)),
    case("equality", lambda x, y: (x == y) | (x != y), ints(3, 4), ints(3, 4)),
    case("compare_scalar", lambda x: (x > 0.5) | (x <= -0.5) | (x == 0), f32(3, 4)),
    case("logical", lambda x, y: torch.logical_and(x, y) | torch.logical_xor(x, ~y), bools(3, 4),
         bools(3, 4)),
    case("logical_float", lambda x, y: torch.logical_or(x, y) & torch.logical_not(x), f32(3, 4), f32(3, 4)),
    case("bitwise", lambda x, y: (x & y) | (x ^ y) | ~x, ints(3, 4), ints(3, 4)),
    case("shifts", lambda x, y: (x << y) + (x >> y), ints(3, 4), ints(3, 4, low=0, high=4)),
    case("shifts_int32", lambda x: (x << 2) + (x >> 1),
         ints(3, 4, dtype=torch.int32)),
    case("where", lambda c, x, y: torch.where(c, x, y), bools(3, 4), f32(3, 4), f32(3, 4)),
    case("where_scalar", lambda x: torch.where(x > 0, x, 0.0), f32(3, 4)),
    case("masked_fill", lambda x, m: x.masked_fill(m, float("-inf")), f32(3, 4), bools(3, 4)),
    case("allclose_isclose", lambda x, y: torch.isclose(x, y), f32(3, 4), f32(3, 4)),
    # casts
    case("to_bf16", lambda x: x.to(torch.bfloat16), f32(3, 4)),
    case("to_f16", lambda x: x.half(), f32(3, 4)),
    case("to_int", lambda x: x.to(torch.int32) + x.long(), f32(3, 4)),
    case("to_bool", lambda x: x.bool(), f32(3, 4)),
    case("bool_to_float", lambda x: x.float(), bools(3, 4)),
    case("int_to_float", lambda x: x.float() * 0.5, ints(3, 4)),
    case("bf16_math", lambda x, y: (x * y + x).sum(-1), bf16(3, 4), bf16(3, 4)),
    case("f16_math", lambda x: torch.exp(x) / 2, f16(3, 4)),
    case("mixed_promotion", lambda x, y: x + y, bf16(3, 4), f32(3, 4)),
    case("view_as_int", lambda x: x.view(torch.int32), f32(3, 4),
         fails="torchax: view(dtype) passes a torch dtype as a shape"),
    case("uint8_ops", lambda x: (x + 3) * 2, ints(3, 4, low=0, high=200, dtype=torch.uint8)),
    case("int8_sum", lambda x: x.sum(0), ints(3, 4, dtype=torch.int8)),
    # reductions
    case("sum", lambda x: x.sum() + x.sum(0).sum() + x.sum(-1, keepdim=True).sum(), f32(3, 4)),
    case("mean", lambda x: x.mean(dim=(0, 1)) + x.mean(-1).sum(), f32(3, 4)),
    case("prod", lambda x: x.prod(-1), f32(3, 4)),
    case("prod_int", lambda x: x.prod(), ints(3, 4)),
    case("amax", lambda x: x.amax(-1) + x.amin(0).sum(), f32(3, 4)),
    case("max_dim", lambda x: x.max(-1).values + x.min(-1).indices, f32(3, 4)),
    case("max_all", lambda x: x.max() + x.min(), f32(3, 4)),
    case("argmax", lambda x: x.argmax(-1) + x.argmin(0).sum(), f32(3, 4)),
    case("argmax_flat", lambda x: x.argmax(), f32(3, 4)),
    case("var_std", lambda x: x.var(-1) + x.std(0).sum() + torch.var(x, unbiased=False), f32(3, 4)),
    case("var_mean", lambda x: torch.var_mean(x, -1)[0], f32(3, 4)),
    case("norm", lambda x: torch.linalg.vector_norm(x, dim=-1) + x.norm(), f32(3, 4)),
    case("norm_inf", lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=-1), f32(3, 4)),
    case("logsumexp", lambda x: torch.logsumexp(x, -1), f32(3, 4)),
    case("any_all", lambda x: x.any(-1) | x.all(0).any(), bools(3, 4)),
    case("any_float", lambda x: x.any(), f32(3, 4)),
    case("cumsum", lambda x: torch.cumsum(x, -1) + torch.cumprod(x, 0), f32(3, 4)),
    case("cumsum_int", lambda x: torch.cumsum(x, 0), ints(3, 4)),
    case("cummax", lambda x: torch.cummax(x, -1).values + torch.cummin(x, 0).values, f32(3, 4),
         fails="torchax: cummax broadcasts to the wrong shape"),
    case("logcumsumexp", lambda x: torch.logcumsumexp(x, -1), f32(3, 4), fails="torchax: negative axis"),
    case("median", lambda x: torch.median(x, -1).values, f32(3, 5)),
    case("mode", lambda x: torch.mode(x, -1).values, ints(3, 5)),
    case("count_nonzero", lambda x: torch.count_nonzero(x, -1), f32(3, 4)),
    case("aminmax", lambda x: torch.aminmax(x, dim=-1).max, f32(3, 4)),
    case("histc", lambda x: torch.histc(x, bins=4, min=-2, max=2), f32(12)),
    case("bincount", lambda x: torch.bincount(x, minlength=6), ints(10, low=0, high=6),
         fails="data-dependent output shape"),
    # shapes and views
    case("reshape", lambda x: x.reshape(4, 3) + x.view(2, 6).view(4, 3), f32(3, 4)),
    case("flatten", lambda x: x.flatten(1), f32(2, 3, 4)),
    case("unflatten", lambda x: x.unflatten(-1, (2, 2)), f32(3, 4)),
    case("permute", lambda x: x.permute(2, 0, 1), f32(2, 3, 4)),
    case("transpose", lambda x: x.transpose(0, 1).contiguous() + x.T, f32(3, 3)),
    case("movedim", lambda x: torch.movedim(x, 0, -1), f32(2, 3, 4)),
    case("squeeze", lambda x: x.squeeze(1) + x.squeeze(), f32(3, 1, 4)),
    case("unsqueeze", lambda x: x.unsqueeze(0) + x.unsqueeze(-1).unsqueeze(0).squeeze(-1), f32(3, 4)),
    case("expand", lambda x: x.expand(2, 3, 4), f32(3, 1)),
    case("expand_as", lambda x, y: x.expand_as(y) + y, f32(4), f32(3, 4)),
    case("broadcast_to", lambda x: torch.broadcast_to(x, (2, 3, 4)), f32(1, 4)),
    case("repeat", lambda x: x.repeat(2, 3), f32(3, 4)),
    case("repeat_interleave", lambda x: torch.repeat_interleave(x, 2, dim=0), f32(3, 4)),
    case("tile", lambda x: torch.tile(x, (2,)), f32(3, 4)),
    case("flip", lambda x: torch.flip(x, (0, 1)), f32(3, 4)),
    case("roll", lambda x: torch.roll(x, 1, 0) + torch.roll(x, (1, -1), (0, 1)), f32(3, 4)),
    case("rot90", lambda x: torch.rot90(x), f32(3, 3)),
    case("tril_triu", lambda x: torch.tril(x) + torch.triu(x, 1), f32(4, 4)),
    case("diag", lambda x: torch.diag(x) + torch.diagonal(x).sum(), f32(4, 4)),
    case("diag_embed", lambda x: torch.diag_embed(x), f32(2, 3)),
    case("trace", lambda x: torch.trace(x), f32(4, 4)),
    case("cat", lambda x, y: torch.cat([x, y], 0) + torch.cat([y, x]), f32(2, 4), f32(2, 4)),
    case("cat_many", lambda x: torch.cat([x] * 20, 1), f32(2, 2)),
    case("stack", lambda x, y: torch.stack([x, y], 1), f32(3, 4), f32(3, 4)),
    case("hstack", lambda x, y: torch.hstack([x, y]) + torch.vstack([x, y]).sum(), f32(3, 4), f32(3, 4)),
    case("split", lambda x: sum(p.sum() for p in torch.split(x, 2, dim=1)), f32(3, 5)),
    case("split_sizes", lambda x: torch.split(x, [1, 3], dim=1)[1], f32(3, 4)),
    case("chunk", lambda x: torch.chunk(x, 3, 0)[2], f32(6, 4)),
    case("tensor_split", lambda x: torch.tensor_split(x, 3, 1)[0], f32(3, 7)),
    case("unbind", lambda x: torch.unbind(x, 0)[1], f32(3, 4)),
    case("narrow", lambda x: torch.narrow(x, 1, 1, 2), f32(3, 4)),
    case("unfold", lambda x: x.unfold(1, 2, 1), f32(3, 5)),
    case("meshgrid", lambda x, y: torch.meshgrid(x, y, indexing="ij")[0], f32(3), f32(4)),
    case("atleast_2d", lambda x: torch.atleast_2d(x), f32(3)),
    case("pad_constant", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), f32(3, 4)),
    case("pad_reflect", lambda x: F.pad(x, (1, 1), mode="reflect"), f32(1, 3, 4)),
    case("pad_replicate", lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"), f32(1, 1, 3, 4)),
    case("pad_circular", lambda x: F.pad(x, (1, 1), mode="circular"), f32(1, 3, 4)),
    case("view_as_complex", lambda x: torch.view_as_real(torch.view_as_complex(x) * 2), f32(3, 2)),
    case("complex_ops", lambda x, y: torch.view_as_real(torch.complex(x, y).conj() * torch.polar(x.abs(), y)),
         f32(3, 4), f32(3, 4)),
    case("complex_parts", lambda x, y: torch.complex(x, y).real + torch.complex(x, y).imag
         + torch.complex(x, y).abs(), f32(3, 4), f32(3, 4)),
    case("angle", lambda x, y: torch.complex(x, y).angle(), f32(3, 4), f32(3, 4),
         fails="torchax: no lowering for aten::angle"),
    # indexing
    case("getitem_int", lambda x: x[1] + x[:, 2].sum(), f32(3, 4)),
    case("getitem_slice", lambda x: x[1:, ::2].clone(), f32(3, 4)),
    case("getitem_negative", lambda x: x[-2:, :-1].clone(), f32(3, 4)),
    case("getitem_ellipsis", lambda x: x[..., 1:] + x[None, ..., 1:], f32(2, 3, 4)),
    case("getitem_tensor", lambda x, i: x[i], f32(5, 4), ints(3, low=0, high=5)),
    case("getitem_tensor_2d", lambda x, i, j: x[i, j], f32(5, 4), ints(3, low=0, high=5),
         ints(3, low=0, high=4)),
    case("getitem_bool_scalar_index", lambda x, i: x[:, i], f32(5, 4), ints(2, 2, low=0, high=4)),
    case("getitem_dynamic", lambda x, i: x[i], f32(5, 4), ints(low=0, high=5)),
    case("select", lambda x: torch.select(x, 1, 2), f32(3, 4)),
    case("index_select", lambda x, i: torch.index_select(x, 1, i), f32(3, 4), ints(5, low=0, high=4)),
    case("gather", lambda x, i: torch.gather(x, 1, i), f32(3, 4), ints(3, 2, low=0, high=4)),
    case("take", lambda x, i: torch.take(x, i), f32(3, 4), ints(5, low=0, high=12)),
    case("take_along_dim", lambda x, i: torch.take_along_dim(x, i, 1), f32(3, 4), ints(3, 2, low=0, high=4),
         fails="torchax: indices become int32, torch wants int64"),
    case("embedding", lambda w, i: F.embedding(i, w), f32(10, 4), ints(2, 3, low=0, high=10)),
    case("one_hot", lambda i: F.one_hot(i, 5), ints(4, low=0, high=5)),
    case("scatter", lambda x, i, s: torch.scatter(x, 1, i, s), f32(3, 4), ints(3, 2, low=0, high=4),
         f32(3, 2)),
    case("scatter_value", lambda x, i: torch.scatter(x, 1, i, 1.5), f32(3, 4), ints(3, 2, low=0, high=4)),
    case("scatter_add", lambda x, i, s: torch.scatter_add(x, 0, i, s), f32(3, 4), ints(2, 4, low=0, high=3),
         f32(2, 4)),
    case("scatter_reduce", lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amax")
         + torch.scatter_reduce(x, 0, i, s, "prod") + torch.scatter_reduce(x, 0, i, s, "amin"),
         f32(3, 4), ints(2, 4, low=0, high=3), f32(2, 4)),
    case("index_add", lambda x, i, s: x.index_add(0, i, s), f32(5, 4), ints(3, low=0, high=5), f32(3, 4)),
    case("index_copy", lambda x, i, s: x.index_copy(0, i, s), f32(5, 4), lambda g: torch.tensor([0, 2, 4]),
         f32(3, 4)),
    case("index_put", lambda x, i, v: x.index_put((i,), v), f32(5, 4), ints(3, low=0, high=5), f32(4)),
    case("index_put_accumulate", lambda x, i, v: x.index_put((i,), v, accumulate=True), f32(5, 4),
         ints(3, low=0, high=5), f32(3, 4)),
    case("setitem", lambda x, v: _setitem(x, v), f32(4, 4), f32(4)),
    case("setitem_dynamic", lambda x, i, v: _setitem_at(x, i, v), f32(4, 4), ints(low=0, high=4), f32(4)),
    case("masked_scatter", lambda x, m, s: x.masked_scatter(m, s), f32(3, 4), bools(3, 4), f32(12)),
    case("slice_scatter", lambda x, s: torch.slice_scatter(x, s, 1, 0, 2), f32(3, 4), f32(3, 2)),
    case("select_scatter", lambda x, s: torch.select_scatter(x, s, 0, 1), f32(3, 4), f32(4)),
    case("diagonal_scatter", lambda x, s: torch.diagonal_scatter(x, s), f32(3, 3), f32(3)),
    case("searchsorted", lambda s, x: torch.searchsorted(s, x),
         lambda g: torch.sort(torch.randn(6, generator=g))[0], f32(4)),
    case("bucketize", lambda x, b: torch.bucketize(x, b), f32(5), lambda g: torch.tensor([-1.0, 0.0, 1.0])),
    # sorting
    case("sort", lambda x: torch.sort(x, -1).values + torch.sort(x, 0, descending=True).indices, f32(3, 4)),
    case("sort_stable", lambda x: torch.sort(x, stable=True).indices, ints(3, 6, low=0, high=3)),
    case("argsort", lambda x: torch.argsort(x, -1), f32(3, 4)),
    case("topk", lambda x: torch.topk(x, 2).values + torch.topk(x, 2, largest=False).indices, f32(3, 5)),
    case("topk_dim0", lambda x: torch.topk(x, 2, dim=0).values, f32(4, 3)),
    case("kthvalue", lambda x: torch.kthvalue(x, 2, -1).values, f32(3, 5)),
    case("msort", lambda x: torch.msort(x), f32(3, 4)),
    # linear algebra
    case("matmul", lambda x, w: x @ w, f32(3, 4), f32(4, 5)),
    case("matmul_vec", lambda x, v: x @ v + v @ x.T, f32(3, 4), f32(4)),
    case("dot", lambda x, y: torch.dot(x, y), f32(4), f32(4)),
    case("mv", lambda x, y: torch.mv(x, y), f32(3, 4), f32(4)),
    case("bmm", lambda x, y: torch.bmm(x, y), f32(2, 3, 4), f32(2, 4, 5)),
    case("grouped_mm", lambda x, w, offs: torch._grouped_mm(x, w, offs=offs), f32(10, 8), f32(4, 8, 16),
         lambda g: torch.tensor([3, 3, 7, 10], dtype=torch.int32)),  # an empty group; local lowering
    case("matmul_broadcast", lambda x, y: x @ y, f32(2, 3, 4), f32(4, 5)),
    case("matmul_4d", lambda x, y: x @ y.transpose(-1, -2), f32(2, 2, 3, 4), f32(2, 2, 3, 4)),
    case("linear", lambda x, w, b: F.linear(x, w, b), f32(3, 4), f32(5, 4), f32(5)),
    case("linear_3d", lambda x, w: F.linear(x, w), f32(2, 3, 4), f32(5, 4)),
    case("addmm", lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0), f32(3, 5), f32(3, 4), f32(4, 5)),
    case("baddbmm", lambda b, x, y: torch.baddbmm(b, x, y), f32(2, 3, 5), f32(2, 3, 4), f32(2, 4, 5)),
    case("outer", lambda x, y: torch.outer(x, y), f32(3), f32(4)),
    case("einsum", lambda x, y: torch.einsum("bij,bjk->bik", x, y), f32(2, 3, 4), f32(2, 4, 5)),
    case("einsum_trace", lambda x: torch.einsum("ii->", x), f32(3, 3)),
    case("einsum_outer", lambda x, y: torch.einsum("i,j->ij", x, y), f32(3), f32(4)),
    case("tensordot", lambda x, y: torch.tensordot(x, y, dims=([1], [0])), f32(3, 4), f32(4, 5)),
    case("matmul_bf16", lambda x, w: x @ w, bf16(3, 4), bf16(4, 5)),
    case("matmul_int", lambda x, w: x @ w, ints(3, 4), ints(4, 5)),
    case("cross", lambda x, y: torch.linalg.cross(x, y), f32(4, 3), f32(4, 3)),
    case("cdist", lambda x, y: torch.cdist(x, y), f32(3, 4), f32(5, 4)),
    case("cholesky", lambda a: torch.linalg.cholesky(a), spd(4)),
    case("cholesky_solve", lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a)), spd(4), f32(4, 2)),
    case("qr", lambda a: torch.linalg.qr(a).Q, f32(4, 3)),
    case("svd", lambda a: torch.linalg.svd(a, full_matrices=False).S, f32(4, 3)),
    case("svdvals", lambda a: torch.linalg.svdvals(a), f32(4, 3)),
    case("eigh", lambda a: torch.linalg.eigh(a).eigenvalues, spd(4)),
    case("eigvalsh", lambda a: torch.linalg.eigvalsh(a), spd(4)),
    case("eig", lambda a: torch.view_as_real(torch.linalg.eigvals(a)), spd(3)),
    case("solve", lambda a, b: torch.linalg.solve(a, b), spd(4), f32(4, 2)),
    case("solve_triangular", lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), spd(4),
         f32(4, 2)),
    case("inv", lambda a: torch.linalg.inv(a), spd(4)),
    case("det", lambda a: torch.linalg.det(a) + torch.logdet(a), spd(4)),
    case("slogdet", lambda a: torch.linalg.slogdet(a).logabsdet, spd(4)),
    case("lu", lambda a: torch.linalg.lu(a).U, spd(4), fails="torchax: slices with a traced bound"),
    case("lu_factor", lambda a: torch.linalg.lu_factor(a).LU, spd(4)),
    case("lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b), spd(4), f32(4, 2)),
    case("pinv", lambda a: torch.linalg.pinv(a), f32(4, 3)),
    case("matrix_exp", lambda a: torch.linalg.matrix_exp(a * 0.1), f32(3, 3)),
    case("matrix_power", lambda a: torch.linalg.matrix_power(a, 3), f32(3, 3)),
    case("householder", lambda a, t: torch.linalg.householder_product(a, t), f32(4, 3), f32(2)),
    case("lstsq", lambda a, b: torch.linalg.lstsq(a, b).solution, f32(5, 3), f32(5, 2),
         fails="data-dependent rank"),
    case("fft", lambda x: torch.view_as_real(torch.fft.fft(x)), f32(3, 8)),
    case("rfft_irfft", lambda x: torch.fft.irfft(torch.fft.rfft(x)), f32(3, 8)),
    case("fft2", lambda x: torch.view_as_real(torch.fft.fft2(x)), f32(4, 8)),
    # neural network functions
    case("relu", lambda x: F.relu(x), f32(3, 4)),
    case("relu6_hardtanh", lambda x: F.relu6(x) + F.hardtanh(x, -0.5, 0.5), f32(3, 4)),
    case("leaky_relu", lambda x: F.leaky_relu(x, 0.1), f32(3, 4)),
    case("elu_selu_celu", lambda x: F.elu(x) + F.selu(x) + F.celu(x), f32(3, 4)),
    case("gelu", lambda x: F.gelu(x), f32(3, 4)),
    case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), f32(3, 4)),
    case("silu", lambda x: F.silu(x), f32(3, 4)),
    case("mish", lambda x: F.mish(x), f32(3, 4)),
    case("sigmoid", lambda x: torch.sigmoid(x) + F.logsigmoid(x), f32(3, 4)),
    case("hardsigmoid_hardswish", lambda x: F.hardsigmoid(x) + F.hardswish(x), f32(3, 4)),
    case("softplus", lambda x: F.softplus(x) + F.softsign(x), f32(3, 4)),
    case("softshrink", lambda x: F.softshrink(x) + F.hardshrink(x) + F.tanhshrink(x), f32(3, 4)),
    case("threshold", lambda x: F.threshold(x, 0.1, 20.0), f32(3, 4)),
    case("glu", lambda x: F.glu(x), f32(3, 4)),
    case("prelu", lambda x, w: F.prelu(x, w), f32(2, 3, 4), f32(3)),
    case("softmax", lambda x: torch.softmax(x, -1) + torch.log_softmax(x, 0), f32(3, 4)),
    case("softmax_bf16", lambda x: torch.softmax(x, -1, dtype=torch.float32), bf16(3, 4)),
    case("softmin", lambda x: F.softmin(x, -1), f32(3, 4)),
    case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), f32(3, 4), f32(4), f32(4)),
    case("rms_norm", lambda x, w: F.rms_norm(x, (4,), w, 1e-6), f32(3, 4), f32(4)),
    case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), f32(2, 4, 3), f32(4), f32(4)),
    case("batch_norm_eval", lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False), f32(2, 3, 4),
         f32(3), pos(3), f32(3), f32(3)),
    case("batch_norm_train", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), f32(4, 3, 2),
         f32(3), f32(3)),
    case("instance_norm", lambda x: F.instance_norm(x), f32(2, 3, 5)),
    case("normalize", lambda x: F.normalize(x, dim=-1), f32(3, 4)),
    case("cosine_similarity", lambda x, y: F.cosine_similarity(x, y), f32(3, 4), f32(3, 4)),
    case("pairwise_distance", lambda x, y: F.pairwise_distance(x, y), f32(3, 4), f32(3, 4)),
    case("conv1d", lambda x, w, b: F.conv1d(x, w, b, padding=1), f32(2, 3, 8), f32(4, 3, 3), f32(4)),
    case("conv2d", lambda x, w: F.conv2d(x, w, stride=2, padding=1), f32(1, 3, 8, 8), f32(4, 3, 3, 3)),
    case("conv2d_groups", lambda x, w: F.conv2d(x, w, groups=2, dilation=2), f32(1, 4, 8, 8),
         f32(4, 2, 3, 3)),
    case("conv3d", lambda x, w: F.conv3d(x, w), f32(1, 2, 4, 4, 4), f32(3, 2, 2, 2, 2)),
    case("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2), f32(1, 3, 4, 4),
         f32(3, 2, 3, 3)),
    case("conv_transpose1d", lambda x, w: F.conv_transpose1d(x, w, padding=1), f32(1, 3, 5), f32(3, 2, 3)),
    case("max_pool2d", lambda x: F.max_pool2d(x, 2), f32(1, 2, 6, 6)),
    case("max_pool2d_indices", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)[1], f32(1, 2, 6, 6)),
    case("max_pool1d", lambda x: F.max_pool1d(x, 2, ceil_mode=True), f32(1, 2, 7)),
    case("avg_pool2d", lambda x: F.avg_pool2d(x, 2, padding=1), f32(1, 2, 6, 6)),
    case("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2), f32(1, 2, 7)),
    case("adaptive_avg_pool", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), f32(1, 2, 6, 6)),
    case("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 3), f32(1, 2, 7)),
    case("adaptive_max_pool", lambda x: F.adaptive_max_pool2d(x, 2), f32(1, 2, 6, 6),
         fails="torchax: no lowering for aten::adaptive_max_pool2d"),
    case("lp_pool", lambda x: F.lp_pool2d(x, 2, 2), pos(1, 2, 6, 6)),
    case("interpolate_nearest", lambda x: F.interpolate(x, scale_factor=2), f32(1, 2, 3, 3)),
    case("interpolate_bilinear", lambda x: F.interpolate(x, size=(5, 7), mode="bilinear"), f32(1, 2, 3, 3)),
    case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), f32(1, 4, 3, 3)),
    case("unfold_im2col", lambda x: F.unfold(x, 2), f32(1, 2, 4, 4)),
    case("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), f32(1, 2, 3, 4), f32(1, 2, 3, 4),
         f32(1, 2, 3, 4)),
    case("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         f32(1, 2, 3, 4), f32(1, 2, 3, 4), f32(1, 2, 3, 4)),
    case("sdpa_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         f32(1, 2, 3, 4), f32(1, 2, 3, 4), f32(1, 2, 3, 4), bools(3, 3)),
    case("mse_loss", lambda x, y: F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y), f32(3, 4),
         f32(3, 4)),
    case("huber_loss", lambda x, y: F.huber_loss(x, y), f32(3, 4), f32(3, 4)),
    case("cross_entropy", lambda x, t: F.cross_entropy(x, t), f32(3, 5), ints(3, low=0, high=5)),
    case("cross_entropy_smooth", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), f32(3, 5),
         ints(3, low=0, high=5)),
    case("nll_loss", lambda x, t: F.nll_loss(torch.log_softmax(x, -1), t), f32(3, 5), ints(3, low=0, high=5)),
    case("bce", lambda x, t: F.binary_cross_entropy_with_logits(x, t) + F.binary_cross_entropy(
        torch.sigmoid(x), t), f32(3, 4), lambda g: torch.rand(3, 4, generator=g)),
    case("kl_div", lambda x, y: F.kl_div(x, y, reduction="batchmean"), f32(3, 4), pos(3, 4)),
    case("dropout_eval", lambda x: F.dropout(x, 0.5, training=False), f32(3, 4)),
    # tensor factories and random numbers
    case("arange", lambda x: x + torch.arange(4), f32(3, 4)),
    case("arange_float", lambda x: x + torch.arange(0, 1, 0.25), f32(3, 4)),
    case("linspace", lambda x: x + torch.linspace(0, 1, 4), f32(3, 4)),
    case("zeros_ones_full", lambda x: x + torch.zeros(3, 4) + torch.ones(4) + torch.full((3, 1), 2.0),
         f32(3, 4)),
    case("zeros_like", lambda x: torch.zeros_like(x) + torch.ones_like(x) + torch.full_like(x, 3.0),
         f32(3, 4)),
    case("eye", lambda x: x + torch.eye(3, 4), f32(3, 4)),
    case("tensor_const", lambda x: x * torch.tensor([1.0, 2.0, 3.0, 4.0]), f32(3, 4)),
    case("empty", lambda x: torch.empty(3, 4).fill_(1.0) + x, f32(3, 4)),
    case("tril_indices", lambda x: x[torch.tril_indices(3, 3)[0]], f32(3, 4)),
    case("rand", lambda x: x + torch.rand(3, 4), f32(3, 4)),
    case("randn", lambda x: x + torch.randn(3, 4), f32(3, 4)),
    case("randint", lambda x: x + torch.randint(0, 5, (3, 4)), f32(3, 4)),
    case("rand_like", lambda x: x + torch.rand_like(x) + torch.randn_like(x), f32(3, 4)),
    case("randperm", lambda x: x[torch.randperm(3)], f32(3, 4)),
    case("dropout_train", lambda x: F.dropout(x, 0.5, training=True), f32(3, 4)),
    case("bernoulli", lambda x: torch.bernoulli(torch.sigmoid(x)), f32(3, 4)),
    case("multinomial", lambda x: torch.multinomial(torch.softmax(x, -1), 2), f32(3, 4)),
    case("normal_", lambda x: x + torch.empty(3, 4).normal_(), f32(3, 4)),
    case("uniform_", lambda x: x + torch.empty(3, 4).uniform_(-1, 1), f32(3, 4)),
    case("exponential_", lambda x: x + torch.empty(3, 4).exponential_(), f32(3, 4)),
    # in-place updates and copies
    case("inplace", lambda x: _inplace(x), f32(3, 4)),
    case("clone_detach", lambda x: x.clone().detach() * 2, f32(3, 4)),
    case("copy_", lambda x, y: x.clone().copy_(y), f32(3, 4), f32(3, 4)),
    case("contiguous", lambda x: x.t().contiguous().view(-1), f32(3, 4)),
    case("as_strided", lambda x: torch.as_strided(x, (2, 2), (1, 2)), f32(3, 4)),
    case("new_zeros", lambda x: x.new_zeros(2, 3) + x.new_ones(3) + x.new_full((3,), 2.0), f32(3, 4)),
    case("scalar_tensor_item", lambda x: x * x.shape[0], f32(3, 4)),
]


def _setitem(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[1] = v
    x[:, 2] = 0.0
    x[x > 1.0] = 1.0
    return x


def _setitem_at(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[i] = v
    return x


def _inplace(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.add_(1.0).mul_(2.0).clamp_(-1, 3).sub_(0.5)
    y.relu_()
    y[0].zero_()
    return y
