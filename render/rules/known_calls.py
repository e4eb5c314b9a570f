"""Known calls: a `jit` (or `custom_jvp_call`) equation that is exactly one public JAX function's call
renders as that call (`jnp.where(c, x, y)`, `jax.nn.relu(x)`); any other `jit` as `jax.jit` of its body.

A match is checked, not assumed: the candidate is traced on the equation's operand types (with each
keyword-argument variant in turn) and the one equation it stages is compared with the original.
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from jaxside.render.rules._core import Rule, aval_of, call, kw, registrar
from jaxside.render.rules.draw_calls import draw_call
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


@rule("jit", "pjit")
def _jit(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    known = known_call(eqn, args)
    if known is not None:
        return known
    fn = emitter.function(p["jaxpr"], p["name"])
    keywords = []
    if p.get("inline"):
        keywords.append(kw("inline", True))
    if p.get("keep_unused"):
        keywords.append(kw("keep_unused", True))
    donated = tuple(i for i, d in enumerate(p.get("donated_invars", ())) if d)
    if donated:
        keywords.append(kw("donate_argnums", donated))
    return call(call("jax.jit", [fn], keywords), args)


# Known `jax.numpy` / `jax.nn` / `jax.lax` functions that torchax calls and that stage one `jit`
# (or `custom_jvp_call`) equation, by the name that equation carries: a matching equation renders
# as the call itself.  The match is checked by tracing the call on the equation's operand types
# (with each keyword-argument variant in turn) and comparing the one equation it stages.
_KNOWN_CALLS: dict[str, str] = {
    "_where": "jnp.where", "clip": "jnp.clip", "silu": "jax.nn.silu", "relu": "jax.nn.relu",
    "relu6": "jax.nn.relu6", "gelu": "jax.nn.gelu", "sigmoid": "jax.nn.sigmoid",
    "softplus": "jax.nn.softplus", "log_sigmoid": "jax.nn.log_sigmoid", "elu": "jax.nn.elu",
    "celu": "jax.nn.celu", "selu": "jax.nn.selu", "hard_tanh": "jax.nn.hard_tanh",
    "leaky_relu": "jax.nn.leaky_relu", "hard_sigmoid": "jax.nn.hard_sigmoid",
    "hard_silu": "jax.nn.hard_silu", "mish": "jax.nn.mish", "sparse_plus": "jax.nn.sparse_plus",
    "remainder": "jnp.remainder", "floor_divide": "jnp.floor_divide", "power": "jnp.power",
    "_flip": "jnp.flip", "round": "jnp.round", "isnan": "jnp.isnan", "isinf": "jnp.isinf",
    "logaddexp": "jnp.logaddexp", "logaddexp2": "jnp.logaddexp2", "fmod": "jnp.fmod",
    "hypot": "jnp.hypot", "copysign": "jnp.copysign", "signbit": "jnp.signbit", "trunc": "jnp.trunc",
    "fmax": "jnp.fmax", "fmin": "jnp.fmin", "true_divide": "jnp.true_divide", "arctan2": "jnp.arctan2",
    "arccosh": "jnp.arccosh", "gcd": "jnp.gcd", "lcm": "jnp.lcm", "log10": "jnp.log10",
    "log2": "jnp.log2", "i0": "jnp.i0", "nan_to_num": "jnp.nan_to_num", "tril": "jnp.tril",
    "triu": "jnp.triu", "isclose": "jnp.isclose", "reciprocal": "jnp.reciprocal",
    "heaviside": "jnp.heaviside", "sinc": "jnp.sinc", "outer": "jnp.outer", "kron": "jnp.kron",
    "matmul": "jnp.matmul", "diagonal": "jnp.diagonal", "_diag": "jnp.diag", "trace": "jnp.trace",
    "take": "jnp.take", "fft": "lax.fft", "det": "jnp.linalg.det", "slogdet": "jnp.linalg.slogdet",
    "inv": "jnp.linalg.inv", "solve": "jnp.linalg.solve", "pinv": "jnp.linalg.pinv",
    "cholesky": "jnp.linalg.cholesky", "eigh": "jnp.linalg.eigh", "eigvalsh": "jnp.linalg.eigvalsh",
    "logsumexp": "jax.nn.logsumexp", "softmax": "jax.nn.softmax", "log_softmax": "jax.nn.log_softmax",
    "standardize": "jax.nn.standardize", "_take": "jnp.take", "_var": "jnp.var", "_std": "jnp.std",
    "_mean": "jnp.mean", "_cumsum": "jnp.cumsum", "_cumprod": "jnp.cumprod", "sort": "jnp.sort",
    "argsort": "jnp.argsort", "_diff": "jnp.diff", "diff": "jnp.diff",
}


# A way to call a known function: the names of trailing operands passed by keyword, and
# static keyword arguments (that the equation's operands do not show).
Variant = tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]


def _variants(eqn: Any) -> list[Variant]:
    """How to try calling the function behind `eqn`: static arguments read from its body where
    they show, a few common values where they do not."""
    name = _call_name(eqn)
    body = eqn.params.get("jaxpr")
    if name == "fft" and body is not None and len(body.jaxpr.eqns) == 1:
        inner = body.jaxpr.eqns[0].params
        return [((), (("fft_type", inner["fft_type"]), ("fft_lengths", tuple(inner["fft_lengths"]))))]
    if name in ("diagonal", "_diag", "trace"):
        key = "k" if name == "_diag" else "offset"
        return [((), ())] + [((), ((key, k),)) for k in (1, -1, 2, -2)]
    if name in ("tril", "triu"):
        return [((), ())] + [((), (("k", k),)) for k in (1, -1, 2, -2)]
    if name in ("diff", "_diff") and len(eqn.invars) == 2:  # `jnp.diff(x, prepend=0)`: prepended, an operand
        return [(("prepend",), ())]
    if name == "clip":  # torch.clamp(x, max=m) is jnp.clip(x, max=m): the bound is no `min`
        return [((), ()), (("max",), ())]
    name = (name or "").lstrip("_")
    if name == "flip" and body is not None:  # `jnp.flip(x, axis=-1)`: the axes of its `rev`
        return [((), ())] + [((), (("axis", axis),)) for axis in _body_axes(body.jaxpr)]
    if name in ("take", "var", "std", "mean", "cumsum", "cumprod", "sort", "argsort") and body is not None:
        axes: list[tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = [
            ((), (("axis", axis),)) for axis in _body_axes(body.jaxpr)
        ]
        keeps: tuple[tuple[Any, ...], ...] = ((), (("keepdims", True),))
        if name in ("var", "std"):  # `ddof` is an operand of the jit
            return [(("ddof",), (*static, *keep)) for _, static in axes for keep in keeps]
        if name in ("cumsum", "cumprod"):  # `jnp.cumsum(x, axis=0, dtype=jnp.int32)`: the cast in its body
            eqns = body.jaxpr.eqns
            casts = [e.params["new_dtype"] for e in eqns if e.primitive.name == "convert_element_type"]
            typed = [(("dtype", np.dtype(casts[0])),)] if casts else []
            return axes + [((), (*static, *dtype)) for _, static in axes for dtype in typed]
        if name == "mean":
            return [((), (*static, *keep)) for _, static in axes for keep in keeps]
        if name in ("sort", "argsort"):  # (torch.sort asks for no stable sort: `stable=False`)
            orders = ((), (("descending", True),))
            stables = ((), (("stable", False),))
            return [((), (*static, *order, *stable))
                    for _, static in axes for stable in stables for order in orders]
        return axes
    return [((), ())]


def _body_axes(jaxpr: Any) -> list[Any]:
    """The axes a reduction's body works along, as `axis=` takes them (`0`, `(1, 2)`)."""
    found: list[Any] = []
    for inner in jaxpr.eqns:
        if inner.primitive.name in ("jit", "pjit"):  # (`jnp.std` calls `jnp.var`)
            found += [axis for axis in _body_axes(inner.params["jaxpr"].jaxpr) if axis not in found]
            continue
        if inner.primitive.name == "rev":
            axis = tuple(inner.params["dimensions"])
            axis = axis[0] if len(axis) == 1 else axis
            found += [axis] if axis not in found else []
            continue
        axis = inner.params.get("axis", inner.params["dimension"] if inner.primitive.name == "sort" else None)
        axes = inner.params.get("axes", (axis,) if axis is not None else None)
        if inner.primitive.name == "gather":
            axes = tuple(inner.params["dimension_numbers"].collapsed_slice_dims)
        if axes:
            axis = axes[0] if len(axes) == 1 else tuple(axes)
            if axis not in found:
                found.append(axis)
    return found


