"""`Trace`: a traced JAX program and, for every value in it, where in the torch code it came from.

Plain data: renderers read it without re-running torch.  Jaxpr vars (``jax.extend.core.Var``)
are the keys; equations are referred to by their index in ``trace.jaxpr.jaxpr.eqns``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

InputKind = Literal["param", "buffer", "arg"]
Frontend = Literal["torch", "jax"]


@dataclass(frozen=True)
class Site:
    """A span of source: the expression (or statement) an instruction belongs to."""

    file: str
    line: int
    end_line: int
    col: int
    end_col: int
    text: str | None = None


@dataclass(frozen=True)
class Origin:
    """Where one jaxpr var came from."""

    kind: Literal["param", "buffer", "arg", "op", "const"]
    function: str
    """Qualname of the function that produced it (`Attention.forward`), or of the entry."""
    module_path: str | None = None
    """For module methods, the module's path in the root module (`layers.0.attention`)."""
    name: str | None = None
    """The local it was bound to, the state_dict name of a param/buffer, or the argument name."""
    site: Site | None = None
    """The innermost user-code expression whose evaluation emitted it."""

    @property
    def file(self) -> str | None:
        return self.site.file if self.site else None

    @property
    def line(self) -> int | None:
        return self.site.line if self.site else None

    @property
    def expression(self) -> str | None:
        return self.site.text if self.site else None


@dataclass(frozen=True)
class Input:
    """One input of the jaxpr: a parameter, buffer or argument of the entry."""

    var: Any
    kind: InputKind
    name: str
    """state_dict path for params/buffers (`layers.0.attention.wqkv.weight`), else the
    argument path in the entry's signature (`x`, `args[1]`, `cache['k']`)."""


@dataclass(frozen=True)
class StateUpdate:
    """An input the code mutated in place (a KV cache): its new value is an extra output."""

    input: Input
    var: Any


@dataclass
class Seen:
    """What the frame hook saw inside one call besides its equations: the locals it bound to
    traced values and to numbers, the numbers `self` held, and the lines that ran. Lowering reads
    its evidence here (`render.lower.evidence`), the page which branches ran."""

    bindings: list[tuple[str, int, Any]] = field(default_factory=list)
    """`(local name, line, var)` each time the call bound a local to a traced value."""
    numbers: list[tuple[str, int, Any]] = field(default_factory=list)
    """`(local name, line, value)` each time the call bound a local to a Python number (or a
    tuple of ints): `kv_size = self.n_local_heads * self.head_dim` bound 24."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """The numbers `self` held when the call returned, by attribute path (`n_head`, `eps`,
    `config.rope_theta` for an object it keeps): the values of the `self.<path>` reads in the
    torch code. Empty for a function."""
    lines: frozenset[int] = frozenset()
    """Every line of the call's own code that ran: a branch none of whose lines is here did not run
    (`render.html.runs`). Empty where no frame hook saw the call."""


@dataclass
class Call:
    """One call of a user function (or module method) and the equations it emitted."""

    function: str
    """co_qualname: `Attention.forward`, `my_mathy_thing.<locals>.other_math`."""
    file: str
    line: int
    """Line of the `def`."""
    module_path: str | None = None
    module_type: str | None = None
    args: list[tuple[str, Any]] = field(default_factory=list)
    """Traced values among the arguments, by parameter name (`x`, `args[0]`)."""
    eqns: list[int] = field(default_factory=list)
    """Equations emitted in this call itself, not in its children, in program order."""
    inputs: list[Any] = field(default_factory=list)
    """Vars the call reads that were made outside it (args, params, captured values)."""
    outputs: list[Any] = field(default_factory=list)
    """Vars made inside the call and used after it (or program outputs)."""
    returned: list[tuple[str, Any]] = field(default_factory=list)
    """Traced values in the return value, by path (`''` for a bare tensor, `[0]`, ...)."""
    seen: Seen = field(default_factory=Seen)
    """What the frame hook saw of the call's locals and of `self`."""
    children: list[Call] = field(default_factory=list)
    call_site: Site | None = None
    """Where the caller called it (None for the root)."""
    raised: bool = False

    def walk(self) -> Iterator[Call]:
        yield self
        for child in self.children:
            yield from child.walk()

    def all_eqns(self) -> list[int]:
        """Equations of this call and all its descendants, in program order."""
        return sorted(i for call in self.walk() for i in call.eqns)


