"""Hostile names: no text from the user's model ever runs as code in an export, and odd names still export.

Names and keys reach generated modules in docstrings, `STATE_BUFFERS` and `params[...]`
subscripts; each case here would have run a payload, or failed to compile, before `render.text`.
Every export is imported and run, and its numbers are compared with torch directly.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import jax
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch import nn

from jaxside.annotate.check import entry_inputs, load_module
from jaxside.render import names, text
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture

GOLDEN = Path(__file__).parent / "golden" / "export"


def payload(marker: Path) -> str:
    """A name that, pasted between double quotes, closes them and writes `marker` (no "." in it:
    torch refuses those in buffer names)."""
    path = "/".join(f"{{chr({ord(c)})}}" if c == "." else c for c in str(marker))
    return f'x", getattr(open(f"{path}", "w"), "write")("pwned"), "'


class Buffered(nn.Module):
    """A buffer under `name`, written in place (so it is state), inside a ModuleDict under `key`."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.register_buffer(name, torch.zeros(3))
        self.proj = nn.Linear(3, 3)
        self.buffer_name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffer = getattr(self, self.buffer_name)
        buffer.add_(x.sum(0))
        return self.proj(x) + buffer


class Keyed(nn.Module):
    def __init__(self, name: str, key: str) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({key: Buffered(name)})
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[self.key](x) * 2


def export_and_run(model: nn.Module, x: torch.Tensor, source: str = "test.py", *, state: bool = True) -> str:
    """Export `model`, import the module, run it under jit, and compare outputs and state with torch."""
    torch.manual_seed(0)
    trace = capture(model, x)
    program = lower(trace)
    source_text = render_program(program, source=f"{source}: {trace.entry}")
    module = load_module(source_text)
    inputs = entry_inputs(module, program, model, (x,), {})
    result = jax.jit(getattr(module, program.entry.name))(*inputs)
    outputs, new_state = result if program.takes_state else (result, None)
    with torch.no_grad():
        expected = model(x)
    np.testing.assert_allclose(np.asarray(outputs), expected.numpy(), rtol=1e-5, atol=1e-6)
    buffers = dict(model.named_buffers())
    assert bool(program.state_paths) == state and (new_state is not None) == state
    for path in program.state_paths:
        got = new_state
        for key in path.split("."):
            got = got[int(key)] if isinstance(got, list) else got[key]
        np.testing.assert_allclose(np.asarray(got), buffers[path].numpy(), rtol=1e-5, atol=1e-6)
    return source_text


def test_a_buffer_name_cannot_run_code(tmp_path):
    marker = tmp_path / "PWNED"
    source_text = export_and_run(Buffered(payload(marker)), torch.randn(2, 3))
    assert "STATE_BUFFERS" in source_text
    assert not marker.exists()
    assert ast.literal_eval(source_text.split("STATE_BUFFERS = ")[1].split("\n)")[0] + "\n)") == (
        payload(marker),
    )


def test_keys_and_file_names_with_quotes_and_backslashes(tmp_path):
    marker = tmp_path / "PWNED"
    key = 'k"""\\n\'' + payload(marker)
    source = 'models\\odd """ name\n.py'
    source_text = export_and_run(Keyed(payload(marker), key), torch.randn(2, 3), source=source)
    assert not marker.exists()
    assert ast.get_docstring(ast.parse(source_text)).startswith('JAX for models\\odd """ name\\n.py: ')


def test_defs_named_like_builtins_leave_load_params_working():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sorted(isinstance(self.layers, x))

    def isinstance(layers, x):  # noqa: A001 - the point of the test
        for layer in layers:
            x = dict(layer, x)
        return x

    def dict(layer, x):  # noqa: A001
        return torch.relu(layer(x))

    def sorted(x):  # noqa: A001
        return x * 2

    source_text = export_and_run(Net(), torch.randn(2, 3), state=False)
    tree = ast.parse(source_text)
    defined = {node.name for node in tree.body if builtins.isinstance(node, ast.FunctionDef)}
    assert not defined & names.BUILTINS, defined


def test_a_local_named_complex_keeps_complex_literals():
    def rotate(x: torch.Tensor) -> torch.Tensor:
        complex = torch.view_as_complex(x) * (1 + 2j)  # noqa: A001
        return torch.view_as_real(complex)

    x = torch.randn(4, 2)
    trace = capture(rotate, x)
    program = lower(trace)
    source_text = render_program(program, source="test.py: rotate")
    assert "complex(" in source_text
    module = load_module(source_text)
    got = getattr(module, program.entry.name)(jax.numpy.asarray(x.numpy()))
    np.testing.assert_allclose(np.asarray(got), rotate(x).numpy(), rtol=1e-6, atol=1e-6)


