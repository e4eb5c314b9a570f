"""Render jaxprs through `render.rules` as flat Python functions, and prove equations exact.

`FlatEmitter` is the smallest code generator `render_eqn` can run in: one assignment per
equation (`v0 = ...`), nested `def`s for sub-jaxprs, constants kept in the exec namespace.
`check_structure` renders one equation, re-traces the code with `jax.make_jaxpr` and
compares the result with the original (primitives, params, operand wiring, output types);
`check_numbers` runs both and compares the bits; `check_program` does both for every
equation of a jaxpr and of the jaxprs inside it.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, DebugInfo, DropVar, Jaxpr, Literal, Var

from fuzzing.structure import is_identity, jaxpr_difference
from jaxside.render.rules import Flat, atom_expr, fuse, render_eqn
from jaxside.render.rules.fusing import live

PRELUDE = "import jax\nimport jax.numpy as jnp\nfrom jax import lax\nimport numpy as np\n"



def namespace() -> dict[str, Any]:
    """A fresh namespace with the imports generated code may assume."""
    ns: dict[str, Any] = {}
    exec(PRELUDE, ns)
    return ns


def _name(name: str, store: bool = False) -> ast.Name:
    return ast.Name(name, ast.Store() if store else ast.Load())


class FlatEmitter(Flat):
    """`render.rules.Emitter` for tests: flat bodies (no nested defs), names `v0`, `v1`, ..., constants
    in `namespace`."""

    def __init__(self, ns: dict[str, Any], counter: Iterator[int] | None = None,
                 rewrites: list[str] | None = None) -> None:
        self.namespace = ns
        self.counter = counter if counter is not None else itertools.count()
        self.body: list[ast.stmt] = []
        self.rewrites: list[str] = rewrites if rewrites is not None else []
        """The `REWRITES` the rules took (shared with nested defs): not the same equations, the same bits."""

    def rewrote(self, name: str) -> None:
        self.rewrites.append(name)

    def fresh(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self.counter)}"

    def constant(self, value: Any, hint: str) -> ast.expr:
        name = self.fresh(f"{_identifier(hint)}_")
        self.namespace[name] = value
        return _name(name)

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        name = self.fresh(f"{_identifier(hint)}_")
        self.body.append(build_def(name, jaxpr, self.namespace, self.counter, rewrites=self.rewrites))
        return _name(name)

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else ClosedJaxpr(jaxpr, ())
        consts = [self.constant(c, "const") for c in closed.consts]
        return self.emit(closed.jaxpr, consts + list(args), dict(zip(closed.jaxpr.constvars, closed.consts)))

    def emit(self, jaxpr: Jaxpr, inputs: Sequence[ast.expr], values: dict | None = None) -> list[ast.expr]:
        """Append one statement per equation of `jaxpr`; return expressions for its outputs
        (`values`: its constants', which an index list may be written as)."""
        env: dict[Any, ast.expr] = dict(zip([*jaxpr.constvars, *jaxpr.invars], inputs))
        wanted = {v for v in jaxpr.outvars if isinstance(v, Var)}
        eqns = fuse(list(jaxpr.eqns), list(jaxpr.outvars), consts=values or {})
        steps = live(list(jaxpr.eqns), wanted) - live(eqns, wanted)  # inside an idiom's run
        needed = live(eqns, wanted)
        for index, eqn in enumerate(eqns):
            unread = any(isinstance(v, Var) and v not in env for v in eqn.invars)
            if index in steps or unread and index not in needed:  # (dead, reading a run's inside)
                continue
            args = [literal_arg(v) if isinstance(v, Literal) else env[v] for v in eqn.invars]
            value = render_eqn(eqn, args, self)
            names = ["_" if isinstance(v, DropVar) else self.fresh() for v in eqn.outvars]
            if not names:
                self.body.append(ast.Expr(value))
                continue
            if len(names) == 1:
                target: ast.expr = _name(names[0], store=True)
            else:
                target = ast.Tuple([_name(n, store=True) for n in names], ast.Store())
            self.body.append(ast.Assign([target], value))
            env.update((v, _name(n)) for v, n in zip(eqn.outvars, names) if not isinstance(v, DropVar))
        return [atom_expr(v, self) if isinstance(v, Literal) else env[v] for v in jaxpr.outvars]


def literal_arg(var: Literal) -> ast.expr:
    """What a caller naively passes for a literal operand: its Python value (`render_eqn` types it)."""
    return ast.Constant(np.asarray(var.val).item())


def _identifier(hint: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "f"
    return text if not text[0].isdigit() else "_" + text


def _returned(outs: list[ast.expr]) -> ast.expr:
    return outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())


def build_def(
    name: str, jaxpr: Any, ns: dict[str, Any], counter: Iterator[int], consts_as_params: bool = False,
    rewrites: list[str] | None = None,
) -> ast.FunctionDef:
    """`def name(a0, a1, ...)` computing a (closed) jaxpr.

    Its constants are hoisted into `ns`, or with `consts_as_params` taken as leading
    parameters (`c0, c1, ..., a0, ...`): closed-over arrays would each re-trace as a new
    constant at every use.
    """
    closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else ClosedJaxpr(jaxpr, ())
    inner = FlatEmitter(ns, counter, rewrites)
    if consts_as_params:
        const_params = [inner.fresh("c") for _ in closed.jaxpr.constvars]
        consts: list[ast.expr] = [_name(p) for p in const_params]
    else:
        const_params = []
        consts = [inner.constant(c, "const") for c in closed.consts]
    params = [inner.fresh("a") for _ in closed.jaxpr.invars]
    values = dict(zip(closed.jaxpr.constvars, closed.consts))  # an index list is written where it is used
    outs = inner.emit(closed.jaxpr, consts + [_name(p) for p in params], values)
    body = [*inner.body, ast.Return(_returned(outs))]
    arguments = ast.arguments([], [ast.arg(p) for p in const_params + params], None, [], [], None, [])
    return ast.FunctionDef(name=name, args=arguments, body=body, decorator_list=[])


@dataclass
class Rendered:
    """Generated source for a jaxpr and the function it defines."""

    source: str
    fn: Callable[..., Any]
    rewrites: list[str] = field(default_factory=list)


def render_function(jaxpr: Any, name: str = "f", consts_as_params: bool = False) -> Rendered:
    """Render a (closed) jaxpr as `def f(...)` and exec it."""
    ns = namespace()
    rewrites: list[str] = []
    definition = build_def(name, jaxpr, ns, itertools.count(), consts_as_params, rewrites)
    return _compile(definition, ns, rewrites)


def _compile(definition: ast.FunctionDef, ns: dict[str, Any], rewrites: list[str]) -> Rendered:
    module = ast.fix_missing_locations(ast.Module([definition], []))
    source = ast.unparse(module)
    exec(compile(source, f"<rendered {definition.name}>", "exec"), ns)
    return Rendered(source, ns[definition.name], rewrites)


# -- one equation ------------------------------------------------------------------------------------


def operand_vars(eqn: Any) -> list[Var]:
    """The equation's distinct traced operands, in order of first use."""
    return list(dict.fromkeys(v for v in eqn.invars if not isinstance(v, Literal)))


def render_eqn_function(eqn: Any) -> Rendered:
    """`def f(a0, ...)` returning `render_eqn(eqn)`, one parameter per distinct traced operand."""
    ns = namespace()
    emitter = FlatEmitter(ns)
    params = {v: emitter.fresh("a") for v in operand_vars(eqn)}
    args = [literal_arg(v) if isinstance(v, Literal) else _name(params[v]) for v in eqn.invars]
    value = render_eqn(eqn, args, emitter)
    body = [*emitter.body, ast.Return(value)]
    arguments = ast.arguments([], [ast.arg(p) for p in params.values()], None, [], [], None, [])
    definition = ast.FunctionDef(name="f", args=arguments, body=body, decorator_list=[])
    return _compile(definition, ns, emitter.rewrites)


def single_eqn_jaxpr(eqn: Any) -> Jaxpr:
    """A jaxpr holding just `eqn` (dropped outputs given real vars so they can be returned)."""
    outvars = [Var(v.aval) if isinstance(v, DropVar) else v for v in eqn.outvars]
    invars = operand_vars(eqn)
    return Jaxpr([], invars, outvars, [eqn.replace(outvars=outvars)], eqn.effects, _debug(invars, outvars))


def _debug(invars: Sequence[Any], outvars: Sequence[Any]) -> DebugInfo:
    return DebugInfo("jaxside check", "equation", tuple(f"a{i}" for i in range(len(invars))),
                     tuple(f"[{i}]" for i in range(len(outvars))))


def struct(aval: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=getattr(aval, "weak_type", False))


@dataclass
class Check:
    """What `check_structure` found for one equation."""

    eqn: Any
    source: str
    rendered: Rendered
    elided: bool = False

    @property
    def primitive(self) -> str:
        return self.eqn.primitive.name

    @property
    def rewrites(self) -> list[str]:
        return self.rendered.rewrites


def check_structure(eqn: Any) -> Check:
    """Render `eqn` alone and prove it re-traces to the very same equation (or, for a form in
    `render.rules.REWRITES`, that it traces: `check_numbers` then holds it to the same bits)."""
    rendered = render_eqn_function(eqn)
    original = single_eqn_jaxpr(eqn)
    context = f"{eqn.primitive.name} rendered as:\n{rendered.source}"
    try:
        retraced = jax.make_jaxpr(rendered.fn)(*[struct(v.aval) for v in original.invars])
    except Exception as error:
        raise AssertionError(f"{context}\ndoes not trace: {type(error).__name__}: {error}") from error
    elided = is_elided_identity(eqn, original, retraced.jaxpr)
    if not elided and not rendered.rewrites:
        problem = jaxpr_difference(original, retraced.jaxpr)
        if problem:
            raise AssertionError(f"{context}\nre-traces differently: {problem}\n{retraced}")
    return Check(eqn, rendered.source, rendered, elided)


def check_eqn(eqn: Any, values: Sequence[Any] | None = None, seed: int = 0) -> Check:
    """`check_structure`, then run the equation and its rendering and compare the bits."""
    check = check_structure(eqn)
    check_numbers(check, values, seed)
    return check


def check_numbers(check: Check, values: Sequence[Any] | None = None, seed: int = 0) -> list[Any]:
    """Run a checked equation and its rendering on `values` (random ones by default); the
    outputs, once their bits are proven equal (and, for a custom_jvp, their derivatives')."""
    original = single_eqn_jaxpr(check.eqn)
    inputs = _arrays(values if values is not None else random_inputs(original.invars, seed))
    outputs, problem = outputs_difference(original, check.rendered.fn, inputs)
    assert problem is None, f"{check.primitive} rendered as:\n{check.source}\n{problem}"
    if check.primitive == "custom_jvp_call":
        _check_derivatives(original, check.rendered.fn, inputs, check.source)
    return outputs


def outputs_difference(
    jaxpr: Jaxpr, fn: Callable[..., Any], inputs: Sequence[Any]
) -> tuple[list[Any], str | None]:
    """Run `jaxpr` and `fn`, its rendering; the outputs, and how they differ if they do.

    Op by op first (cheap: jax caches each primitive's executable).  Where that differs, each
    again compiled on its own, as jit runs them: a `jnp` function called eagerly runs as one
    compiled program, which may fuse (and so round) differently from its equations run one by
    one.  Never both in one program: XLA does not promise the same bits for two copies of a
    computation in one program (it fuses them differently; `polygamma` differs in the last bits).
    """
    expected = jax.core.eval_jaxpr(jaxpr, [], *inputs)
    if _difference(expected, jax.tree_util.tree_leaves(fn(*inputs))) is None:
        return expected, None
    expected = jax.jit(functools.partial(jax.core.eval_jaxpr, jaxpr, []))(*inputs)
    return expected, _difference(expected, jax.tree_util.tree_leaves(jax.jit(fn)(*inputs)))


def program_difference(closed: ClosedJaxpr, fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[
    list[Any], str | None
]:
    """Run a closed jaxpr and `fn`, its rendering with the constants as leading parameters,
    each compiled on its own (see `outputs_difference`); the outputs, and how they differ."""
    n, args = len(closed.consts), [*closed.consts, *_arrays(inputs)]
    expected = jax.jit(lambda *xs: jax.core.eval_jaxpr(closed.jaxpr, xs[:n], *xs[n:]))(*args)
    return expected, _difference(expected, jax.tree_util.tree_leaves(jax.jit(fn)(*args)))


def _difference(expected: Sequence[Any], actual: Sequence[Any]) -> str | None:
    if len(actual) != len(expected):
        return f"gave {len(actual)} outputs, not {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, actual)):
        problem = bits_difference(want, got)
        if problem is not None:
            return f"output {i}: {problem}"
    return None


def _arrays(values: Sequence[Any]) -> list[Any]:
    return [v if _is_key(v) else jax.numpy.asarray(v) for v in values]


def _check_derivatives(original: Jaxpr, fn: Callable[..., Any], inputs: list[Any], context: str) -> None:
    """The custom derivative rule survived: both sides give the same JVP, bit for bit."""
    if not all(jax.numpy.issubdtype(x.dtype, jax.numpy.floating) for x in inputs):
        return
    tangents = tuple(jax.numpy.ones_like(x) for x in inputs)
    _, want = jax.jit(lambda *xs: jax.jvp(lambda *p: jax.core.eval_jaxpr(original, [], *p), xs, tangents))(
        *inputs)
    _, got = jax.jit(lambda *xs: jax.jvp(lambda *p: jax.tree_util.tree_leaves(fn(*p)), xs, tangents))(*inputs)
    for i, (w, g) in enumerate(zip(want, got)):
        problem = bits_difference(w, g)
        assert problem is None, f"{context}\ntangent {i}: {problem}"


def is_elided_identity(eqn: Any, original: Jaxpr, retraced: Jaxpr) -> bool:
    """An identity equation rendered as its operand (jax stages nothing for those either)."""
    return is_identity(eqn) and not retraced.eqns and retraced.outvars[0] is retraced.invars[0]


# -- whole programs ------------------------------------------------------------------------------------

# Params that hold a jaxpr the rules never render (lax rebuilds it from the primitive).
_UNRENDERED = frozenset({"update_jaxpr"})
# Not run on random values: a loop need not end on them (`tests/test_ops.py` runs loops on real ones).
_LOOPS = frozenset({"while"})


@dataclass
class Seen:
    """What `check_program` already proved: equations (by their printed form, which names vars
    canonically), and renderings run (by form and operand types: the same code run again on
    values of the same types, but other shapes or constants, proves nothing new)."""

    structures: set[str] = field(default_factory=set)
    runs: set[tuple[str, ...]] = field(default_factory=set)


def check_program(jaxpr: Any, seen: Seen | None = None, seed: int = 0) -> list[Check]:
    """`check_structure` on every equation of a (closed) jaxpr and of every jaxpr inside it,
    and `check_numbers` (on random values, special floats included) for each new rendering."""
    seen = Seen() if seen is None else seen
    closed = jaxpr if isinstance(jaxpr, ClosedJaxpr) else ClosedJaxpr(jaxpr, ())
    checks: list[Check] = []
    for index, eqn in enumerate(closed.jaxpr.eqns):
        key = str(single_eqn_jaxpr(eqn))
        if key in seen.structures:
            continue
        seen.structures.add(key)
        check = check_structure(eqn)
        checks.append(check)
        run = (_form(check.source), *(f"{v.aval.dtype}{'~' * v.aval.weak_type}" for v in operand_vars(eqn)))
        if run not in seen.runs and eqn.primitive.name not in _LOOPS:
            seen.runs.add(run)
            check_numbers(check, None, seed + index)
        for name, value in eqn.params.items():
            if name not in _UNRENDERED:
                for sub in _jaxprs(value):
                    checks += check_program(sub, seen, seed + index + 1)
    return checks


def _form(source: str) -> str:
    """The rendering with its numbers blanked out: `jnp.reshape(a0, (N, N))`."""
    return re.sub(r"\b\d+(\.\d*)?(e-?\d+)?\b", "N", source)


def _jaxprs(value: Any) -> list[Any]:
    if isinstance(value, (ClosedJaxpr, Jaxpr)):
        return [value]
    if isinstance(value, (tuple, list)):
        return [j for item in value for j in _jaxprs(item)]
    return []


# -- numbers -----------------------------------------------------------------------------------------


def bits_difference(want: Any, got: Any) -> str | None:
    """None if `got` has exactly `want`'s shape, dtype and bits."""
    if jax.dtypes.issubdtype(getattr(want, "dtype", None), jax.dtypes.extended):
        want, got = jax.random.key_data(want), jax.random.key_data(got)
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or want.dtype != got.dtype:
        return f"{got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.tobytes() != got.tobytes():
        return f"values differ:\n{got}\nexpected\n{want}"
    return None


def _is_key(value: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(value, "dtype", None), jax.dtypes.extended)


def random_inputs(invars: Sequence[Any], seed: int = 0) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [random_value(v.aval, rng) for v in invars]


_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 1.0, -1.0])


def random_value(aval: Any, rng: np.random.Generator) -> Any:
    """Inputs of this type, with a few special floats (-0.0, inf, nan, a denormal) mixed in."""
    shape, dtype = tuple(aval.shape), aval.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), max(1, int(np.prod(shape))))
        return keys.reshape(shape) if shape else keys[0]
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else -6
        return rng.integers(low, 7, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    values = (rng.normal(size=shape) * 2).astype(np.float64)
    flat = values.reshape(-1)
    if flat.size >= 16:
        flat[: len(_SPECIALS)] = _SPECIALS
        rng.shuffle(flat)
    return flat.reshape(shape).astype(dtype)
