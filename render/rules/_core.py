"""Building blocks every rule family uses: the exact `bind` fallback, literals, operand predicates;
what an idiom's pattern reads (`Graph`) and proposes (`Candidate`).

Family modules import from here (private names included: this module is the subpackage's own);
code outside `render.rules` imports what `render.rules` exports.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Literal

from jaxside.render.rules.emitter import Emitter, Structured

Rule = Callable[[Any, list[ast.expr], Emitter], "ast.expr | Structured"]


# Every form a rule writes that does not re-trace to the very equation it renders, and why it
# still computes the same bits under `jax.jit` (the bar for an export).  A rule that takes one
# says so with `rewritten(name, ...)`; `tests/fuzzing/rewrites.py` proves each one bit for bit
# on jitted outputs (-0.0, NaN, +-inf and denormals among the inputs), and docs/ops.md lists them.
REWRITES: dict[str, str] = {
    "matmul_transposed": (
        "`x @ w.T`, `g.T @ x`, `q @ k.mT` for a `dot_general` that contracts a transposed operand: "
        "jnp binds the transpose and a plain matmul, which XLA folds back into the one dot "
        "(a transpose moves no value, and the dot's products and sums are the same ones)"
    ),
    "matmul_unflattened": (
        "`a @ b` for 4-d (or higher) operands where torchax reshapes both to one batch axis, "
        "multiplies and reshapes back: a reshape moves no value, and each output element is the "
        "same dot product of the same row and column"
    ),
    "repeat_broadcasts": (
        "`jnp.repeat(k, 2, axis=1)` for torch's `k[:, :, None].expand(b, kv, 2, s, d).reshape(b, kv * 2, "
        "s, d)` (HF's `repeat_kv`), which torchax stages as a broadcast to a new axis of size one, a "
        "broadcast along it and a reshape merging it: jnp binds one broadcast (a broadcast of a "
        "broadcast is the broadcast along the composed axes: every element comes from the same "
        "element of `k`) and the same reshape, and neither changes a value"
    ),
    "times_one": (
        "`x` for `x * 1` (any dtype): multiplying by one returns every value unchanged, -0.0, NaN, "
        "+-inf and denormals included, and XLA removes the multiply under jit"
    ),
    "times_minus_one": (
        "`-x` for `x * -1` (torchax's `neg`: `-1 * x`) on floats and signed integers: both flip the "
        "sign of every value, -0.0, +-inf and denormals included, and XLA compiles the multiply to "
        "the same negation (NaN keeps its payload with its sign flipped; the most negative integer "
        "wraps to itself either way)"
    ),
    "copy_is_value": (
        "`x` for `jnp.copy(x)` (the copy torchax's `aten._to_copy` and `aten.lift_fresh_copy` stage, and "
        "`jnp.array(x)` inside a library function such as `torch.special.gammaincc`; torch's `x.clone()` "
        "stages none): a JAX array is immutable, so the copy and its operand hold the same bits for "
        "good, -0.0, NaN payloads and denormals included; a torch write after the copy is a new value in "
        "JAX (`.at[...].set`, a scatter), never a write to the operand, and XLA removes the copy under "
        "jit"
    ),
    "plus_zero": (
        "`x` for integer `x + 0` and for float `x + (-0.0)` (the additive identity of IEEE floats; "
        "float `x + 0.0` stays, it turns -0.0 into 0.0)"
    ),
    "logical_identity": (
        "`x` for boolean `x & True` and `x | False` (attention masks start from `True & ...`): "
        "and with true and or with false return every boolean unchanged"
    ),
    "split_slices": (
        "`q, k, v = jnp.split(x, [64, 96], axis=2)` for the slices torchax stages for `torch.split` "
        "and `torch.chunk` (contiguous, stride one, together the whole axis): jnp binds one `split`, "
        "which copies the same elements into the same parts"
    ),
    "unstack_parts": (
        "`r, s, t = jnp.unstack(x, axis=1)` for torch.unbind's `split` into parts of one, each "
        "squeezed: jnp binds one `unstack`, which copies the same elements into the same parts"
    ),
    "triangular_mask": (
        "`jnp.tril(x, k)` (`jnp.triu`) for torch's decomposition of `x.tril(k)`: `jnp.where(arange(S) - "
        "arange(L)[:, None] <= k, x, 0)` (`>= k` for triu, `mask & x` for booleans): jnp keeps `x` where "
        "`i + k >= j` (triu: where not `i + k - 1 >= j`) and selects zero elsewhere; with `|k|`, L and S "
        "below 2**30 nothing overflows int32, so the same elements are kept and the others are the "
        "same zero (+0.0, 0, False)"
    ),
    "keys_unpacked": (
        "`key, dropout_key = jax.random.split(key)` for the key torchax splits before each draw, each "
        "part sliced out and squeezed: unpacking an array iterates it, which slices and squeezes the "
        "same parts (the reference traced is `tuple(jax.random.split(key))`, the very equations); "
        "`jax.random.split(key)[1]` where one part is used: jnp slices it with no strides, the "
        "same one element as torchax's stride of one"
    ),
    "unit_axes": (
        "`v[None, :, None, None]` for a reshape that only inserts axes of size one (`v[:, None, None]` "
        "beside an operand of full rank, whose rank promotion adds the leading ones): jnp binds a "
        "`broadcast_in_dim` instead, and neither moves or changes a value"
    ),
}


def rewritten(name: str, node: ast.expr, emitter: Emitter) -> ast.expr:
    """`node`, a form listed in `REWRITES` as `name`, told to the emitter (which may check it)."""
    if name not in REWRITES:
        raise KeyError(f"`{name}` is not in REWRITES")
    emitter.rewrote(name)
    return node


# What an idiom's pattern (`render.rules.idioms`) reads and proposes.


class Graph(NamedTuple):
    """The program around the equation a pattern looks at."""

    producer: Callable[[Any], Any]
    """The equation that made a value (None for an input, a literal or a value made elsewhere)."""
    users: Callable[[Any], list[Any]]
    """The live equations that read a value, in program order."""
    constant: Callable[[Any], Any] = lambda v: None
    """The value of a constant of the program (an array torch made from a Python list), else None."""


class Candidate(NamedTuple):
    """An expression over `_0`, `_1`, ... standing for `operands`, to be traced and matched."""

    code: str
    operands: list[Any]
    writes: str | None = None
    """What to write instead of `code` when it is a rewrite (`_0 @ _1` for torchax's flattened matmul)."""
    rewrite: str | None = None
    """The `REWRITES` entry that says why `writes` computes `code`'s bits under jit."""
    outputs: list[Any] | None = None
    """The values `code`'s results stand for, when it has several (a sequence, in order); by
    default the one result of the equation the run ends in."""


Proposal = Candidate | tuple[str, list[Any]]
"""What a pattern proposes: a `Candidate`, or `(code, operands)` for a plain one."""
Pair = tuple[str, list[Any]]
"""A plain proposal: `(code, operands)`."""


def registrar(table: dict[str, Rule]) -> Callable[..., Callable[[Rule], Rule]]:
    """`@rule("neg")` for a family's `table`: one rule per primitive, a second one is an error."""

    def rule(*names: str) -> Callable[[Rule], Rule]:
        def register(fn: Rule) -> Rule:
            for name in names:
                if name in table:
                    raise ValueError(f"two rules for `{name}`: {table[name].__name__} and {fn.__name__}")
                table[name] = fn
            return fn

        return register

    return rule


def exact(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """``<primitive>.bind(*args, **params)``: the equation itself, whatever it is.

    Jaxpr-valued params become ``jax.make_jaxpr(<nested function>)(<operand types>)``.
    """
    primitive = ast.Attribute(dotted(primitive_path(eqn.primitive)), "bind", ast.Load())
    keywords = [ast.keyword(k, _param_expr(k, v, emitter)) for k, v in eqn.params.items()]
    return call(primitive, args, keywords)


def _param_expr(key: str, value: Any, emitter: Emitter) -> ast.expr:
    if isinstance(value, ClosedJaxpr):
        return staged_jaxpr(value, key, emitter)
    if hasattr(value, "_fields"):
        fields = [ast.keyword(f, _param_expr(f, getattr(value, f), emitter)) for f in value._fields]
        return call(class_path(type(value)), [], fields)
    if isinstance(value, (tuple, list)) and any(isinstance(v, ClosedJaxpr) for v in value):
        return ast.Tuple([_param_expr(key, v, emitter) for v in value], ast.Load())
    return literal(value, emitter)


def staged_jaxpr(closed: Any, hint: str, emitter: Emitter) -> ast.expr:
    """`jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(...), ...)`: a ClosedJaxpr rebuilt from source."""
    fn = emitter.function(closed, hint)
    return call(call("jax.make_jaxpr", [fn]), [aval_expr(v.aval) for v in closed.jaxpr.invars])


def aval_expr(aval: Any) -> ast.expr:
    keywords = [kw("weak_type", True)] if getattr(aval, "weak_type", False) else []
    return call("jax.ShapeDtypeStruct", [literal(tuple(aval.shape)), dtype_expr(aval.dtype)], keywords)


# Where primitives live publicly; the last resort is the jax module that defines them.
_PRIMITIVE_HOMES = ("jax.extend.core.primitives", "jax.lax", "jax.lax.linalg")


@functools.cache
def primitive_path(primitive: Any) -> str:
    """A dotted path to the primitive object, public when jax exports it."""
    for home in _PRIMITIVE_HOMES:
        module = importlib.import_module(home)
        for name in dir(module):
            if name.endswith("_p") and getattr(module, name) is primitive:
                return f"{home}.{name}"
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("jax.") and module is not None:
            for name in dir(module):
                if name.endswith("_p") and getattr(module, name, None) is primitive:
                    return f"{module_name}.{name}"
    raise NotImplementedError(f"cannot find where jax keeps the primitive {primitive.name!r}")


# -- operands ---------------------------------------------------------------------------------------


def atom_expr(var: Any, emitter: Emitter | None = None) -> ast.expr:
    """A jaxpr literal as source that traces back to the same literal, dtype and weak type included.

    A weakly typed literal is a bare Python number (that is what made it weak); any other is
    wrapped in its dtype, `jnp.float32(2.0)`, so `jnp` promotion cannot change it.
    """
    value, aval = var.val, var.aval
    if np.ndim(value) != 0:
        if emitter is None:
            raise NotImplementedError(f"no source form for array literal {var}")
        return emitter.constant(np.asarray(value), "const")
    dtype = np.dtype(aval.dtype)
    if dtype == np.bool_:
        return ast.Constant(bool(value))
    number = scalar(value, dtype)
    if aval.weak_type:
        return number
    return call(dtype_expr(dtype), [number])


def typed_literal(var: Any) -> ast.expr:
    """A scalar literal wrapped in its dtype even when weakly typed: `jnp.float32(2.0)`."""
    dtype = np.dtype(var.aval.dtype)
    if dtype == np.bool_:
        return call("jnp.bool_", [ast.Constant(bool(var.val))])
    return call(dtype_expr(dtype), [scalar(var.val, dtype)])


def scalar(value: Any, dtype: Any) -> ast.expr:
    """A Python number that converts back to exactly `value` in `dtype`: `0.1`, not `0.10000000149011612`."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return number_literal(int(value))
    if dtype.kind == "c":
        return ast.Call(ast.Name("complex", ast.Load()), [scalar(value.real, np.float64), scalar(
            value.imag, np.float64)], [])
    as_float = float(value)
    if np.isfinite(as_float) and as_float != 0.0:
        short = float(str(dtype.type(value)))
        if np.array(short).astype(dtype).tobytes() == np.array(value, dtype).tobytes():
            as_float = short
    return number_literal(as_float)


def loose(eqn: Any, args: list[ast.expr], i: int) -> ast.expr:
    """Operand `i` for a `jnp` operator: a literal may drop its dtype wrapper when the other
    operand, a traced non-weak array of the same dtype, decides the result type anyway."""
    var = eqn.invars[i]
    if not isinstance(var, Literal) or aval_of(var).weak_type:
        return args[i]
    others = [v for j, v in enumerate(eqn.invars) if j != i]
    if any(
        not isinstance(v, Literal) and not v.aval.weak_type and v.aval.dtype == aval_of(var).dtype
        for v in others
    ):
        value = args[i]
        if isinstance(value, ast.Call) and len(value.args) == 1:
            return value.args[0]
    return args[i]


def promotes_to_itself(eqn: Any, args: Sequence[ast.expr] | None = None) -> bool:
    """Whether `jnp` type promotion, given these operand expressions, leaves the operands alone.

    All share one dtype, at least one is traced, and each traced one already has the result's
    weak type (weak only if every operand is: a bare Python number is, a `jnp.float32(2.0)` is
    not).  Otherwise `jnp` converts a traced operand, an equation the original does not have.
    """
    traced = [v for v in eqn.invars if is_traced(v)]
    if not traced or len({dtype_of(v) for v in eqn.invars}) != 1:
        return False
    args = args if args is not None else [ast.Name("_", ast.Load())] * len(eqn.invars)
    weak = all(v.aval.weak_type if is_traced(v) else _is_python_number(a) for v, a in zip(eqn.invars, args))
    return all(v.aval.weak_type == weak for v in traced)


def _is_python_number(node: ast.expr) -> bool:
    """`2.0`, `-1`, `jnp.inf`, `-jnp.inf`: source that is a Python scalar (so weakly typed)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Attribute) and node.attr in ("inf", "nan"))


