"""``--style nnx``: Flax NNX modules. Parameters are `nnx.Param`s, buffers the torch code only reads
`nnx.Variable`s, buffers it writes (KV caches) `nnx.Cache`s written in place (`self.k_cache[...] = k_out`);
parameters torch froze (`requires_grad=False`) `FrozenParam`s, an `nnx.Variable` of the module's own, so
`nnx.grad` differentiates what torch does (`from_torch` decides per instance where instances of a class
differ: `_param`). torch Linear and Embedding modules are `nnx.Linear` (kernel
(in, out)) and `nnx.Embed`."""

from __future__ import annotations

import ast

from jaxside.render.ir import Program
from jaxside.render.layout import MODULE_WIDTH, double_quotes, format_statement
from jaxside.render.styles.tree import Klass, Tree, kept_flags

__all__ = ["Nnx"]

_VARIABLES = {"param": "nnx.Param", "frozen": "FrozenParam", "buffer": "nnx.Variable", "state": "nnx.Cache"}

_FROZEN_PARAM = '''class FrozenParam(nnx.Variable):
    """A torch parameter with `requires_grad=False`: no `nnx.Param`, so `nnx.grad` (which
    differentiates `nnx.Param`s) and `nnx.Optimizer` leave it alone, as torch does."""'''


_PARAM = '''def _param(tensors, path):
    """The tensor at `path` as an `nnx.Param`, or as a `FrozenParam` where torch froze it
    (`_FROZEN`); None where there is none."""
    tensor = tensors.get(path)
    if tensor is None:
        return None
    return FrozenParam(tensor) if path in _FROZEN else nnx.Param(tensor)'''

_LAYERS = {
    "linear": '''def _linear_layer(tensors, path):
    """A torch `Linear` as an `nnx.Linear`: torch keeps `weight` as (out, in), NNX's `kernel`
    is (in, out), so it is transposed; the bias is the same."""
    weight = tensors[path + "weight"]
    bias = tensors.get(path + "bias")
    layer = nnx.Linear(
        weight.shape[1],
        weight.shape[0],
        use_bias=bias is not None,
        param_dtype=weight.dtype,
        rngs=nnx.Rngs(0),
    )
    layer.kernel[...] = weight.T
    if bias is not None:
        layer.bias[...] = bias
    return layer''',
    "embed": '''def _embed_layer(tensors, path):
    """A torch `Embedding` as an `nnx.Embed`: its `weight` (num_embeddings, features) is
    NNX's `embedding`, in the same layout."""
    weight = tensors[path + "weight"]
    layer = nnx.Embed(
        weight.shape[0], weight.shape[1], param_dtype=weight.dtype, rngs=nnx.Rngs(0)
    )
    layer.embedding[...] = weight
    return layer''',
}


class Nnx:
    name = "Flax NNX"
    base = "nnx.Module"
    imports = ["from flax import nnx"]
    layout = ("`from_torch` is the one place tensors change layout (`nnx.Linear` kernels are torch's "
              "weights transposed); the other tensors keep torch's.")
    threads_state = False
    grad = "`nnx.grad`"
    layers = True
    bottom_up = False

    def read(self, ref: ast.expr, kind: str, indexed: bool) -> ast.expr:
        if indexed:  # `self.freqs_cis[input_pos]`: a variable indexes its value
            return ref
        return ast.Subscript(ref, ast.Constant(Ellipsis), ast.Load())

    def write(self, ref: ast.expr, value: ast.expr) -> ast.stmt:
        return ast.Assign([ast.Subscript(ref, ast.Constant(Ellipsis), ast.Store())], value, lineno=0)

    def declare(self, klass: Klass, attributes: list[tuple[str, str, bool]], tree: Tree) -> list[str]:
        required = [self.argument(name) for name, _, optional in attributes if not optional]
        optional = [f"{self.argument(name)}=None" for name, _, optional in attributes if optional]
        flags = [f"{f.attribute}={f.default}" for f in kept_flags(klass)]
        keywords = (["config"] if klass.uses_config else []) + flags
        keywords = ["*", *keywords] if keywords else []
        lines = [f"def __init__({', '.join(['self', *required, *optional, *keywords])}):"]
        for attribute, kind, may_be_none in attributes:
            name = self.argument(attribute)
            if kind in ("child", "mixed"):  # "mixed": a variable already, of its instance's type
                value = name
            else:
                value = f"nnx.List({name})" if kind == "list" else f"{_VARIABLES[kind]}({name})"
                if may_be_none:
                    value = f"None if {name} is None else {value}"
            lines.append(f"    self.{attribute} = {value}")
        if klass.uses_config:
            lines.append("    self.config = config")
        lines += [f"    self.{f.attribute} = {f.attribute}" for f in kept_flags(klass)]
        if len(lines) == 1:  # nothing to hold: nnx.Module's own __init__
            return []
        return format_statement(ast.parse("\n".join(lines)).body[0], 4, MODULE_WIDTH)

    def argument(self, attribute: str) -> str:
        """`__init__`'s parameter for an attribute: its name, `self_` for a torch child named `self`
        (a BERT attention's `self.self`)."""
        return f"{attribute}_" if attribute == "self" else attribute

    def layer_helpers(self, kinds: set[str]) -> list[str]:
        return [_LAYERS[kind] for kind in sorted(kinds)]

    def unstopped(self, classes: list[Klass], read: set[str]) -> set[str]:
        return set()  # the converter gives each instance's its own type

    def variables(self, kinds: set[str], unfrozen: set[str]) -> list[str]:
        if not kinds & {"frozen", "mixed"}:
            return []
        if not unfrozen:
            return [_FROZEN_PARAM]
        paths: list[ast.expr] = [ast.Constant(path) for path in sorted(unfrozen)]
        table = ast.Assign([ast.Name("_FROZEN", ast.Store())], ast.Set(paths), lineno=0)
        listed = "\n".join(format_statement(table, 0, MODULE_WIDTH))
        doc = ('"""The parameters torch froze where other instances of their class train theirs: their\n'
               '`FrozenParam`s are made per instance, by `_param`."""')
        return [_FROZEN_PARAM, double_quotes(listed) + "\n" + doc, _PARAM]

    def gradients(self, held: set[str], read: set[str]) -> str | None:
        kept = (["the buffers the torch code only reads are `nnx.Variable`s"] if "buffer" in held else []) + (
            ["the parameters torch froze (`requires_grad=False`) `FrozenParam`s"] if "frozen" in held else [])
        if not kept:
            return None
        return ("Gradients are torch's: " + " and ".join(kept) + ", which `nnx.grad` does not differentiate "
                "(it takes `nnx.Param`s).")

    def leaf(self, kind: str, value: str, path: str) -> str:
        return f"_param(tensors, {path})" if kind == "mixed" else value

    def inner_list(self, items: list[str], made: bool) -> str:
        """NNX 0.12 takes modules in a list only inside an `nnx.List`, at every depth."""
        return f"nnx.List({items[0]})" if made else f"nnx.List([{', '.join(items)}])"

    def finish(self, root: str, program: Program) -> list[str]:
        return [f"return {root}"]

    def usage(self, program: Program, root: str) -> list[str]:
        args = ", ".join(program.arg_names)
        lines = ["    model = from_torch(torch_model)  # the torch module, or its state_dict",
                 f"    outputs = model({args})"]
        if program.takes_state:
            lines[-1] += "  # updates the model's nnx.Cache variables"
        return lines
