"""`render.names`: identifiers from torch provenance, unique per scope, never a keyword."""

from __future__ import annotations

import ast
import keyword

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxside.annotate.check import load_module
from jaxside.render.ir import Function, Statement
from jaxside.render.lower import lower
from jaxside.render.lower.rebinding import reuse_names
from jaxside.render.module import render_program
from jaxside.render.names import DERIVED, Scope, expression_name, function_name, identifier, snake
from jaxside.tracing import Capture, capture


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        ("Attention.forward", "attention_forward"),
        ("RMSNorm._norm", "rms_norm"),
        ("FeedForward.forward", "feed_forward"),
        ("Norm.norm", "norm"),
        ("KVCache.update", "kv_cache_update"),
        ("TransformerBlock.forward", "transformer_block_forward"),
        ("my_mathy_thing.<locals>.other_math", "other_math"),
        ("apply_rotary_emb", "apply_rotary_emb"),
        ("SmallCNN.forward", "small_cnn_forward"),
        ("SiLUActivation.forward", "silu_activation_forward"),
        ("ResNet.forward_features", "resnet_forward_features"),
    ],
)
def test_function_names_from_qualnames(qualname, expected):
    assert function_name(qualname) == expected


@pytest.mark.parametrize(
    ("camel", "expected"),
    [
        ("LlamaRMSNorm", "llama_rms_norm"),
        ("GPT2Attention", "gpt2_attention"),
        ("MLP", "mlp"),
        ("TransformerBlock", "transformer_block"),
        ("HTTPServer", "http_server"),
        ("SiLUActivation", "silu_activation"),
        ("Conv1D", "conv1d"),
        ("Conv2DTranspose", "conv2d_transpose"),
        ("ResNet", "resnet"),
        ("ConvNeXtBlock", "convnext_block"),
        ("MobileNetV3", "mobilenetv3"),
        ("GPTNeoXForCausalLM", "gpt_neox_for_causal_lm"),
        ("Qwen2RMSNorm", "qwen2_rms_norm"),
        ("KVCache", "kv_cache"),
        ("LayerNorm", "layer_norm"),
        ("MoE", "moe"),
        ("ReLU6", "relu6"),
        ("T5Block", "t5_block"),
        ("already_snake", "already_snake"),
        ("_Private", "_private"),
        ("größe", "größe"),
    ],
)
def test_class_names_split_as_people_write_them(camel, expected):
    assert snake(camel) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("self.w1(x)", "w1_x"),
        ("F.silu(self.w1(x))", "silu"),
        ("x_re * cos", "x_re_times_cos"),
        ("pairs[..., 0]", "pairs_0"),
        ("torch.mean(x * x, dim=-1, keepdim=True)", "mean"),
        ("rotated.flatten(-2)", "rotated_flatten"),
        ("self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)", "attention"),
        ("F.scaled_dot_product_attention(q, k, v, attn_mask=mask)", "sdpa"),
        ("self.freqs_cis[input_pos]", "freqs_cis_input_pos"),
        # a value is named for the whole operation it is, not for an operand's inner call
        ("F.silu(self.w1(x)) * self.w3(x)", "silu_times_w3"),
        ("self.act_fn(self.gate_proj(x)) * self.up_proj(x)", "act_fn_times_up_proj"),
        ("1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0)))", "tanh_plus_1"),
        ("a.sigmoid() * b.exp()", "sigmoid_times_exp"),
        ("q @ k.transpose(-2, -1)", "q_matmul_k"),  # a transpose is still `k`
        ("h + F.relu(self.fc2(h))", "h_plus_relu"),
        ("x * 0.5", "x"),  # a fraction is no word
        ("self.embed_tokens(input_ids) * self.embed_scale", "embed_tokens_input_ids"),  # too long: the left
        ("not valid python (", None),
        ("3 + 4", None),
        (None, None),
    ],
)
def test_temporaries_are_named_after_their_expression(text, expected):
    assert expression_name(text) == expected


def test_identifiers_are_valid_and_never_keywords():
    assert identifier("lambda") == "lambda_"
    assert identifier("match") == "match_"  # a soft keyword reads badly as a name too
    assert identifier("0.weight") == "value_0_weight"
    assert identifier("_silu") == "_silu"
    assert identifier("???") == "value"
    for word in keyword.kwlist:
        assert not keyword.iskeyword(identifier(word))


