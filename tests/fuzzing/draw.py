"""The hypothesis strategy `programs`: random torch programs, one line drawn at a time.

Each operation below proposes one line over the values built so far (`fuzzing.programs.Builder`
runs it eagerly and keeps it only if it makes a small, finite tensor).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis import assume
from hypothesis import strategies as st

from fuzzing.programs import ATTEMPTS, MAX_LINES, Builder, Draw, InputSpec, Program, Value

SHAPES = st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple)
SPATIAL = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(2, 6), st.integers(2, 6)).flatmap(
    lambda s: st.sampled_from([s, s[:3]]))


@st.composite
def programs(draw: Draw) -> Program:
    """A random program: one to three inputs, then up to MAX_LINES lines of torch."""
    seed = draw(st.integers(0, 2**16))
    n_inputs = draw(st.integers(1, 3))
    specs = []
    for _ in range(n_inputs):
        dtype = draw(st.sampled_from([torch.float32] * 6 + [torch.bfloat16, torch.int64, torch.bool]))
        shape = draw(SPATIAL) if dtype.is_floating_point and draw(st.integers(0, 3)) == 0 else draw(SHAPES)
        specs.append(InputSpec(shape, dtype))
    # Parameters (weights) are drawn up front, as inputs, sized for the first float input.
    builder = Builder(draw, torch.Generator().manual_seed(seed))
    for spec in specs:
        builder.new_input(spec.shape, spec.dtype)
    _add_parameters(builder)
    for _ in range(draw(st.integers(2, MAX_LINES))):
        for _attempt in range(ATTEMPTS):
            op = draw(st.sampled_from(OPS))
            expression = op(builder)
            if expression is not None and builder.add(expression):
                break
    assume(builder.lines)
    made = [v.name for v in builder.values[len(builder.inputs):]]
    extra = draw(st.lists(st.sampled_from(made), max_size=1))
    outputs = list(dict.fromkeys([made[-1], *extra]))
    return Program(builder.inputs, builder.lines, outputs, seed)


def _add_parameters(builder: Builder) -> None:
    """Weights a later line may use: for the first float input `x`, a matrix `(x.shape[-1], n)`,
    a conv kernel when `x` is 3-D or 4-D, and a normalisation scale and shift."""
    first = next((v for v in builder.values if v.is_float and v.ndim >= 1), None)
    if first is None:
        return
    draw = builder.draw
    features = first.shape[-1]
    if draw(st.booleans()):
        builder.new_input((features, draw(st.integers(1, 5))), first.dtype)
    if draw(st.booleans()):
        builder.new_input((features,), first.dtype)
    if first.ndim in (3, 4):
        channels = first.shape[1]
        kernel = tuple(draw(st.integers(1, min(3, n))) for n in first.shape[2:])
        builder.new_input((draw(st.integers(1, 4)), channels, *kernel), first.dtype)


# -- operations ----------------------------------------------------------------------------------------
# Each returns a source expression over the builder's values, or None when nothing fits.

Op = Callable[[Builder], "str | None"]


def _float(v: Value) -> bool:
    return v.is_float


def _any(v: Value) -> bool:
    return True


def _dim(builder: Builder, value: Value) -> int:
    return builder.draw(st.integers(-value.ndim, value.ndim - 1))


UNARY_FLOAT = [
    "torch.exp(torch.clamp({x}, max=5.0))", "torch.log({x}.abs() + 1)", "torch.sqrt({x}.abs())",
    "torch.rsqrt({x}.abs() + 0.5)", "torch.sin({x})", "torch.cos({x})", "torch.tanh({x})",
    "torch.sigmoid({x})", "F.relu({x})", "F.gelu({x})", "F.gelu({x}, approximate='tanh')", "F.silu({x})",
    "F.softplus({x})", "F.elu({x})", "F.leaky_relu({x}, 0.1)", "-{x}", "{x}.abs()", "torch.square({x})",
    "{x} ** 2", "{x} ** 3", "torch.floor({x})", "torch.ceil({x})", "torch.round({x})", "torch.trunc({x})",
    "torch.sign({x})", "torch.clamp({x}, -1.0, 1.0)", "torch.erf({x})", "torch.atan({x})",
    "1 / ({x}.abs() + 1)", "{x} * 2.5", "{x} + 1.0", "3.0 - {x}", "{x} / 4.0", "F.hardtanh({x})",
    "F.relu6({x})", "F.mish({x})", "F.hardswish({x})", "torch.expm1(torch.clamp({x}, max=5.0))",
    "torch.log1p({x}.abs())", "torch.frac({x})", "F.logsigmoid({x})", "torch.nan_to_num({x})",
    "{x}.clamp(min=0.0)", "torch.remainder({x}, 1.5)", "torch.fmod({x}, 1.5)",
    "{x}.clone().mul_(2.0).add_(1.0)",
]
BINARY_FLOAT = [
    "{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / ({y}.abs() + 1)", "torch.maximum({x}, {y})",
    "torch.minimum({x}, {y})", "torch.where({x} > {y}, {x}, {y})", "torch.atan2({x}, {y})",
    "torch.add({x}, {y}, alpha=0.5)", "torch.lerp({x}, {y}, 0.25)", "{x}.clone().add_({y})",
    "torch.hypot({x}, {y})", "torch.xlogy({x}, {y}.abs() + 1)",
]
COMPARISONS = ["{x} > {y}", "{x} <= {y}", "{x} == {y}", "{x} != {y}", "{x} >= 0.5", "{x} < -0.25"]
BOOL_OPS = ["torch.logical_and({a}, {b})", "{a} | {b}", "~{a}", "{a} ^ {b}", "torch.logical_not({a})"]
INT_OPS = [
    "{i} + {j}", "{i} * 3", "{i} - {j}", "torch.div({i}, {j}.abs() + 1, rounding_mode='floor')",
    "{i} // ({j}.abs() + 1)", "{i} % 3", "torch.remainder({i}, 4)", "{i} & {j}", "{i} | {j}", "{i} ^ {j}",
    "torch.abs({i})", "-{i}", "torch.clamp({i}, -3, 3)", "torch.maximum({i}, {j})", "{i} << 1", "{i} >> 1",
    "torch.div({i}, {j}.abs() + 1, rounding_mode='trunc')",
]
CASTS = [
    "{x}.to(torch.bfloat16)", "{x}.float()", "{x}.to(torch.int32)", "{x}.long()", "{x}.bool()",
    "{x}.half()", "{x}.to(torch.float32)", "{x}.abs().to(torch.uint8)",
]
REDUCTIONS = [
    "{x}.sum({d})", "{x}.sum({d}, keepdim=True)", "{x}.mean({d})", "{x}.amax({d})",
    "{x}.amin({d}, keepdim=True)",
    "{x}.max({d}).values", "{x}.min({d}).indices", "{x}.argmax({d})", "{x}.var({d})", "{x}.std({d})",
    "torch.logsumexp({x}, {d})", "{x}.norm(dim={d})", "{x}.prod({d})", "torch.cumsum({x}, {d})",
    "torch.softmax({x}, {d})", "torch.log_softmax({x}, {d})", "{x}.sum()", "{x}.mean()", "{x}.max()",
    "torch.cumprod(torch.clamp({x}, -1.5, 1.5), {d})", "F.normalize({x}, dim={d})",
    "torch.sort({x}, {d}).values", "torch.sort({x}, {d}, descending=True).indices", "torch.argsort({x}, {d})",
]
BOOL_REDUCTIONS = ["{a}.any({d})", "{a}.all({d})", "{a}.sum({d})", "{a}.float().mean()"]


def _template(templates: list[str], **operands: Callable[[Value], bool]) -> Op:
    """Lines from `templates`, each `{name}` filled with a value its filter accepts."""

    def op(builder: Builder) -> str | None:
        template = builder.draw(st.sampled_from(templates))
        names: dict[str, str] = {}
        chosen: list[Value] = []
        for key, accept in operands.items():
            if "{" + key + "}" not in template:
                continue
            value = builder.pick(
                lambda v, accept=accept: accept(v) and all(_promotes_alike(v, c) for c in chosen)
            )
            if value is None:
                return None
            chosen.append(value)
            names[key] = value.name
        if "{d}" in template:
            target = next(v for v in builder.values if v.name == names.get("x", names.get("a")))
            if target.ndim == 0:
                return None
            names["d"] = str(_dim(builder, target))
        return template.format(**names)

    return op


def _promotes_alike(a: Value, b: Value) -> bool:
    """torchax promotes a 0-d tensor against a tensor of another float dtype as if both had
    dimensions (torch keeps the dimensioned operand's dtype): such pairs are not drawn."""
    return a.dtype == b.dtype or (a.ndim > 0 and b.ndim > 0) or not (a.is_float and b.is_float)


def _views(builder: Builder) -> str | None:
    x = builder.pick(_any)
    if x is None:
        return None
    draw = builder.draw
    n = x.ndim
    kind = draw(st.sampled_from(
        ["reshape", "flatten", "permute", "transpose", "unsqueeze", "squeeze", "expand", "flip", "roll", "T",
         "view", "contiguous", "repeat", "movedim"]
    ))
    if kind == "reshape":
        return f"{x.name}.reshape({_factorisation(draw, x.tensor.numel())!r})"
    if kind == "view":
        return f"{x.name}.view(-1)"
    if kind == "flatten":
        return f"{x.name}.flatten()" if n < 2 else f"{x.name}.flatten({draw(st.integers(0, n - 2))})"
    if kind == "permute" and n >= 2:
        return f"{x.name}.permute{tuple(draw(st.permutations(range(n))))!r}"
    if kind == "transpose" and n >= 2:
        return f"{x.name}.transpose({_dim(builder, x)}, {_dim(builder, x)})"
    if kind == "movedim" and n >= 2:
        return f"torch.movedim({x.name}, {_dim(builder, x)}, {_dim(builder, x)})"
    if kind == "unsqueeze":
        return f"{x.name}.unsqueeze({draw(st.integers(-n - 1, n))})"
    if kind == "squeeze":
        ones = [d for d, size in enumerate(x.shape) if size == 1]
        return f"{x.name}.squeeze({draw(st.sampled_from(ones))})" if ones else f"{x.name}.squeeze()"
    if kind == "expand":
        return f"{x.name}.expand({draw(st.integers(1, 3))}, *{x.name}.shape)"
    if kind == "flip" and n:
        return f"torch.flip({x.name}, ({_dim(builder, x)},))"
    if kind == "roll" and n:
        return f"torch.roll({x.name}, {draw(st.integers(-3, 3))}, {_dim(builder, x)})"
    if kind == "T" and n == 2:
        return f"{x.name}.T"
    if kind == "repeat" and n:
        return f"{x.name}.repeat({', '.join(str(draw(st.integers(1, 2))) for _ in range(n))})"
    if kind == "contiguous" and n >= 2:
        return f"{x.name}.transpose(0, 1).contiguous()"
    return None


def _factorisation(draw: Draw, size: int) -> tuple[int, ...]:
    factors = []
    rest = size
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        factor = draw(st.sampled_from(divisors))
        factors.append(factor)
        rest //= factor
    return (*factors, rest)


def _indexing(builder: Builder) -> str | None:
    x = builder.pick(lambda v: v.ndim >= 1)
    if x is None:
        return None
    draw = builder.draw
    d = draw(st.integers(0, x.ndim - 1))
    size = x.shape[d]
    lead = ":, " * d
    kind = draw(st.sampled_from(
        ["int", "slice", "step", "none", "ellipsis", "tensor", "index_select", "gather", "narrow", "select",
         "take", "negative"]
    ))
    if kind == "int":
        return f"{x.name}[{lead}{draw(st.integers(-size, size - 1))}]"
    if kind == "slice":
        start = draw(st.integers(0, size - 1))
        return f"{x.name}[{lead}{start}:{draw(st.integers(start + 1, size))}]"
    if kind == "step":
        return f"{x.name}[{lead}{draw(st.integers(0, size - 1))}::{draw(st.integers(1, 3))}]"
    if kind == "negative":
        return f"{x.name}[{lead}-{draw(st.integers(1, size))}:]"
    if kind == "none":
        return f"{x.name}[{lead}None]"
    if kind == "ellipsis":
        return f"{x.name}[..., {draw(st.integers(-x.shape[-1], x.shape[-1] - 1))}]"
    indices = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=4))
    if kind == "tensor":
        return f"{x.name}[{lead}torch.tensor({indices})]"
    if kind == "index_select":
        return f"torch.index_select({x.name}, {d}, torch.tensor({indices}))"
    if kind == "narrow":
        start = draw(st.integers(0, size - 1))
        return f"torch.narrow({x.name}, {d}, {start}, {draw(st.integers(1, size - start))})"
    if kind == "select":
        return f"torch.select({x.name}, {d}, {draw(st.integers(0, size - 1))})"
    if kind == "take":
        return f"torch.take({x.name}, torch.tensor({[i % x.tensor.numel() for i in indices]}))"
    if kind == "gather":
        shape = list(x.shape)
        shape[d] = len(indices)
        index = torch.tensor(indices).reshape([-1 if i == d else 1 for i in range(x.ndim)]).expand(shape)
        return f"torch.gather({x.name}, {d}, torch.tensor({index.tolist()}))"
    return None