class Layout(NamedTuple):
    """A staged jaxpr's wiring, for walking it beside the program's equations."""

    made_in: dict[Any, Any]
    """The equation making each of its values."""
    invars: frozenset[Any]
    constvars: frozenset[Any]


_LAYOUTS: dict[int, tuple[Any, Layout]] = {}


def layout(staged: Any) -> Layout:
    """The `Layout` of `staged` (a `Jaxpr`), once per jaxpr: the staged jaxprs of candidates and
    probes are cached (`functools.lru_cache`) and never changed, and fusing walks each against
    thousands of equations. Kept by identity, the jaxpr held so its id is not reused."""
    hit = _LAYOUTS.get(id(staged))
    if hit is None or hit[0] is not staged:
        if len(_LAYOUTS) >= 4096:
            _LAYOUTS.clear()
        made_in = {v: e for e in staged.eqns for v in e.outvars}
        hit = _LAYOUTS[id(staged)] = (
            staged, Layout(made_in, frozenset(staged.invars), frozenset(staged.constvars))
        )
    return hit[1]


def is_traced(var: Any) -> bool:
    return not isinstance(var, Literal)


def dtype_of(var: Any) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(var.aval.dtype)
    return dtype


def aval_of(var: Any) -> Any:
    """A value's abstract value (`ShapedArray`: shape, dtype, weak_type), which jax types as its
    base class (a `Literal`'s too)."""
    return var.aval