def test_rebinding_and_clashes_get_suffixes():
    module = Scope(reserved={"jnp"})
    module.fresh("attention_forward", "local")
    scope = Scope(outer=module)
    assert [scope.fresh("x", "local") for _ in range(3)] == ["x", "x_1", "x_2"]
    assert scope.fresh("attention_forward", "expression") == "attention_forward_out"  # never shadow a def
    assert scope.fresh("jnp", "local") == "jnp_1"
    assert scope.fresh("range", "loop") == "range_1"  # the generated code calls range itself
    assert scope.fresh("input", "argument") == "input"  # other builtins are fine locals
    assert scope.fresh("class", "local") == "class_"
    assert scope.fresh(None, "local") == "value" and scope.names["value"] == "fallback"


def test_temporaries_leave_torch_locals_their_names():
    scope = Scope(preferred={"topk_logits"})
    assert scope.fresh("topk_logits", "expression", temporary=True) == "topk_logits_1"
    assert scope.fresh("topk_logits", "local") == "topk_logits"


def test_every_source_but_fallback_counts_as_derived():
    assert "fallback" not in DERIVED
    assert {"local", "argument", "parameter", "expression", "loop"} <= DERIVED


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.proj(x))


class _Body(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wk = torch.nn.Linear(8, 8)
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        k = self.wk(x)
        k = k.view(x.shape[0], 2, 4)
        k = torch.tanh(k)
        residual = k
        k = k * 2.0
        k = k + residual
        h = k.reshape(x.shape)
        hidden = h
        for i, block in enumerate(self.blocks):  # noqa: B007  (as GPT-2 writes it)
            hidden = block(hidden)
        return {"hidden": hidden, "mean": hidden.mean(-1, keepdim=True)}


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = _Body()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: dict[str, torch.Tensor] = self.body(x)
        return self.head(outputs["hidden"]) + outputs["mean"]


def _exported_lines(
    model: torch.nn.Module, x: torch.Tensor, *, generic: bool = False, rtol: float = 1e-5
) -> list[str]:
    """The stripped lines of `model`'s export (shape-generic if asked), after checking that it
    computes what torch does under jit."""
    retrace = (lambda resize: Capture(resize=resize)(model, x)) if generic else None
    program = lower(capture(model, x), retrace)
    text = render_program(program, source="test")
    module = load_module(text)
    params = [module.load_params(model)] if program.takes_params else []
    got = jax.jit(module.forward)(*params, jnp.asarray(x.numpy()))
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(got), model(x).numpy(), rtol=rtol, atol=1e-6)
    return [line.strip() for line in text.splitlines()]


def test_exported_names_read_as_torch_wrote_them():
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(5, 8)
    lines = _exported_lines(model, x, generic=True)
    text = "\n".join(lines)
    # A typed assignment's name for a whole result, not the callee's.
    assert "outputs = body_forward(params[\"body\"], x)" in lines
    # `k` rebound: reused while the old value is dead, suffixed only while it is still needed.
    assert "k = jnp.reshape(k, (x.shape[0], 2, 4))" in lines and "k = jnp.tanh(k)" in lines
    assert "k_1 = k * 2.0" in lines and "k = k_1 + k" in lines
    assert "k_2" not in text
    # The loop: torch's element name, and the carry under its name inside the loop.
    assert lines[lines.index("hidden = h") + 1 :][:2] == [
        "for block in params[\"blocks\"]:",
        "hidden = block_forward(block, hidden)",
    ]


class _Gated(torch.nn.Module):
    """A loop over two lists, written with `enumerate` (`self.gates[i]`) or with `zip`."""

    def __init__(self, zipped: bool) -> None:
        super().__init__()
        self.zipped = zipped
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(3)])
        self.gates = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(8)) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.zipped:
            for block, gate in zip(self.blocks, self.gates):
                x = block(x) * gate
            return x
        for i, block in enumerate(self.blocks):
            x = block(x) * self.gates[i]
        return x


