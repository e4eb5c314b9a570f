"""The catalogue: public `jax.nn` / `jax.numpy` / `jax.random` functions that have a torch
counterpart, each recognised by the equations it stages.

Nothing here spells a function's equations out.  Each entry names a function and the ways it is
called (`jax.nn.gelu(x, approximate=False)`); what it stages is found by tracing the function
itself, so a new jax release that stages other equations changes the patterns with it:

- a function that stages one `jit` or `custom_jvp_call` (`jax.nn.log_softmax`, `jnp.where`) is
  written by the `jit` rule (`render.rules.known_calls`), which re-traces it;
- a function that stages a run of plain equations (`jax.nn.gelu`: a `mul`, `neg`, `erfc`, ...,
  ending in a `copy`) is proposed by `catalogued` for every equation of the primitive its run
  ends in: the function traced on the equation's type, its equations walked back from the end
  beside the program's to find which values are its operands; `fuse` then traces the candidate
  on those operands and keeps it only when it stages the run's very equations.

`benchmarks/catalogue.py` says which entries an export recognises, each called on its probe and
exported (`make bench` prints it; docs/ops.md lists the catalogue).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.extend.core import Literal

from jaxside.render.rules._core import Candidate, Graph, is_traced, layout


class Entry(NamedTuple):
    """A catalogued function: `calls` are the ways to write it over `_0`, `_1`, ... (keywords
    included), `torch` its torch counterpart, `probe` the operand types it is probed with."""

    path: str
    torch: str
    calls: tuple[str, ...]
    probe: tuple[tuple[tuple[int, ...], Any], ...] = (((4, 8), jnp.float32),)
    fill: Callable[[Any, Graph], dict[str, Any] | None] | None = None
    """For calls with static arguments the run does not show as operands (`bins={bins}`): their
    values read from the program around the run's last equation; `filled` has the probe's."""
    filled: tuple[tuple[str, Any], ...] = ()


def _histogram(eqn: Any, graph: Graph) -> dict[str, Any] | None:
    """`bins` and `range` of `jnp.histogram(x, bins, range)[0]`: the result's length, and the two
    numbers of the constant its bin edges are spaced over (torch.histc's `min` and `max`)."""
    seen: set[Any] = set()
    todo = [eqn]
    while todo and len(seen) < 64:
        e = todo.pop(0)  # (breadth first: the edges are near, the input may be far)
        for v in e.invars:
            if not is_traced(v) or id(v) in seen:
                continue
            seen.add(id(v))
            value = graph.constant(v)
            if value is not None and getattr(value, "shape", None) == (2,):
                lo, hi = (float(x) for x in value)
                return {"bins": eqn.outvars[0].aval.shape[0], "lo": repr(lo), "hi": repr(hi)}
            made = graph.producer(v)
            todo += [made] if made is not None else []
    return None


def _one(path: str, torch: str, *keywords: str) -> Entry:
    calls = tuple(f"{path}(_0{', ' + k if k else ''})" for k in (keywords or ("",)))
    return Entry(path, torch, calls)


_F32 = jnp.float32
_INT = jnp.int32

CATALOGUE: tuple[Entry, ...] = (
    _one("jax.nn.gelu", "F.gelu / nn.GELU()", "approximate=False", "approximate=True"),
    _one("jax.nn.relu", "F.relu / nn.ReLU()"),
    _one("jax.nn.relu6", "F.relu6 / nn.ReLU6()"),
    _one("jax.nn.silu", "F.silu / nn.SiLU()"),
    _one("jax.nn.sigmoid", "torch.sigmoid / nn.Sigmoid()"),
    _one("jax.nn.softplus", "F.softplus / nn.Softplus()"),
    _one("jax.nn.log_sigmoid", "F.logsigmoid / nn.LogSigmoid()"),
    _one("jax.nn.elu", "F.elu / nn.ELU()"),
    _one("jax.nn.celu", "F.celu / nn.CELU()"),
    _one("jax.nn.selu", "F.selu / nn.SELU()"),
    _one("jax.nn.leaky_relu", "F.leaky_relu / nn.LeakyReLU()", "negative_slope=0.01"),
    _one("jax.nn.hard_tanh", "F.hardtanh / nn.Hardtanh()"),
    _one("jax.nn.hard_sigmoid", "F.hardsigmoid / nn.Hardsigmoid()"),
    _one("jax.nn.hard_silu", "F.hardswish / nn.Hardswish()"),
    _one("jax.nn.mish", "F.mish / nn.Mish()"),
    _one("jax.nn.softmax", "F.softmax / nn.Softmax()", "axis=-1"),
    _one("jax.nn.log_softmax", "F.log_softmax / nn.LogSoftmax()", "axis=-1"),
    _one("jax.nn.logsumexp", "torch.logsumexp", "axis=-1"),
    _one("jax.nn.standardize", "F.layer_norm (no affine)", "axis=-1"),
    Entry("jax.nn.glu", "F.glu / nn.GLU()", ("jax.nn.glu(_0, axis=-1)",)),
    _one("jnp.tanh", "torch.tanh / nn.Tanh()"),
    _one("jnp.mean", "x.mean(-1)", "axis=-1"),
    _one("jnp.var", "x.var(-1, unbiased=False)", "axis=-1"),
    _one("jnp.std", "x.std(-1, unbiased=False)", "axis=-1"),
    _one("jnp.cumsum", "torch.cumsum", "axis=-1"),
    _one("jnp.sort", "torch.sort(...).values", "axis=-1"),
    _one("jnp.argsort", "torch.argsort", "axis=-1"),
    _one("jnp.argmax", "torch.argmax", "axis=-1"),
    _one("jnp.round", "torch.round"),
    _one("jnp.clip", "torch.clamp", "0.0, 1.0"),
    _one("jnp.flip", "torch.flip", "axis=-1"),
    _one("jnp.tril", "torch.tril"),
    _one("jnp.triu", "torch.triu"),
    Entry("jnp.where", "torch.where", ("jnp.where(_0, _1, _2)",),
          (((4, 8), jnp.bool_), ((4, 8), _F32), ((4, 8), _F32))),
    Entry("jnp.take", "F.embedding / x[i]", ("jnp.take(_0, _1, axis=0)",),
          (((16, 8), _F32), ((4,), _INT))),
    Entry("jnp.take_along_axis", "torch.gather", ("jnp.take_along_axis(_0, _1, axis=-1)",),
          (((4, 8), _F32), ((4, 1), _INT))),
    Entry("jnp.histogram", "torch.histc", ("jnp.histogram(_0, bins={bins}, range=({lo}, {hi}))[0]",),
          (((16,), _F32),), _histogram, (("bins", 4), ("lo", "0.0"), ("hi", "3.0"))),
    Entry("jnp.logaddexp", "torch.logaddexp", ("jnp.logaddexp(_0, _1)",), (((4, 8), _F32),) * 2),
    Entry("jax.random.uniform", "torch.rand / nn.Dropout (train)", ("jax.random.uniform(_0, (4, 8))",),
          (((), jax.random.key(0).dtype),)),
    Entry("jax.random.normal", "torch.randn", ("jax.random.normal(_0, (4, 8))",),
          (((), jax.random.key(0).dtype),)),
    Entry("jax.random.split", "(the key of each draw)", ("jax.random.split(_0)",),
          (((), jax.random.key(0).dtype),)),
)
"""Every catalogued function, with the ways the export writes it."""


@functools.cache
def _terminals() -> dict[str, tuple[Entry, ...]]:
    """The catalogued calls that stage a run of plain equations, by the primitive ending the run
    (found by tracing each on its probe)."""
    found: dict[str, list[Entry]] = {}
    for entry in CATALOGUE:
        for code in entry.calls:
            staged = _probe(code.format(**dict(entry.filled)), entry.probe)
            if staged is None or len(staged.eqns) < 2 or len(staged.outvars) != 1:
                continue  # one equation: a rule of its own (`jit` for a known call)
            last = staged.eqns[-1].primitive.name
            if entry not in found.setdefault(last, []):
                found[last].append(entry)
    return {name: tuple(entries) for name, entries in found.items()}


def ending_in(name: str) -> tuple[Entry, ...]:
    """The catalogued functions whose runs end in primitive `name`."""
    return _terminals().get(name, ())


@functools.cache
def terminals() -> frozenset[str]:
    """The primitives `catalogued` may propose a candidate for."""
    return frozenset(_terminals())


@functools.lru_cache(maxsize=1024)
def _probe(code: str, avals: tuple[tuple[tuple[int, ...], Any], ...]) -> Any:
    return _traced(code, tuple((tuple(shape), _dtype(dtype)) for shape, dtype in avals))


def _dtype(dtype: Any) -> Any:
    return dtype if jnp.issubdtype(dtype, jax.dtypes.prng_key) else jnp.dtype(dtype)


@functools.lru_cache(maxsize=1024)
def _traced(code: str, avals: tuple[tuple[tuple[int, ...], Any], ...]) -> Any:
    """The jaxpr of `code` over operands of these types, or None when it does not trace."""
    params = ", ".join(f"_{i}" for i in range(len(avals)))
    fn = eval(f"lambda {params}: {code}", {"jax": jax, "jnp": jnp})  # noqa: S307  (our own code)
    try:
        return jax.make_jaxpr(fn)(*(jax.ShapeDtypeStruct(s, d) for s, d in avals)).jaxpr
    except Exception:  # not a call for these operands
        return None


def catalogued(eqn: Any, graph: Graph) -> list[Candidate]:
    """`jax.nn.gelu(x, approximate=False)` for the run it stages, and every other catalogued call
    staging a run of plain equations that ends in `eqn`'s primitive: each traced on its probe (and
    on an operand of `eqn`'s result type), its operands found by walking its equations back beside
    the program's; a call along the last axis is tried along each axis of the operand."""
    if len(eqn.outvars) != 1:
        return []
    out = eqn.outvars[0].aval
    candidates: list[Candidate] = []
    for entry in _terminals().get(eqn.primitive.name, ()):
        if len(entry.probe) != 1:
            continue
        values = entry.fill(eqn, graph) if entry.fill is not None else {}
        if values is None:
            continue
        for template in entry.calls:
            probe, code = template.format(**dict(entry.filled)), template.format(**values)
            for staged in (_probe(probe, entry.probe), _traced(code, ((tuple(out.shape), out.dtype),))):
                if staged is None or not staged.eqns or staged.eqns[-1].primitive != eqn.primitive:
                    continue
                operands = _operands(staged, eqn, graph)
                if operands is None:
                    continue
                calls = [code]
                if "axis=-1" in code:
                    calls += [code.replace("axis=-1", f"axis={d}") for d in range(operands[0].aval.ndim - 1)]
                fresh = [Candidate(c, operands) for c in calls]
                candidates += [c for c in fresh if c not in candidates]
                break
    return candidates


def _operands(staged: Any, eqn: Any, graph: Graph) -> list[Any] | None:
    """The program's values standing for `staged`'s inputs when its equations, walked back from
    its result, are the program's from `eqn` back (primitives and wiring; `fuse` checks the rest)."""
    made_in, invars, constvars = layout(staged)
    bound: dict[Any, Any] = {}
    seen: set[tuple[int, int]] = set()

    def walk(sv: Any, ov: Any, oe: Any = None) -> bool:
        if isinstance(sv, Literal):
            return isinstance(ov, Literal)
        if not is_traced(ov):
            return False
        if sv in invars:
            return bound.setdefault(sv, ov) is ov
        if sv in constvars:
            return True  # (a constant it stages: `fuse` compares it with the program's by value)
        if (id(sv), id(ov)) in seen:
            return True
        seen.add((id(sv), id(ov)))
        se, oe = made_in.get(sv), oe if oe is not None else graph.producer(ov)
        if se is None or oe is None or se.primitive != oe.primitive or len(se.invars) != len(oe.invars):
            return False
        return all(walk(a, b) for a, b in zip(se.invars, oe.invars))

    if not walk(staged.outvars[0], eqn.outvars[0], eqn) or len(bound) != len(staged.invars):
        return None
    return [bound[v] for v in staged.invars]