def _updates(builder: Builder) -> str | None:
    x = builder.pick(lambda v: v.ndim >= 1 and v.is_float)
    if x is None:
        return None
    draw = builder.draw
    size = x.shape[0]
    indices = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=3))
    kind = draw(st.sampled_from(
        ["index_put", "index_add", "scatter_add", "masked_fill", "where_scalar", "setitem"]
    ))
    rows = f"torch.tensor({indices})"
    source = f"{x.name}[{rows}] * 0.5"
    if kind == "index_put":
        return f"{x.name}.index_put(({rows},), {source})"
    if kind == "index_add":
        return f"{x.name}.index_add(0, {rows}, {source})"
    if kind == "scatter_add":
        index = torch.tensor(indices).reshape([-1] + [1] * (x.ndim - 1)).expand(len(indices), *x.shape[1:])
        return f"torch.scatter_add({x.name}, 0, torch.tensor({index.tolist()}), {source})"
    if kind == "masked_fill":
        return f"{x.name}.masked_fill({x.name} > 0.5, -1.0)"
    if kind == "where_scalar":
        return f"torch.where({x.name} < 0, 0.0, {x.name})"
    if kind == "setitem":
        return f"_setitem({x.name}, {indices[0]})"
    return None


def _linear_algebra(builder: Builder) -> str | None:
    draw = builder.draw
    x = builder.pick(lambda v: v.is_float and v.ndim >= 1)
    if x is None:
        return None
    k = x.shape[-1]
    fits = [v for v in builder.values if v.dtype == x.dtype and v.ndim in (1, 2) and v.shape[0] == k]
    weights = [v for v in fits if v.ndim == 2]
    vectors = [v for v in fits if v.ndim == 1]
    kind = draw(st.sampled_from(["matmul", "linear", "einsum", "self", "bmm", "outer", "dot"]))
    if kind == "matmul" and weights:
        return f"{x.name} @ {draw(st.sampled_from(weights)).name}"
    if kind == "linear" and weights:
        w = draw(st.sampled_from(weights))
        return f"F.linear({x.name}, {w.name}.T)"
    if kind == "einsum" and weights:
        w = draw(st.sampled_from(weights))
        return f"torch.einsum('...k,kn->...n', {x.name}, {w.name})"
    if kind == "self" and x.ndim >= 2:
        return f"{x.name} @ {x.name}.transpose(-1, -2)"
    if kind == "bmm" and x.ndim == 3:
        return f"torch.bmm({x.name}, {x.name}.transpose(1, 2))"
    if kind == "outer" and x.ndim == 1:
        return f"torch.outer({x.name}, {x.name})"
    if kind == "dot" and vectors:
        return f"{x.name} @ {draw(st.sampled_from(vectors)).name}"
    return None