def is_float(var: Any) -> bool:
    return jnp.issubdtype(var.aval.dtype, jnp.inexact)



def non_default(params: dict[str, Any], defaults: dict[str, Any]) -> list[ast.keyword]:
    """Keywords for the params that differ from the function's defaults."""
    return [kw(k, params[k]) for k, default in defaults.items() if params[k] != default]


def lambda_args(names: list[str]) -> ast.arguments:
    return ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])


# -- building blocks for rules ----------------------------------------------------------------------


def dotted(path: str) -> ast.expr:
    """`a.b.c` as an expression."""
    head, *rest = path.split(".")
    node: ast.expr = ast.Name(head, ast.Load())
    for part in rest:
        node = ast.Attribute(node, part, ast.Load())
    return node


def call(fn: ast.expr | str, args: list[ast.expr], keywords: list[ast.keyword] | None = None) -> ast.Call:
    return ast.Call(dotted(fn) if isinstance(fn, str) else fn, list(args), keywords or [])


def kw(name: str, value: Any, emitter: Emitter | None = None) -> ast.keyword:
    return ast.keyword(name, literal(value, emitter))


def literal(value: Any, emitter: Emitter | None = None) -> ast.expr:
    """Source for a parameter value: Python scalars and containers, dtypes, enums, lax records."""
    if isinstance(value, ast.expr):
        return value
    if value is None or isinstance(value, (bool, str)):
        return ast.Constant(value)
    if isinstance(value, enum.Enum):
        return dotted(f"{class_path(type(value))}.{value.name}")
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return number_literal(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return number_literal(value.item())
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        node = ast.Tuple if isinstance(value, tuple) else ast.List
        return node([literal(v, emitter) for v in value], ast.Load())
    if isinstance(value, dict):
        return ast.Dict([literal(k, emitter) for k in value], [literal(v, emitter) for v in value.values()])
    if isinstance(value, (np.dtype, type)) and _is_dtype(value):
        return dtype_expr(value)
    if hasattr(value, "_fields"):  # NamedTuple records such as lax.GatherDimensionNumbers
        fields = [ast.keyword(f, literal(getattr(value, f), emitter)) for f in value._fields]
        return call(class_path(type(value)), [], fields)
    if type(value).__name__ == "ClosedJaxpr" and emitter is not None:
        return emitter.function(value, "body")
    if isinstance(value, np.ndarray) and emitter is not None:
        return emitter.constant(value, "const")
    raise NotImplementedError(f"no source form for parameter {value!r} of type {type(value).__name__}")


def dtype_expr(dtype: Any) -> ast.expr:
    name = np.dtype(dtype).name
    return dotted(f"jnp.{name}" if name != "bool" else "jnp.bool_")


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True


def number_literal(value: Any) -> ast.expr:
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and not np.isfinite(value):
        text = "inf" if value > 0 else "-inf" if value < 0 else "nan"
        return dotted(f"jnp.{text}") if text != "-inf" else ast.UnaryOp(ast.USub(), dotted("jnp.inf"))
    if isinstance(value, (int, float)) and (value < 0 or (value == 0 and np.signbit(value))):
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


_CLASS_PATHS: dict[type, str] = {}


def class_path(cls: type) -> str:
    """Where a jax class is reachable, publicly if it is (`jax.lax.GatherScatterMode`)."""
    found = _CLASS_PATHS.get(cls)
    if found is None:
        homes = ("jax.lax", "jax.lax.linalg", "jax")
        home = next((h for h in homes if getattr(importlib.import_module(h), cls.__name__, None) is cls), "")
        found = f"{home}.{cls.__name__}" if home else f"{cls.__module__}.{cls.__qualname__}"
        _CLASS_PATHS[cls] = found
    return found

