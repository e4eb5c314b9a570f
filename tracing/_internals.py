"""The one place that touches private JAX and torchax internals.

Everything else in jaxside goes through the functions here; `tests/test_internals.py`
fails loudly when a new JAX or torchax moves one of them.

- jax 0.10: a ``DynamicJaxprTracer`` holds its jaxpr atom in ``.val`` (a ``Var``, or a
  ``Literal`` for a folded constant), and the trace being built keeps its equations, in
  emission order, in ``trace.frame.tracing_eqns`` (weak references once dead code can
  be dropped).
- jax 0.10: under ``jax.grad``/``jax.jvp`` the user's locals hold ``LinearizeTracer``s or
  ``JVPTracer``s whose ``.primal`` is the value of the trace below (eventually a
  ``DynamicJaxprTracer``); under ``jax.vmap`` a ``BatchTracer`` keeps it in ``.val``.
- jax 0.10: every equation's ``source_info.name_stack`` prints the transformations it went
  through (``transpose(jvp())`` for the backward pass of ``jax.grad``), relative to the
  jaxpr that holds it.
- torchax 0.0.13: a ``torchax.tensor.Tensor`` holds its JAX value in ``._elem``; in-place
  ops replace ``._elem`` on the same object. An op with no lowering raises
  ``OperatorNotFound`` (``... name aten::foo has no lowering ...``); a CPU tensor meeting a
  traced one fails torchax's ``"mixed math"`` assertion. Random ops split the environment's
  key (``env.param.prng``) in place; a view computes its value in ``View.jax``.
- torch 2.13: a dispatch mode's ``__torch_dispatch__`` (torchax's ``XLADispatchMode``) is
  wrapped by ``torch._disable_dynamo``, which imports ``torch._dynamo`` at its first call
  unless the wrapped function has a ``__dynamo_disable`` attribute (`dynamo_not_imported`).
"""

from __future__ import annotations

import contextlib
import re
import sys
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import jax
from jax._src import core as jax_core  # jax 0.10
from jax._src.interpreters import ad, batching  # jax 0.10
from jax._src.interpreters import partial_eval as pe  # jax 0.10

from jaxside.tracing import _grouped_mm
from jaxside.tracing._compat import import_torchax

torchax = import_torchax()
_grouped_mm.register()  # a local lowering until torchax has one (see tracing/_grouped_mm.py)
from torchax.ops import mappings as _mappings  # noqa: E402  (needs the import above first)
from torchax.tensor import Tensor as TorchaxTensor  # noqa: E402
from torchax.tensor import XLADispatchMode as TorchaxMode  # noqa: E402
from torchax.view import View as TorchaxView  # noqa: E402

Var = jax_core.Var


def current_jaxpr_frame() -> Any:
    """The equation list owner of the jaxpr being traced right now."""
    trace = jax_core.trace_ctx.trace
    if not isinstance(trace, pe.DynamicJaxprTrace):
        raise RuntimeError("not inside jax.make_jaxpr")
    return trace.frame


def equation_count(frame: Any) -> int:
    """How many equations `frame` has emitted so far (dead ones included)."""
    return len(frame.tracing_eqns)


def emitted_outvars(frame: Any) -> list[Sequence[Var] | None]:
    """Per emitted equation, in order, its output vars (None if it was already dropped)."""
    result: list[Sequence[Var] | None] = []
    for entry in frame.tracing_eqns:
        eqn = entry() if isinstance(entry, weakref.ReferenceType) else entry
        result.append(None if eqn is None else eqn.outvars)
    return result


def var_of(value: object) -> Var | None:
    """The jaxpr var a torchax tensor (or a JAX tracer) stands for, if any."""
    if isinstance(value, TorchaxTensor):
        value = value._elem
    if isinstance(value, pe.DynamicJaxprTracer):
        atom = value.val
        return atom if isinstance(atom, Var) else None
    if isinstance(value, jax_core.Tracer):
        return primal_var(value)
    return None


_WRAPPING_TRACERS = {ad.JVPTracer: "primal", ad.LinearizeTracer: "primal", batching.BatchTracer: "val"}


def primal_var(value: object) -> Var | None:
    """The jaxpr var under a transformation's tracer: a ``jax.grad`` local's primal value, a
    ``jax.vmap`` local's batched value (through any nesting of them); None for anything else."""
    for _ in range(64):  # transformations nest a few levels deep, never this many
        if isinstance(value, pe.DynamicJaxprTracer):
            atom = value.val
            return atom if isinstance(atom, Var) else None
        field = _WRAPPING_TRACERS.get(type(value))
        if field is None:
            return None
        value = getattr(value, field)
    return None


