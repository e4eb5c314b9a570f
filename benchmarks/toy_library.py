"""A stand-in for torch, torchax and JAX in plain Python: every op runs through layers of small calls.

What matters for the frame hook is the shape of the work, not the arithmetic: user code is a
few lines per function, each op it calls costs the library about 250 Python frames (as a
torch op traced by torchax does, though these frames are far lighter), and ops append to one
equation list.
`mode()` plays the part of a torch function mode: it wraps every op from outside.

`PASSES` and `SPIN` set how much work an op is: `configure("torchax")` makes it about what
torchax spends tracing a torch op of the Llama sample (some 700 frames, 0.3 ms on Python 3.11
here), `configure("light")` fifteen times less, the harder case for a hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

PASSES = 4
"""Argument passes per op: the Python frames an op costs grow with it (4: about 250)."""
SPIN = 0
"""Extra C-level work in each leaf check, making frames as heavy as JAX's (0: featherweight)."""

EQUATIONS: list[tuple[str, tuple[int, ...]]] = []
"""The program being traced: one entry per op, as a jaxpr keeps one equation per primitive."""

_MODES: list[Callable[..., Any]] = []


class Array:
    """An abstract array: a shape, and how it was made."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: str = "float32") -> None:
        self.shape = shape
        self.dtype = dtype

    def __add__(self, other: Any) -> Array:
        return apply("add", self, other)

    def __mul__(self, other: Any) -> Array:
        return apply("mul", self, other)

    def __sub__(self, other: Any) -> Array:
        return apply("sub", self, other)

    def __matmul__(self, other: Array) -> Array:
        return apply("matmul", self, other)

    def mean(self, axis: int = -1) -> Array:
        return apply("mean", self, axis=axis)

    def rsqrt(self) -> Array:
        return apply("rsqrt", self)

    def silu(self) -> Array:
        return apply("silu", self)

    def softmax(self, axis: int = -1) -> Array:
        return apply("softmax", self, axis=axis)

    def transpose(self) -> Array:
        return apply("transpose", self)

    def take(self, indices: Array) -> Array:
        return apply("take", self, indices)


WEIGHTS = {"light": (4, 0), "torchax": (14, 200)}


def configure(weight: str) -> None:
    """Set how heavy an op is: a name in `WEIGHTS`."""
    global PASSES, SPIN
    PASSES, SPIN = WEIGHTS[weight]


@contextlib.contextmanager
def mode(wrapper: Callable[..., Any]) -> Iterator[None]:
    """While open, every op runs as ``wrapper(dispatch, name, args, params)``."""
    _MODES.append(wrapper)
    try:
        yield
    finally:
        _MODES.remove(wrapper)


def apply(name: str, *args: Any, **params: Any) -> Array:
    if _MODES:
        return _MODES[-1](_dispatch, name, args, params)
    return _dispatch(name, args, params)


def _dispatch(name: str, args: tuple[Any, ...], params: dict[str, Any]) -> Array:
    # Like torchax and JAX: arguments go through pytree maps and checks, pass after pass.
    for _ in range(PASSES):
        args, params = _tree_map(_unwrap, (args, params))
    leaves = _flatten(args)
    avals = [_abstractify(leaf) for leaf in leaves]
    shape = _RULES[name](*avals, **params)
    out = Array(_canonical_shape(shape), _result_dtype(avals))
    _record(name, out, avals, params)
    return _tree_map(_wrap, out)


def _tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    kind = _node_kind(tree)
    if _is_leaf(kind):
        return fn(tree)
    children, rebuild = _children(tree, kind)
    return rebuild([_tree_map(fn, child) for child in children])


def _node_kind(tree: Any) -> str:
    if isinstance(tree, (tuple, list)):
        return type(tree).__name__
    return "dict" if isinstance(tree, dict) else "leaf"


def _is_leaf(kind: str) -> bool:
    return kind == "leaf"


def _children(tree: Any, kind: str) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    if kind == "dict":
        keys = sorted(tree)
        return [tree[k] for k in keys], lambda values: dict(zip(keys, values))
    return list(tree), (tuple if kind == "tuple" else list)


def _unwrap(value: Any) -> Any:
    return _check(value) if isinstance(value, Array) else value


def _wrap(value: Any) -> Any:
    return _check(value) if isinstance(value, Array) else value


def _check(value: Array) -> Array:
    _canonical_shape(value.shape)
    _canonical_dtype(value.dtype)
    if SPIN:
        sorted(range(SPIN), key=_NEGATE)
    return value


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def _abstractify(value: Any) -> tuple[tuple[int, ...], str]:
    if isinstance(value, Array):
        return _canonical_shape(value.shape), _canonical_dtype(value.dtype)
    return (), _canonical_dtype("float32" if isinstance(value, float) else "int32")


def _canonical_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_canonical_dim(d) for d in shape)


def _canonical_dim(d: int) -> int:
    if not _is_constant_dim(d):
        raise TypeError(f"dimension {d!r} is not an int")
    return int(d)


def _is_constant_dim(d: Any) -> bool:
    return isinstance(d, int) and _is_valid(d)


def _is_valid(d: int) -> bool:
    return d >= 0


def _canonical_dtype(dtype: str) -> str:
    return _DTYPES.get(dtype, dtype)


def _result_dtype(avals: list[tuple[tuple[int, ...], str]]) -> str:
    dtypes = [_canonical_dtype(dtype) for _, dtype in avals]
    return _promote(dtypes)


def _promote(dtypes: list[str]) -> str:
    result = dtypes[0]
    for dtype in dtypes[1:]:
        result = _join(result, dtype)
    return result


def _join(a: str, b: str) -> str:
    return a if _rank(a) >= _rank(b) else b


def _rank(dtype: str) -> int:
    return _ORDER.index(dtype) if dtype in _ORDER else 0


def _record(name: str, out: Array, avals: list[Any], params: dict[str, Any]) -> None:
    source = _source_info(name, len(avals), params)
    EQUATIONS.append((source, out.shape))


def _source_info(name: str, arity: int, params: dict[str, Any]) -> str:
    return f"{name}/{arity}/" + ",".join(_param_text(k, v) for k, v in sorted(params.items()))


def _param_text(key: str, value: Any) -> str:
    return f"{key}={value!r}"


def _broadcast(a: Any, b: Any) -> tuple[int, ...]:
    shape_a, shape_b = _pad_rank(a[0], len(b[0])), _pad_rank(b[0], len(a[0]))
    return tuple(_broadcast_dim(x, y) for x, y in zip(shape_a, shape_b))


def _pad_rank(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + shape


def _broadcast_dim(x: int, y: int) -> int:
    if x != y and 1 not in (x, y):
        raise ValueError(f"cannot broadcast {x} with {y}")
    return max(x, y)


def _matmul(a: Any, b: Any) -> tuple[int, ...]:
    batch = _broadcast((a[0][:-2], a[1]), (b[0][:-2], b[1]))
    return batch + (a[0][-2], b[0][-1])


def _reduce(a: Any, axis: int = -1) -> tuple[int, ...]:
    axis = _canonical_axis(axis, len(a[0]))
    return a[0][:axis] + (1,) + a[0][axis + 1 :]


def _canonical_axis(axis: int, rank: int) -> int:
    return axis % rank if rank else 0


def _same(a: Any, axis: int = -1) -> tuple[int, ...]:
    return a[0]


def _transpose(a: Any) -> tuple[int, ...]:
    return a[0][:-2] + (a[0][-1], a[0][-2])


def _take(table: Any, indices: Any) -> tuple[int, ...]:
    return indices[0] + table[0][1:]


_NEGATE = int.__neg__
_DTYPES = {"float": "float32", "int": "int32"}
_ORDER = ["bool", "int32", "float32"]
_RULES: dict[str, Callable[..., tuple[int, ...]]] = {
    "add": _broadcast, "mul": _broadcast, "sub": _broadcast, "matmul": _matmul,
    "mean": _reduce, "rsqrt": _same, "silu": _same, "softmax": _same, "transpose": _transpose,
    "take": _take,
}