@dataclass
class Trace:
    """A traced JAX program with provenance for each var and the user call tree."""

    jaxpr: Any
    """The `ClosedJaxpr`."""
    inputs: list[Input]
    """One per jaxpr invar, in order."""
    outputs: list[tuple[str, Any]]
    """The entry's traced outputs by path (`''`, `[0]`, `['logits']`), one per leading outvar."""
    out_tree: Any
    """torch pytree spec of the entry's return value; non-tensor leaves kept in `static_outputs`."""
    static_outputs: dict[int, Any]
    """Leaf index -> Python value for the return value's non-tensor leaves."""
    state: list[StateUpdate]
    """Inputs mutated in place; their new values follow the outputs in the jaxpr's outvars."""
    root: Call
    origins: dict[Any, Origin]
    eqn_sites: list[Site | None]
    """Per equation, the innermost user expression that emitted it."""
    eqn_calls: list[Call]
    """Per equation, the call that emitted it."""
    entry: str
    """What was traced: the entry's qualname (or the module class name)."""
    frontend: Frontend = "torch"
    """What the entry was: torch code run through torchax, or JAX code (which may call torch code)."""
    gradients: dict[Any, Any] = field(default_factory=dict)
    """For a gradient program (`jax.grad` of the entry's code): each value the backward pass made
    -> the forward value it is the gradient of, or None when that is not known."""
    custom_jvp_rules: dict[int, Any] = field(default_factory=dict)
    """For `jax.custom_jvp` functions the JAX code called: `id` of a `custom_jvp_call` equation's
    ``jvp_jaxpr_fun`` param -> its rule, a ClosedJaxpr `(*primals, *tangents) -> (*outs, *out_tangents)`."""
    derivatives: dict[Any, Any] = field(default_factory=dict)
    """For a gradient program: forward values only the backward pass reads (a derivative's factor,
    ``2.0 * error`` for ``error ** 2``) -> the value of the expression they differentiate."""

    def origin(self, var: Any) -> Origin | None:
        return self.origins.get(var)

    def __repr__(self) -> str:
        """One line, whatever the size of the program (the fields hold the jaxpr and every var)."""
        kinds = [i.kind for i in self.inputs]
        inputs = ", ".join(f"{kinds.count(k)} {k}{'s' if kinds.count(k) > 1 else ''}"
                           for k in ("param", "buffer", "arg") if k in kinds)
        calls, outputs = sum(1 for _ in self.root.walk()) - 1, len(self.outputs)
        return (f"<Trace of {self.entry} ({self.frontend}): {len(self.jaxpr.jaxpr.eqns):,} equations, "
                f"inputs {inputs or 'none'}, {outputs} output{'s' if outputs != 1 else ''}, "
                f"{calls} nested call{'s' if calls != 1 else ''} of user code>")

    def _repr_html_(self) -> str | None:
        """Jupyter's view: torch beside its JAX, once a view is registered (`import jaxside.render.html`
        registers the side-by-side page); else Jupyter shows the repr."""
        return HTML_VIEWS[-1](self) if HTML_VIEWS else None

    def calls(self, function: str) -> list[Call]:
        """Every call of the function with this qualname (or name), in call order."""
        return [
            c for c in self.root.walk() if c.function == function or c.function.endswith("." + function)
        ]


HTML_VIEWS: list[Callable[[Trace], str]] = []
"""What `Trace._repr_html_` shows: the last view registered with `register_html_view`. tracing never
imports render, so render registers its page when it is imported."""


def register_html_view(view: Callable[[Trace], str]) -> None:
    """Make `view(trace) -> html` what notebooks show for a `Trace`."""
    HTML_VIEWS.append(view)