def _neural(builder: Builder) -> str | None:
    draw = builder.draw
    x = builder.pick(lambda v: v.is_float and v.ndim >= 1)
    if x is None:
        return None
    k = x.shape[-1]
    scales = [v for v in builder.values if v.is_float and v.shape == (k,) and v.dtype == x.dtype]
    kind = draw(st.sampled_from(
        ["layer_norm", "rms_norm", "group_norm", "batch_norm", "sdpa", "pad", "softmax", "dropout_eval",
         "glu"]
    ))
    scale = draw(st.sampled_from(scales)).name if scales and draw(st.booleans()) else "None"
    if kind == "layer_norm":
        return f"F.layer_norm({x.name}, ({k},), {scale})"
    if kind == "rms_norm":
        return f"F.rms_norm({x.name}, ({k},), {scale}, 1e-5)"
    if kind == "group_norm" and x.ndim >= 2:
        channels = x.shape[1]
        groups = draw(st.sampled_from([g for g in range(1, channels + 1) if channels % g == 0]))
        return f"F.group_norm({x.name}, {groups})"
    if kind == "batch_norm" and x.ndim >= 2:
        c = x.shape[1]
        return f"F.batch_norm({x.name}, torch.zeros({c}), torch.ones({c}), training={draw(st.booleans())})"
    if kind == "sdpa" and x.ndim >= 2:
        causal = draw(st.booleans())
        return f"F.scaled_dot_product_attention({x.name}, {x.name}, {x.name}, is_causal={causal})"
    if kind == "pad":
        mode = draw(st.sampled_from(["constant", "reflect", "replicate"]))
        if mode != "constant" and (x.ndim < 2 or k < 2):
            return None
        return f"F.pad({x.name}, (1, {draw(st.integers(0, 2))}), mode={mode!r})"
    if kind == "softmax":
        return f"F.softmax({x.name}, dim=-1)"
    if kind == "dropout_eval":
        return f"F.dropout({x.name}, 0.3, training=False)"
    if kind == "glu" and k % 2 == 0:
        return f"F.glu({x.name})"
    return None