@pytest.mark.parametrize("zipped, loop", [
    (False, ['for i, block in enumerate(params["blocks"]):',
             'x = block_forward(block, x) * params["gates"][i]']),
    (True, ['for block, gate in zip(params["blocks"], params["gates"]):',
            "x = block_forward(block, x) * gate"]),
])
def test_a_loop_over_two_lists_reads_as_the_torch_loop(zipped, loop):
    """The call folded into an expression still anchors the loop; the lists are named (and the
    second indexed) as torch's loop has them."""
    torch.manual_seed(0)
    model, x = _Gated(zipped).eval(), torch.randn(5, 8)
    lines = _exported_lines(model, x)
    start = lines.index(loop[0])
    assert lines[start : start + 3] == [*loop, "return x"]


class _Staged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stage = torch.nn.Sequential(*(_Block() for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stage(x)
        return y * torch.sigmoid(y)


def test_a_loop_no_torch_loop_names_is_named_after_its_modules():
    """`nn.Sequential` runs the blocks in torch's own code: the element is named after their class
    (a private class's underscore dropped)."""
    torch.manual_seed(0)
    model, x = _Staged().eval(), torch.randn(2, 8)
    lines = _exported_lines(model, x)
    assert lines[lines.index('for block in params["stage"]:') + 1] == "x = block_forward(block, x)"


class _Rotary(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = x * 0.5
        cos = angles.cos()
        sin = angles.sin()
        return cos, sin


class _UsesPair(torch.nn.Module):
    """HF style: the tuple a submodule returns is passed on whole, under a name for the pair."""

    def __init__(self) -> None:
        super().__init__()
        self.rotary = _Rotary()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position_embeddings = self.rotary(x)
        return _rotate(x, position_embeddings)


def _rotate(x: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    cos, sin = position_embeddings
    return x * cos - x.flip(-1) * sin


def test_the_items_of_a_returned_tuple_take_the_names_it_was_returned_by():
    torch.manual_seed(0)
    model, x = _UsesPair().eval(), torch.randn(3, 4)
    lines = _exported_lines(model, x, rtol=1e-6)  # no weights: no params
    assert "cos, sin = rotary_forward(x)" in lines, "\n".join(lines)


def _straight_line(source: str, params: list[str], scope: Scope) -> Function:
    """A def of one statement per line of `source`, each target named by `scope.fresh`."""
    body = []
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign)
        body.append(Statement([node.targets[0].id], node.value, [], None))  # type: ignore[attr-defined]
    returns = body.pop().value
    return Function("f", [], params, body, returns, scope)


def test_a_rebound_name_is_reused_only_once_its_old_value_is_dead():
    module = Scope()
    module.fresh("helper", "local")
    scope = Scope(reserved={"x"}, outer=module)
    k, k_1, k_2, k_3, k_4 = (scope.fresh("k", "local") for _ in range(5))
    helper_1 = scope.fresh("helper", "expression")
    assert (k, k_4, helper_1) == ("k", "k_4", "helper_out")
    source = (
        f"{k} = x * 2.0\n"
        f"{k_1} = {k} + 1.0\n"  # k is dead after this line: k_1 becomes k
        f"{k_2} = {k_1} * {k_1}\n"  # the old k is still read below: k_2 becomes k_1
        f"{k_3} = {k_2} - {k_1}\n"  # both die here: k_3 becomes k
        f"{helper_1} = {k_3} + 1.0\n"  # never the module's `helper`
        f"{k_4} = {helper_1} * {k_3}\n"
        f"_ = {k_4}\n"
    )
    function = _straight_line(source, ["x"], scope)
    reuse_names(function)
    lines = [ast.unparse(s.node()) for s in function.body] + [ast.unparse(function.returns)]
    assert lines == [
        "k = x * 2.0",
        "k = k + 1.0",
        "k_1 = k * k",
        "k = k_1 - k",
        "helper_out = k + 1.0",
        "k = helper_out * k",
        "k",
    ]
    before, after = {"x": 3.0}, {"x": 3.0}
    exec(compile(source, "before", "exec"), {}, before)
    exec(compile("\n".join(lines[:-1]), "after", "exec"), {}, after)
    assert before[k_4] == after["k"]