def name_stack(eqn: jax_core.JaxprEqn) -> str:
    """The transformations and scopes an equation was made under: ``transpose(jvp())``, ``''``."""
    return str(eqn.source_info.name_stack)


def custom_jvp_rule(eqn: jax_core.JaxprEqn) -> jax_core.ClosedJaxpr | None:
    """The JVP rule of a ``custom_jvp_call`` as a jaxpr from ``(*primals, *tangents)`` to
    ``(*outputs, *output_tangents)``; None when it has constants or zero output tangents.

    jax 0.10 keeps the rule as ``params["jvp_jaxpr_fun"]``, a ``WrappedFun`` of the tangents'
    symbolic-zero flags returning ``(jaxpr, consts, output zero flags)``.
    """
    if eqn.params.get("num_consts"):
        return None
    try:
        jaxpr, consts, out_zeros = eqn.params["jvp_jaxpr_fun"].call_wrapped(*[False] * len(eqn.invars))
    except Exception:  # a rule that cannot be traced on its own: the body stays
        return None
    if any(out_zeros):
        return None
    return jax_core.ClosedJaxpr(jaxpr, consts)


def sub_jaxprs(eqn: jax_core.JaxprEqn) -> list[jax_core.Jaxpr]:
    """The jaxprs an equation holds in its params (a scan's body, a cond's branches)."""
    return list(jax_core.jaxprs_in_params(eqn.params))


def jax_value(tensor: TorchaxTensor) -> object:
    """The JAX value inside a torchax tensor."""
    return tensor._elem


def wrap(value: object, env: object) -> TorchaxTensor:
    """A torchax tensor around a JAX value."""
    return TorchaxTensor(value, env)


def view_tensor(value: object, env: object) -> TorchaxTensor | None:
    """A torchax lazy view (``logits[:, -1]``) as the tensor it stands for; None for anything else."""
    return wrap(value.jax(), env) if isinstance(value, TorchaxView) else None


def is_missing_lowering(error: BaseException) -> bool:
    """Whether torchax failed because it has no JAX lowering for an op."""
    return isinstance(error, torchax.tensor.OperatorNotFound)


def missing_lowering_op(error: BaseException) -> str | None:
    """The op (``aten::special_airy_ai``) a missing-lowering error names, if it names one."""
    match = re.search(r"name (\S+) has no lowering", str(error))
    return match.group(1) if match else None


def is_mixed_device(error: BaseException) -> bool:
    """Whether torchax refused an op mixing a plain CPU tensor with a traced one (its check in t2j_iso)."""
    return isinstance(error, AssertionError) and "mixed math" in str(error)


def own_random_key(env: Any, key: Any) -> contextlib.AbstractContextManager[Any]:
    """While active, random ops split `key` (a traced input), and the environment's own key is
    left as it was, so no tracer outlives the trace."""
    manager: contextlib.AbstractContextManager[Any] = env.override_property(prng=key)
    return manager


def raw_frames(eqn: jax_core.JaxprEqn) -> tuple[Sequence[Any], Sequence[int]]:
    """The ``(code objects, lasti)`` of the Python stack that emitted `eqn`, innermost first."""
    traceback = eqn.source_info.traceback
    return traceback.raw_frames() if traceback is not None else ((), ())


def traceback_of(eqn: jax_core.JaxprEqn) -> object:
    """The Python stack `eqn` was emitted from, as JAX keeps it (None if it kept none): one object
    per emission, shared by the equations a retrace replayed from one (`tracing._replay`)."""
    return eqn.source_info.traceback


def to_jax_dtype(dtype: Any) -> Any:
    return _mappings.t2j_dtype(dtype)


def to_jax_array(tensor: Any) -> jax.Array:
    """A CPU torch tensor's value as a JAX array (bfloat16 included)."""
    array: jax.Array = _mappings.t2j(tensor.detach(), use_dlpack=False)
    return array