def _spatial(builder: Builder) -> str | None:
    """Convolution and pooling over a 3-D (N, C, L) or 4-D (N, C, H, W) value."""
    draw = builder.draw
    x = builder.pick(lambda v: v.is_float and v.ndim in (3, 4))
    if x is None:
        return None
    kind = draw(st.sampled_from(["conv", "conv", "max_pool", "avg_pool", "adaptive", "interpolate"]))
    dims = x.ndim - 2
    if kind == "conv":
        kernels = [v for v in builder.values if v.ndim == x.ndim and v.shape[1] == x.shape[1] and v is not x
                   and v.dtype == x.dtype and all(a <= b for a, b in zip(v.shape[2:], x.shape[2:]))]
        if not kernels:
            return None
        w = draw(st.sampled_from(kernels))
        padding, stride = draw(st.integers(0, 1)), draw(st.integers(1, 2))
        return f"F.conv{dims}d({x.name}, {w.name}, padding={padding}, stride={stride})"
    if min(x.shape[2:]) < 2:
        return None
    if kind in ("max_pool", "avg_pool"):
        return f"F.{kind}{dims}d({x.name}, 2, stride={draw(st.integers(1, 2))})"
    if kind == "adaptive":
        return f"F.adaptive_avg_pool{dims}d({x.name}, 1)"
    if kind == "interpolate":
        return f"F.interpolate({x.name}, scale_factor=2)"
    return None


