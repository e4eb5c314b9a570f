"""`render.names`: identifiers from torch provenance, unique per scope, never a keyword."""

from __future__ import annotations

import keyword

import pytest

from jaxside.render.names import DERIVED, Scope, expression_name, function_name, identifier, snake


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        ("Attention.forward", "attention_forward"),
        ("RMSNorm._norm", "rms_norm_norm"),
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
    assert scope.fresh("attention_forward", "expression") == "attention_forward_1"  # never shadow a def
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
