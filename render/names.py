"""The one place that turns provenance (torch locals, expressions, qualnames) into unique identifiers."""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Literal

Source = Literal["local", "argument", "parameter", "expression", "loop", "gradient", "fallback"]
"""Where a name came from; everything but `fallback` is derived from source identifiers."""

def is_index(key: str) -> bool:
    """Whether a module or state key is a list position (`layers.0`): ASCII digits only. (`str.isdigit`
    also takes `²` and `١`, which `int` refuses or reads as 1: a child named so is a name, not a position.)"""
    return key.isascii() and key.isdecimal()


DERIVED: frozenset[str] = frozenset({"local", "argument", "parameter", "expression", "loop", "gradient"})

# Roots that say where a callable lives, not what the value is: `torch.sin(x)` is a `sin`.
_NAMESPACES = frozenset({"self", "torch", "F", "nn", "functional", "np", "jnp", "jax", "lax", "math", "cls"})
_OPERATORS = {
    ast.Add: "plus",
    ast.Sub: "minus",
    ast.Mult: "times",
    ast.Div: "over",
    ast.MatMult: "matmul",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.BitAnd: "and",
    ast.BitOr: "or",
}
_MAX_PARTS = 3
_MAX_LENGTH = 24


_PIECES = re.compile(
    r"NeXt|Net(?![a-z])"  # network-family names are one word: ResNet, ConvNeXt, MobileNet
    r"|[A-Z]+(?=[A-Z][a-z])"  # an acronym before a word: the `HTTP` of HTTPServer
    r"|[A-Z]?[a-z]+|[A-Z]+"  # a word, or a trailing acronym
    r"|\d+(?:D(?![a-z]))?"  # digits, with a dimension: the `1D` of Conv1D
    r"|[^A-Za-z\d]+"  # anything else (`_`, other scripts) is kept as written
)


def snake(name: str) -> str:
    """A CamelCase name as people write it in snake_case, by these rules in order:

    - a capital starts a word, an acronym ends before the capital of the next word (`HTTPServer`
      -> `http_server`, `LlamaRMSNorm` -> `llama_rms_norm`);
    - digits, and a dimension letter after them, stick to the word before (`GPT2Attention` ->
      `gpt2_attention`, `Conv1D` -> `conv1d`);
    - a lone letter is no word: it sticks to the word before (`MoE` -> `moe`, `GPTNeoX` ->
      `gpt_neox`, `MobileNetV3` -> `mobilenetv3`);
    - a two-letter word and a short acronym after it are one word (`SiLU` -> `silu`, `ReLU`);
    - `Net` and `NeXt` end the word before (`ResNet` -> `resnet`, `ConvNeXt` -> `convnext`).
    """
    words: list[str] = []
    for piece in _PIECES.findall(name):
        previous = words[-1] if words else ""
        if not _is_ascii_word(piece) or not _is_ascii_word(previous[-1:]):
            words.append(piece)  # `_` and other scripts are kept as written, between words
        elif piece[0].isdigit() or len(piece) == 1 or piece in ("Net", "NeXt"):
            words[-1] += piece
        elif piece.isupper() and len(piece) <= 2 and len(previous) == 2 and previous.istitle():
            words[-1] += piece
        else:
            words.append("_" + piece)
    return "".join(words).lower()


def _is_ascii_word(text: str) -> bool:
    return text.isascii() and text[:1].isalnum()


def identifier(text: str, default: str = "value") -> str:
    """A valid, non-keyword identifier made from `text` (its words joined by `_`).

    Letters and digits of any script are kept (`größe`, `名字`), in the NFKC form Python itself
    reads identifiers in, so two spellings of one name cannot become two names.
    """
    text = unicodedata.normalize("NFKC", text)
    words = ["".join(ch for ch in word if ("_" + ch).isidentifier()) for word in re.findall(r"[^\W_]+", text)]
    name = "_".join(w for w in words if w)
    if not name:
        return default
    if text.startswith("_"):
        name = "_" + name  # a private helper stays private
    elif not name[0].isidentifier():
        name = f"{default}_{name}"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        name += "_"
    return name


def function_name(qualname: str) -> str:
    """A def name from a qualname: `Attention.forward` -> `attention_forward`,
    `my_mathy_thing.<locals>.other_math` -> `other_math`; a method whose name the class name ends
    with does not say it twice: `FeedForward.forward` -> `feed_forward`, `RMSNorm._norm` -> `rms_norm`."""
    parts = [p for p in qualname.split(".") if p and not p.startswith("<")]
    if "<locals>" in qualname:
        parts = parts[-1:]
    words = [snake(p).strip("_") for p in parts[-2:]]
    words = [w for w in words if w]
    if len(words) == 2 and (words[0] == words[1] or words[0].endswith("_" + words[1])):
        words = words[:1]  # (no stutter: `feed_forward_forward`)
    return identifier("_".join(words), "function")