def _joins(builder: Builder) -> str | None:
    draw = builder.draw
    x = builder.pick(lambda v: v.ndim >= 1)
    if x is None:
        return None
    d = _dim(builder, x)
    same = [v for v in builder.values if v.shape == x.shape and v.dtype == x.dtype]
    kind = draw(st.sampled_from(["cat", "stack", "split", "chunk", "unbind", "cat_self"]))
    if kind == "cat":
        return f"torch.cat([{x.name}, {draw(st.sampled_from(same)).name}], {d})"
    if kind == "cat_self":
        return f"torch.cat([{x.name}, {x.name}[:1] * 2], 0)"
    if kind == "stack":
        return f"torch.stack([{x.name}, {draw(st.sampled_from(same)).name}], {draw(st.integers(0, x.ndim))})"
    size = x.shape[d]
    if kind == "split":
        return f"torch.split({x.name}, {draw(st.integers(1, size))}, {d})[{draw(st.integers(0, 5))}]"
    if kind == "chunk":
        return f"torch.chunk({x.name}, {draw(st.integers(1, 3))}, {d})[0]"
    if kind == "unbind":
        return f"torch.unbind({x.name}, {d})[{draw(st.integers(0, size - 1))}]"
    return None


def _factories(builder: Builder) -> str | None:
    draw = builder.draw
    x = builder.pick(lambda v: v.ndim >= 1)
    if x is None:
        return None
    n = x.shape[-1]
    # No `type_as`: torchax's converts the tensor it is called on in place.
    kind = draw(st.sampled_from(["arange", "zeros_like", "full_like", "ones", "causal", "to", "tril", "eye"]))
    if kind == "arange":
        return f"{x.name} + torch.arange({n})"
    if kind == "zeros_like":
        return f"torch.zeros_like({x.name}) + {x.name}"
    if kind == "full_like":
        return f"torch.full_like({x.name}, {draw(st.sampled_from(['2.5', '-1', '0.0']))})"
    if kind == "ones":
        return f"{x.name} * torch.ones({n}, dtype={x.dtype})"
    if kind == "causal" and x.ndim >= 2 and x.is_float:
        m = x.shape[-2]
        mask = f"torch.ones({m}, {n}, dtype=torch.bool).triu(1)"
        return f"torch.softmax({x.name}.masked_fill({mask}, float('-inf')), -1)"
    if kind == "to":
        other = builder.pick(lambda v: v is not x)
        return f"{x.name}.to({other.name}.dtype)" if other is not None else None
    if kind == "tril" and x.ndim >= 2:
        return f"torch.tril({x.name}, {draw(st.integers(-1, 1))})"
    if kind == "eye" and x.ndim >= 2 and x.is_float:
        return f"{x.name} + torch.eye({x.shape[-2]}, {n}, dtype={x.dtype})"
    return None


OPS: list[Op] = [
    _template(UNARY_FLOAT, x=_float),
    _template(UNARY_FLOAT, x=_float),
    _template(BINARY_FLOAT, x=_float, y=_float),
    _template(BINARY_FLOAT, x=_float, y=_float),
    _template(COMPARISONS, x=lambda v: not v.is_bool, y=lambda v: not v.is_bool),
    _template(BOOL_OPS, a=lambda v: v.is_bool, b=lambda v: v.is_bool),
    _template(["torch.where({a}, {x}, {y})", "{x}.masked_fill({a}, 0.5)", "torch.where({a}, {x}, 0.0)"],
              a=lambda v: v.is_bool, x=_float, y=_float),
    _template(INT_OPS, i=lambda v: v.is_int, j=lambda v: v.is_int),
    _template(CASTS, x=_any),
    _template(REDUCTIONS, x=_float),
    _template(REDUCTIONS[:14], x=lambda v: v.is_int),
    _template(BOOL_REDUCTIONS, a=lambda v: v.is_bool),
    _views,
    _views,
    _indexing,
    _indexing,
    _updates,
    _linear_algebra,
    _linear_algebra,
    _neural,
    _spatial,
    _spatial,
    _joins,
    _factories,
]