def known_call(eqn: Any, args: list[ast.expr]) -> ast.expr | None:
    """`jnp.where(c, x, y)` for an equation that is exactly that call's `jit` (or custom_jvp)."""
    drawn = draw_call(eqn, args, same_eqn)
    if drawn is not None:
        return drawn
    signature = _atom_signature(eqn.invars)
    for path in _call_candidates(eqn):
        for names, static in _variants(eqn):
            staged = _stage_call(path, signature, names, static)
            if staged is not None and same_eqn(staged, eqn):
                split = len(args) - len(names)
                keywords = [ast.keyword(n, a) for n, a in zip(names, args[split:])]
                return call(path, args[:split], [kw(k, v) for k, v in static] + keywords)
    return None


def _call_candidates(eqn: Any) -> list[str]:
    """Paths of functions that may have staged `eqn`: by its name, then by where it was defined.

    A custom derivative rule can only be reproduced by calling the very function that has it,
    so for `custom_jvp_call` a private function (`jax._src.numpy.linalg._det`) is a candidate
    too; a `jit` body renders as a nested function just as exactly.
    """
    candidates = []
    known = _KNOWN_CALLS.get(_call_name(eqn) or "")
    if known is not None and _resolve(known) is not None:
        candidates.append(known)
    body = eqn.params.get("call_jaxpr", eqn.params.get("jaxpr"))
    source = function_source(body) if isinstance(body, ClosedJaxpr) else None
    found = _function_path(source) if source else None
    if found is not None and found not in candidates:
        public = not found.startswith("jax._src.")
        if public or eqn.primitive.name in ("custom_jvp_call", "custom_vjp_call"):
            candidates.append(found)
    return candidates