def leaf_name(path: str, module_path: str | None = None) -> str:
    """A short name for an input deep in a pytree, as a def that reads it calls it: `params['w1']` ->
    `w1`, `params['layers.0.attention.wqkv.weight']` in module `layers.0.attention` -> `wqkv_weight`."""
    match = re.search(r"\[(?:'([^']*)'|\"([^\"]*)\"|([0-9]+))\]$", path)
    if match is None:
        return path
    key = match.group(1) or match.group(2)
    if key is None:
        return identifier(path)
    if module_path and key.startswith(module_path + "."):
        key = key[len(module_path) + 1 :]
    parts = [p for p in key.split(".") if p and not is_index(p)]
    return identifier("_".join(parts[-2:]))


def gradient_name(primal: str | None) -> str:
    """A gradient's name from its primal value's: `h` -> `grad_h`, `params['w1']` -> `grad_params_w1`."""
    return f"grad_{identifier(primal)}" if primal else "grad"


def derivative_name(primal: str | None) -> str:
    """A factor of the derivative of `primal`, computed by the forward pass: `h` -> `d_h`."""
    return f"d_{identifier(primal)}" if primal else "d"


def expression_name(text: str | None) -> str | None:
    """A temporary's name from the torch expression that made it: `self.w1(x)` -> `w1_x`,
    `x_re * cos` -> `x_re_times_cos`, `pairs[..., 0]` -> `pairs_0`; None if nothing fits."""
    if not text:
        return None
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    parts = _parts(node, depth=0)[:_MAX_PARTS]
    while len(parts) > 1 and len("_".join(parts)) > _MAX_LENGTH:
        parts.pop()
    if not parts:
        return None
    name = "_".join(parts)
    if len(name) > _MAX_LENGTH and "_" in name:  # scaled_dot_product_attention -> sdpa
        name = "".join(w[0] for w in name.split("_") if w)
    return identifier(name) if name else None


def _parts(node: ast.expr, depth: int) -> list[str]:
    if depth > 2:
        return []
    if isinstance(node, ast.Name):
        return [] if node.id in _NAMESPACES else [node.id]
    if isinstance(node, ast.Attribute):
        base = _parts(node.value, depth + 1) if _is_chain(node.value) else []
        return [*base, node.attr]
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and not _is_namespace(func.value):
            # a method on a value: `rotated.flatten(-2)` -> rotated_flatten
            owner = _parts(func.value, depth + 1) if _is_chain(func.value) else []
            return [*owner[-1:], func.attr]
        callee = _parts(func, depth + 1)[-1:]
        first = node.args[:1]
        simple = [p for a in first if _is_chain(a) for p in _parts(a, depth + 1)[-1:]]
        return [*callee, *simple] if callee else simple
    if isinstance(node, ast.BinOp):
        return _binary(node, depth)
    if isinstance(node, ast.UnaryOp):
        return _parts(node.operand, depth + 1)
    if isinstance(node, ast.Subscript):
        base = _parts(node.value, depth + 1)
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        constants = [i.value for i in index if isinstance(i, ast.Constant)]
        extra = [str(c) for c in constants if isinstance(c, int | str)]
        extra += [i.id for i in index if isinstance(i, ast.Name)]
        return [*base[-1:], *(extra or _part(index))[:1]]
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        return _parts(node.elts[0], depth + 1)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _parts(node.elt, depth + 1)
    return []


def _part(index: list[ast.expr]) -> list[str]:
    """A word for a part of a value no constant or name picks (`h[:, :2]` -> h_slice, `x[:, -1]` ->
    x_last), so it is never named as the whole; none where the index only reshapes (`x[:, None]`)."""
    for i in index:
        if isinstance(i, ast.UnaryOp) and isinstance(i.op, ast.USub) and isinstance(i.operand, ast.Constant):
            return ["last"] if i.operand.value == 1 else ["slice"]
    if any(isinstance(i, ast.Slice) and (i.lower or i.upper or i.step) for i in index):
        return ["slice"]
    return []


def _binary(node: ast.BinOp, depth: int) -> list[str]:
    """`x_re * cos` -> x_re_times_cos; the value is the whole operation, so operands that are calls
    are named by what they call (`F.silu(self.w1(x)) * self.w3(x)` -> silu_times_w3, `1.0 +
    torch.tanh(u)` -> tanh_plus_1); where that is too long, what the left operand is called."""
    op = _OPERATORS.get(type(node.op), "op")
    left, right = _head(node.left, depth + 1), _head(node.right, depth + 1)
    for head, number in ((left, node.right), (right, node.left)):
        whole = _whole(number.value) if isinstance(number, ast.Constant) else None
        if head and whole:
            left, right = head, whole  # `error ** 2` -> error_pow_2, `1 + x` -> x_plus_1
    if left and right and len(f"{left}_{op}_{right}") <= _MAX_LENGTH:
        return [left, op, right]
    return _parts(node.left, depth + 1) or _parts(node.right, depth + 1)