def test_non_ascii_locals_keep_their_names():
    def scale(x: torch.Tensor) -> torch.Tensor:
        größe = x * 2
        名字 = größe + 1
        return 名字.relu()

    trace = capture(scale, torch.randn(3))
    source_text = render_program(lower(trace), source="test.py: scale")
    assert "größe = " in source_text and "名字 = " in source_text, source_text


def defined_names(tree: ast.Module) -> set[str]:
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound.update(a.arg for a in node.args.args)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return bound


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.py")), ids=lambda p: p.stem)
def test_generated_defs_call_only_builtins_that_locals_never_take(golden):
    """`GENERATED_BUILTINS` is what makes a local named `complex` safe: it must list every builtin
    the generated defs call (load_params and its helpers, which take no user names, aside)."""
    tree = ast.parse(golden.read_text())
    bound = defined_names(tree)
    helpers = {"load_params", "_lists", "_is_state"}
    called = {
        node.id
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef) and fn.name not in helpers
        for node in ast.walk(fn)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound
    }
    assert called & names.BUILTINS <= names.GENERATED_BUILTINS


# -- the text service itself ---------------------------------------------------------------------------

NASTY = st.lists(
    st.one_of(
        st.sampled_from(['"', "'", '"""', "\\", "\n", "\r", "\x0c", "\u2028", "\x00", "#", "é", "名", "\t"]),
        st.characters(),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(NASTY, st.integers(0, 8))
def test_docstring_reads_back_as_the_text(value, indent):
    literal = text.docstring(value, indent)
    module = ast.parse(f"def f():\n{' ' * indent}{literal}\n{' ' * indent}return 1\n" if indent else literal)
    node = module.body[0].body[0] if indent else module.body[0]
    pad = " " * indent
    first, *rest = value.split("\n")
    indented = "\n".join([first, *(pad + line if line else "" for line in rest)])
    assert node.value.value == (indented + "\n" + pad if rest else value)  # closes on a line of its own


@settings(max_examples=300, deadline=None)
@given(NASTY)
def test_literal_and_comment_are_safe(value):
    assert ast.literal_eval(text.literal(value)) == value
    tokens = f"x = 1  # {text.comment(value)}\ny = 2\n"
    assert [type(n) for n in ast.parse(tokens).body] == [ast.Assign, ast.Assign]
    assert len(tokens.splitlines()) == 2


def test_the_writer_refuses_source_that_does_not_compile():
    with pytest.raises(text.UnsafeSourceError, match="line 1"):
        text.check_compiles('x = "\n', "module")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_identifiers_are_valid_and_never_keywords(value):
    name = names.identifier(value)
    assert name.isidentifier()
    assert not __import__("keyword").iskeyword(name)


# -- hostile names end to end --------------------------------------------------------------------------

# torch refuses "." and "" as buffer and ModuleDict keys; anything else goes.
KEYS = (
    st.lists(
        st.one_of(st.sampled_from(['"', "'", '"""', "\\", "\n", "é", "名", "if", "len"]), st.characters()),
        min_size=1,
        max_size=12,
    )
    .map("".join)
    .filter(lambda s: "." not in s)
)
# A class's docstring: any text Python takes there (`type()` refuses lone surrogates).
CLASS_DOCS = NASTY.map(lambda s: "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s))
CLASS_NAMES = st.one_of(
    st.sampled_from(["isinstance", "while", "load_params", "jnp", "größe", "名字", "_lists", "STATE_BUFFERS"])
    | st.sampled_from(["torch", "params", "state", "lax"]),
    st.text(st.characters(categories=["Lu", "Ll", "Lo"]), min_size=1, max_size=8),
)


# Each example is a capture and an export: few of them, and no shrinking (the example is printed).
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(name=KEYS, key=KEYS, class_name=CLASS_NAMES, doc=CLASS_DOCS, source=NASTY)
def test_hostile_names_run_nothing_and_match_torch(tmp_path_factory, name, key, class_name, doc, source):
    marker = tmp_path_factory.mktemp("hostile") / "PWNED"
    block = type(class_name, (Buffered,), {"__doc__": doc, "__qualname__": class_name})
    model = Keyed.__new__(Keyed)
    nn.Module.__init__(model)
    model.blocks = nn.ModuleDict({key: block(name), payload(marker)[:20].replace(".", "_"): Buffered("b")})
    model.key = key
    export_and_run(model, torch.randn(2, 3), source=source)
    assert not marker.exists()