# Where public jax functions live, and the short names generated code imports them under.
_PUBLIC_NAMESPACES = ("jax.nn", "jax.numpy", "jax.numpy.linalg", "jax.numpy.fft", "jax.lax", "jax.lax.linalg",
                      "jax.random")
_ALIASES = (("jax.numpy.", "jnp."), ("jax.lax.", "lax."))


@functools.cache
def _function_path(source: str) -> str | None:
    """A dotted path to the function defined at `source` (``name at file:line``), public if it can be."""
    name, _, location = source.partition(" at ")
    file = location.rsplit(":", 1)[0]
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("jax.") or getattr(module, "__file__", None) != file:
            continue
        target = getattr(module, name, None)
        if target is None:
            continue
        path = _public_path(target) or f"{module_name}.{name}"
        for prefix, alias in _ALIASES:
            if path.startswith(prefix):
                return alias + path.removeprefix(prefix)
        return path
    return None


def _public_path(target: Any) -> str | None:
    for home in _PUBLIC_NAMESPACES:
        module = importlib.import_module(home)
        for attr in dir(module):
            if not attr.startswith("_") and getattr(module, attr, None) is target:
                return f"{home}.{attr}"
    return None


def _call_name(eqn: Any) -> str | None:
    if eqn.primitive.name in ("jit", "pjit"):
        name: str | None = eqn.params.get("name")
        return name
    if eqn.primitive.name == "custom_jvp_call":
        return _function_name(eqn.params["call_jaxpr"])
    return None


def _function_name(closed: Any) -> str | None:
    """The name of the Python function a jaxpr was traced from (`relu`), from its debug info."""
    info = getattr(closed.jaxpr, "debug_info", None)
    source = getattr(info, "func_src_info", None) or ""
    return source.split(" at ")[0] or None


def function_source(closed: Any) -> str | None:
    """Where that function is defined (`relu at .../jax/_src/nn/functions.py:71`)."""
    info = getattr(closed.jaxpr, "debug_info", None)
    return getattr(info, "func_src_info", None)


def _resolve(path: str) -> Any:
    target: Any = {"jax": jax, "jnp": jnp, "lax": jax.lax}.get(path.split(".")[0])
    for part in path.split(".")[1:]:
        target = getattr(target, part, None)
    return target


def _atom_signature(invars: Sequence[Any]) -> tuple[Any, ...]:
    """Hashable operand description: avals for traced operands, the value for literals."""
    return tuple(
        ("literal", np.dtype(aval_of(v).dtype).name, aval_of(v).weak_type,
         np.asarray(v.val).item() if np.ndim(v.val) == 0 else None) if isinstance(v, Literal)
        else ("var", tuple(v.aval.shape), str(v.aval.dtype), v.aval.weak_type)
        for v in invars
    )