def _head(node: ast.expr, depth: int) -> str | None:
    """One word for an operand: a name chain's last part, the function or module a call calls, or
    the method a value calls (`a.sigmoid()` -> sigmoid; `a.float()` is still `a`)."""
    if depth > 4:
        return None
    if _is_chain(node):
        return _last(_parts(node, depth))
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and not _is_namespace(func.value):
        return _head(func.value, depth + 1) if func.attr in _SAME_VALUE else func.attr
    return _last(_parts(func, depth)) if _is_chain(func) else None


def _last(parts: list[str]) -> str | None:
    return parts[-1] if parts else None


_SAME_VALUE = frozenset({
    "float", "half", "double", "bfloat16", "to", "type", "type_as", "contiguous", "clone", "detach",
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "flatten", "squeeze", "unsqueeze",
    "expand", "expand_as", "t",
})
"""Methods that give the same values in another dtype, layout or shape: the operand keeps its name."""


def _whole(value: object) -> str | None:
    """`2` for 2 or 2.0: a whole number as a word; None for anything else (`0.5`, `True`)."""
    if type(value) is int or (type(value) is float and value.is_integer() and abs(value) < 1e6):
        return str(int(value))
    return None


def _is_chain(node: ast.expr) -> bool:
    """`x`, `self.weight`, `x.T`, `params["w1"]`: a name or attribute chain, or a constant key of one."""
    while isinstance(node, ast.Attribute) or (isinstance(node, ast.Subscript) and _is_key(node)):
        node = node.value
    return isinstance(node, ast.Name)


def _is_key(node: ast.expr) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)


def _is_namespace(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in _NAMESPACES


@dataclass
class Scope:
    """Names of one function body (or the module): unique, never a keyword or a reserved name.

    Rebinding the same base gives `x`, `x_1`, `x_2`; every name remembers its `Source`, so the
    share of names derived from torch identifiers can be measured.
    """

    reserved: set[str] = field(default_factory=set)
    names: dict[str, Source] = field(default_factory=dict)
    preferred: set[str] = field(default_factory=set)
    """Bases that torch locals of this function will want; temporaries avoid taking them first."""
    outer: Scope | None = None
    """The module's names (defs, constants), which a local must not shadow."""
    bases: dict[str, str] = field(default_factory=dict)
    """The base of each suffixed name (`k_2` -> `k`), which `render.lower.rebinding` may give back."""
    clashed: dict[str, str] = field(default_factory=dict)
    """Names that say `_out` only not to hide a module-level name (`feed_forward_out`, for the value
    of the def `feed_forward`), with the name they would have: a class style, whose defs are
    methods, gives it back (`render.styles.methods`)."""

    def fresh(self, base: str | None, source: Source, *, temporary: bool = False) -> str:
        if not base:
            base, source = "value", "fallback"
        base = identifier(base)
        module = self.outer.names if self.outer is not None else {}
        if base in module and not base.isupper() and self.free(f"{base}_out"):  # (no constant's)
            self.clashed[f"{base}_out"] = base
            base = f"{base}_out"  # (the value of a call to the def `feed_forward`: `feed_forward_out`)
        start = 1 if temporary and base in self.preferred else 0
        for i in range(start, 10_000):
            name = base if i == 0 else f"{base}_{i}"
            if self.free(name):
                self.names[name] = source
                if i:
                    self.bases[name] = base
                return name
        raise RuntimeError(f"no free name for {base!r}")

    def free(self, name: str) -> bool:
        """Nobody has `name`. A module-level name must not hide any builtin (`load_params` calls
        `isinstance`, `dict`, ...); a local hides only those generated code calls, so a torch
        `input` stays `input`."""
        return not self.taken(name) and name not in (BUILTINS if self.outer is None else GENERATED_BUILTINS)

    def claim(self, name: str, source: Source) -> str:
        """Take exactly `name` (a loop rebinding it again is fine)."""
        self.names.setdefault(name, source)
        return name

    def taken(self, name: str) -> bool:
        return (
            name in self.names or name in self.reserved or (self.outer is not None and self.outer.taken(name))
        )


BUILTINS: frozenset[str] = frozenset(dir(builtins))
GENERATED_BUILTINS: frozenset[str] = frozenset(
    {"range", "zip", "tuple", "list", "len", "enumerate", "complex", "float", "sum", "ValueError"}
)
"""Builtins generated defs call themselves (`complex(1.0, 2.0)` for a complex literal, `sum(...)`
for split points); a local never takes one of these names. tests/test_injection.py checks every export
against this list."""