@contextlib.contextmanager
def view_values() -> Iterator[dict[int, tuple[object, Var]]]:
    """While active, note the var each torchax view first materializes to.

    torchax keeps a slice such as ``x[..., 0]`` as a lazy ``View`` and computes it where it is
    used, so the local bound to it holds no value yet; this maps ``id(view)`` to the view and
    the var its first use produced (``View.jax`` computes it, in torchax 0.0.13).
    """
    first: dict[int, tuple[object, Var]] = {}
    original = TorchaxView.jax

    def jax_and_remember(view: TorchaxView) -> Any:
        value = original(view)
        if id(view) not in first:
            var = var_of(value)
            if var is not None:
                first[id(view)] = (view, var)
        return value

    TorchaxView.jax = jax_and_remember
    try:
        yield first
    finally:
        TorchaxView.jax = original


@contextlib.contextmanager
def dynamo_not_imported() -> Iterator[None]:
    """While open, torchax's dispatch mode runs without importing ``torch._dynamo`` first.

    torch wraps every dispatch mode's ``__torch_dispatch__`` so that TorchDynamo does not compile
    it, importing ``torch._dynamo`` (1 to 3 s, most of a small model's first trace) at the first
    call. Nothing compiles with TorchDynamo inside a JAX trace, so for the capture the wrapper
    is told the function is its own disabled version; left alone once ``torch._dynamo`` is
    imported, and undone on exit."""
    wrapper = vars(TorchaxMode).get("__torch_dispatch__")
    raw = getattr(wrapper, "__wrapped__", None)
    if raw is None or "torch._dynamo" in sys.modules or hasattr(raw, "__dynamo_disable"):
        yield
        return
    raw.__dynamo_disable = raw
    try:
        yield
    finally:
        if vars(raw).get("__dynamo_disable") is raw:
            del raw.__dynamo_disable


# -- replaying recorded equations (tracing._replay) ----------------------------------------------
# jax 0.10: while `jax.make_jaxpr` runs, the frame's ``tracing_eqns`` hold ``TracingEqn``s (strong
# references: ``make_jaxpr`` does no automatic DCE), each with its input tracers, output vars,
# primitive, params, effects, source info and context; ``DynamicJaxprTrace.emit_eqn`` appends one
# made of given parts and returns its output tracers, with no abstract evaluation.


def current_trace(frame: Any) -> Any:
    """The trace building `frame` right now, or None (another trace is current: a transformation)."""
    trace = jax_core.trace_ctx.trace
    return trace if isinstance(trace, pe.DynamicJaxprTrace) and trace.frame is frame else None


def recorded_equations(frame: Any, start: int, end: int) -> list[Any] | None:
    """The equations `frame` emitted from `start` to `end`, or None if one was dropped."""
    eqns = []
    for entry in frame.tracing_eqns[start:end]:
        eqn = entry() if isinstance(entry, weakref.ReferenceType) else entry
        if not isinstance(eqn, pe.TracingEqn):
            return None
        eqns.append(eqn)
    return eqns


def replayable_equation(frame: Any, eqn: Any) -> bool:
    """No effects, no constant input, no output with quasi-dynamic data: an equation `emit_like`
    copies exactly."""
    if eqn.effects or any(var.aval.has_qdd for var in eqn.outvars):
        return False
    return not any(isinstance(t.val, Var) and t.val in frame.constvar_to_val for t in eqn.in_tracers)


def equation_inputs(eqn: Any) -> list[Any]:
    """An equation's input tracers (a literal's tracer stands for its value)."""
    return list(eqn.in_tracers)


def is_literal_tracer(tracer: Any) -> bool:
    return isinstance(tracer.val, jax_core.Literal)


def traced_here(value: object, trace: Any) -> bool:
    """Whether `value` is a tracer of `trace` standing for a var (not a literal, not a constant)."""
    return (
        isinstance(value, pe.DynamicJaxprTracer) and value._trace is trace and isinstance(value.val, Var)
        and value.val not in trace.frame.constvar_to_val
    )


def emit_like(trace: Any, eqn: Any, inputs: list[Any]) -> list[Any]:
    """`eqn` emitted again on `inputs` (tracers of `trace`): the same primitive, params, effects,
    source info and context, fresh output vars; its output tracers."""
    out_avals = [var.aval for var in eqn.outvars]
    tracers: list[Any] = trace.emit_eqn(
        inputs, out_avals, eqn.primitive, eqn.params, eqn.effects, eqn.source_info, eqn.ctx
    )
    return tracers


def random_key(env: Any) -> object:
    """The key the environment's random ops split next (torchax keeps it in ``env.param.prng``)."""
    return env.param.prng


def set_jax_value(tensor: TorchaxTensor, value: object) -> None:
    """Update a torchax tensor in place, as its in-place ops do."""
    tensor._elem = value