@functools.lru_cache(maxsize=1024)
def _stage_call(
    path: str, signature: tuple[Any, ...], names: tuple[str, ...] = (), static: tuple[Any, ...] = ()
) -> Any:
    """The jaxpr `path(*operands, **static)` stages (the last operands passed as `names`) for
    operands like these, if it is one equation."""
    fn = _resolve(path)
    traced = [s for s in signature if s[0] == "var"]
    structs = [jax.ShapeDtypeStruct(s[1], s[2], weak_type=s[3]) for s in traced]

    def staged(*values: Any) -> Any:
        it = iter(values)
        operands_ = [next(it) if s[0] == "var" else _literal_value(s) for s in signature]
        split = len(operands_) - len(names)
        return fn(*operands_[:split], **dict(zip(names, operands_[split:])), **dict(static))

    try:
        closed = jax.make_jaxpr(staged)(*structs)
    except Exception:  # the call does not accept these operands: not this function
        return None
    if len(closed.jaxpr.eqns) != 1 or closed.consts:
        return None
    return closed.jaxpr


def _literal_value(signature: tuple[Any, ...]) -> Any:
    _, dtype, weak, value = signature
    if dtype == "bool":
        return bool(value)
    if weak:
        return value
    return np.dtype(dtype).type(value)


def same_eqn(staged: Any, eqn: Any) -> bool:
    """Whether the one equation of `staged` (a Jaxpr) is `eqn`: primitive, params, operand wiring."""
    (other,) = staged.eqns
    if other.primitive != eqn.primitive or len(other.invars) != len(eqn.invars):
        return False
    positions = {v: i for i, v in enumerate(staged.invars)}
    traced = iter(range(len(staged.invars)))
    for mine, theirs in zip(eqn.invars, other.invars):
        if isinstance(mine, Literal):
            if not isinstance(theirs, Literal) or not same_literal(mine, theirs):
                return False
        elif isinstance(theirs, Literal) or positions.get(theirs) != next(traced):
            return False
    if [v.aval for v in other.outvars] != [v.aval for v in eqn.outvars]:
        return False
    return same_params(other.params, eqn.params)


def same_literal(a: Any, b: Any) -> bool:
    values = np.asarray(a.val), np.asarray(b.val)
    return a.aval.dtype == b.aval.dtype and np.array_equal(*values, equal_nan=True)


# Params of custom_jvp_call / custom_vjp_call holding the derivative rule: per-trace thunks that
# compare unequal across traces.  The function they belong to is identified by where it is
# defined, which `call_jaxpr`'s debug info records.
_RULE_PARAMS = frozenset({"jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd", "out_trees"})


def same_params(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    if _RULE_PARAMS & set(a) and function_source(a["call_jaxpr"]) != function_source(b["call_jaxpr"]):
        return False
    return all(k == "name" or k in _RULE_PARAMS or same_value(a[k], b[k]) for k in a)


def same_value(a: Any, b: Any) -> bool:
    """Structural equality of equation params: jaxprs by structure, arrays by value."""
    if a is b:  # one object (a jaxpr JAX cached)
        return True
    if isinstance(a, ClosedJaxpr) and isinstance(b, ClosedJaxpr):
        return same_jaxpr(a.jaxpr, b.jaxpr) and len(a.consts) == len(b.consts) and all(
            same_value(x, y) for x, y in zip(a.consts, b.consts)
        )
    if isinstance(a, Jaxpr) and isinstance(b, Jaxpr):
        return same_jaxpr(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and not hasattr(a, "_fields"):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, jax.Array)) or isinstance(b, (np.ndarray, jax.Array)):
        return np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # a NaN `fill_value`
    try:
        return bool(a == b)
    except Exception:
        return a is b


def same_jaxpr(a: Any, b: Any) -> bool:
    """Whether two jaxprs compute the same thing the same way (var names aside)."""
    if a is b:
        return True
    if len(a.invars) != len(b.invars) or len(a.eqns) != len(b.eqns) or len(a.constvars) != len(b.constvars):
        return False
    env: dict[Any, Any] = {}
    for x, y in zip([*a.constvars, *a.invars], [*b.constvars, *b.invars]):
        if x.aval != y.aval:
            return False
        env[x] = y
    for ea, eb in zip(a.eqns, b.eqns):
        if ea.primitive != eb.primitive or len(ea.invars) != len(eb.invars):
            return False
        for x, y in zip(ea.invars, eb.invars):
            if isinstance(x, Literal) != isinstance(y, Literal):
                return False
            if isinstance(x, Literal) and not same_literal(x, y):
                return False
            if not isinstance(x, Literal) and env.get(x) is not y:
                return False
        if not same_params(ea.params, eb.params) or [v.aval for v in ea.outvars] != [
            v.aval for v in eb.outvars
        ]:
            return False
        env.update(zip(ea.outvars, eb.outvars))
    return all(
        (same_literal(x, y) if isinstance(x, Literal) else env.get(x) is y)
        for x, y in zip(a.outvars, b.outvars)
    ) and len(a.outvars) == len(b.outvars)
