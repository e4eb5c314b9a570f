"""The zoo's models: tiny random-weight models from installed libraries, each as the file a user writes.

Each entry is the body of a model file's ``example()``: it builds the model from a small config
(no weights are downloaded: every weight is random) and returns it with its inputs, called as
people call it (transformers' language models with their default arguments: ``use_cache=True``,
``return_dict=True``). `SUBSET` is what `tests/test_zoo.py` runs.

timm imports torchvision, whose registry build does not load beside a CPU torch: `TIMM_PRELUDE`
puts a stand-in `torchvision` in front of the import system first (`benchmarks.zoo_shim`). The
timm models here use none of torchvision's code (it serves data loading and one frozen
batch-norm class).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    name: str
    library: str
    family: str
    body: str
    """The statements of ``example()``, indented by four spaces."""
    prelude: str = ""

    def source(self) -> str:
        return (
            f'"""Zoo model {self.name} ({self.library}, {self.family}): tiny, random weights."""\n\n'
            f"import torch\n{self.prelude}\n\ndef example():\n    torch.manual_seed(0)\n{self.body}"
        )


TIMM_PRELUDE = "import benchmarks.zoo_shim  # noqa: F401  (a stand-in torchvision)\nimport timm\n"

_TINY_LM = "vocab_size=64, hidden_size=32, num_hidden_layers=2, max_position_embeddings=64"
_IDS = "torch.randint(0, 64, (1, 8))"


def _causal_lm(name: str, config: str, cls: str, extra: str, family: str = "decoder-only") -> Model:
    body = (
        f"    from transformers import {config}, {cls}\n"
        f"    config = {config}({_TINY_LM}, {extra})\n"
        f"    model = {cls}(config).eval()\n"
        f"    return model, ({_IDS},)\n"
    )
    return Model(name, "transformers", family, body)


_HEADS = "num_attention_heads=4, num_key_value_heads=2, intermediate_size=64"
_PHI3 = _HEADS + ", partial_rotary_factor=0.5, pad_token_id=0"
_NEOX = "num_attention_heads=4, intermediate_size=64"
_OPT = "num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32"
_GEMMA2 = _HEADS + ", head_dim=8, sliding_window=4"

MODELS: list[Model] = [
    _causal_lm("llama", "LlamaConfig", "LlamaForCausalLM", _HEADS),
    _causal_lm("mistral", "MistralConfig", "MistralForCausalLM", _HEADS),
    _causal_lm("qwen2", "Qwen2Config", "Qwen2ForCausalLM", _HEADS),
    _causal_lm("qwen3", "Qwen3Config", "Qwen3ForCausalLM", _HEADS + ", head_dim=8"),
    _causal_lm("gemma", "GemmaConfig", "GemmaForCausalLM", _HEADS + ", head_dim=8"),
    _causal_lm("gemma2", "Gemma2Config", "Gemma2ForCausalLM", _GEMMA2),
    _causal_lm("phi3", "Phi3Config", "Phi3ForCausalLM", _PHI3),
    _causal_lm("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", _NEOX),
    _causal_lm("falcon", "FalconConfig", "FalconForCausalLM", "num_attention_heads=4"),
    _causal_lm("opt", "OPTConfig", "OPTForCausalLM", _OPT),
    Model("llama_tuple", "transformers", "decoder-only", (
        "    from transformers import LlamaConfig, LlamaForCausalLM\n"
        f"    config = LlamaConfig({_TINY_LM}, {_HEADS})\n"
        "    model = LlamaForCausalLM(config).eval()\n"
        f"    return model, ({_IDS},), dict(return_dict=False, use_cache=False)  # returns (logits,)\n"
    )),
    Model("llama_step", "transformers", "decoder-only, cache in", (
        "    from transformers import LlamaConfig, LlamaForCausalLM\n"
        f"    config = LlamaConfig({_TINY_LM}, {_HEADS})\n"
        "    model = LlamaForCausalLM(config).eval()\n"
        "    with torch.no_grad():\n"
        f"        cache = model({_IDS}).past_key_values  # the prompt's DynamicCache\n"
        "    return model, (torch.randint(0, 64, (1, 1)),), dict(past_key_values=cache)  # one decode step\n"
    )),
    Model("gpt2", "transformers", "decoder-only", (
        "    from transformers import GPT2Config, GPT2LMHeadModel\n"
        "    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)\n"
        f"    return GPT2LMHeadModel(config).eval(), ({_IDS},)\n"
    )),
    Model("mixtral", "transformers", "MoE", (
        "    from transformers import MixtralConfig, MixtralForCausalLM\n"
        f"    config = MixtralConfig({_TINY_LM}, {_HEADS}, num_local_experts=4, num_experts_per_tok=2)\n"
        "    model = MixtralForCausalLM(config).eval()\n"
        f"    return model, ({_IDS},)\n"
    )),
    _causal_lm("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", _HEADS + ", moe_intermediate_size=32, "
               "shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2", "MoE"),
    _causal_lm("olmoe", "OlmoeConfig", "OlmoeForCausalLM", _HEADS + ", num_experts=4, num_experts_per_tok=2",
               "MoE"),
    Model("mamba", "transformers", "state-space", (
        "    from transformers import MambaConfig, MambaForCausalLM\n"
        "    config = MambaConfig(vocab_size=64, hidden_size=32, state_size=8, num_hidden_layers=2)\n"
        f"    return MambaForCausalLM(config).eval(), ({_IDS},), dict(use_cache=False)\n"
    )),
    Model("bert", "transformers", "encoder", (
        "    from transformers import BertConfig, BertModel\n"
        "    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,\n"
        "                        intermediate_size=64, max_position_embeddings=64)\n"
        f"    return BertModel(config).eval(), ({_IDS}, torch.ones(1, 8, dtype=torch.long))\n"
    )),
    Model("bert_train", "transformers", "encoder, dropout", (
        "    from transformers import BertConfig, BertModel\n"
        "    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,\n"
        "                        intermediate_size=64, max_position_embeddings=64)\n"
        f"    return BertModel(config).train(), ({_IDS},)  # dropout draws from the export's key\n"
    )),
    Model("distilbert", "transformers", "encoder", (
        "    from transformers import DistilBertConfig, DistilBertModel\n"
        "    config = DistilBertConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, hidden_dim=64,\n"
        "                              max_position_embeddings=64)\n"
        f"    return DistilBertModel(config).eval(), ({_IDS},)\n"
    )),
    Model("t5", "transformers", "encoder-decoder", (
        "    from transformers import T5Config, T5ForConditionalGeneration\n"
        "    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,\n"
        "                      decoder_start_token_id=0)\n"
        "    model = T5ForConditionalGeneration(config).eval()\n"
        f"    return model, ({_IDS},), dict(decoder_input_ids=torch.randint(0, 64, (1, 4)))\n"
    )),
    Model("whisper", "transformers", "audio encoder-decoder", (
        "    from transformers import WhisperConfig, WhisperForConditionalGeneration\n"
        "    config = WhisperConfig(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2,\n"
        "                           encoder_attention_heads=4, decoder_attention_heads=4,\n"
        "                           encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,\n"
        "                           max_source_positions=16,\n"
        "                           max_target_positions=16, pad_token_id=0, decoder_start_token_id=1)\n"
        "    model = WhisperForConditionalGeneration(config).eval()\n"
        "    features = torch.randn(1, 16, 32)\n"
        "    return model, (features,), dict(decoder_input_ids=torch.randint(0, 64, (1, 4)))\n"
    )),
    Model("wav2vec2", "transformers", "audio", (
        "    from transformers import Wav2Vec2Config, Wav2Vec2Model\n"
        "    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,\n"
        "                            intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),\n"
        "                            conv_kernel=(10, 3), num_conv_pos_embeddings=16,\n"
        "                            num_conv_pos_embedding_groups=4)\n"
        "    return Wav2Vec2Model(config).eval(), (torch.randn(1, 400),)\n"
    )),
    Model("vit", "transformers", "vision", (
        "    from transformers import ViTConfig, ViTForImageClassification\n"
        "    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,\n"
        "                       intermediate_size=64, image_size=32, patch_size=8, num_labels=10)\n"
        "    return ViTForImageClassification(config).eval(), (torch.randn(1, 3, 32, 32),)\n"
    )),
    Model("resnet18", "timm", "CNN", (
        "    model = timm.create_model('resnet18', num_classes=10).eval()\n"
        "    return model, (torch.randn(1, 3, 32, 32),)\n"
    ), TIMM_PRELUDE),
    Model("convnext_atto", "timm", "CNN", (
        "    model = timm.create_model('convnext_atto', num_classes=10).eval()\n"
        "    return model, (torch.randn(1, 3, 32, 32),)\n"
    ), TIMM_PRELUDE),
    Model("mobilenetv3", "timm", "CNN", (
        "    model = timm.create_model('mobilenetv3_small_050', num_classes=10).eval()\n"
        "    return model, (torch.randn(1, 3, 32, 32),)\n"
    ), TIMM_PRELUDE),
    Model("timm_vit", "timm", "vision", (
        "    model = timm.create_model('vit_tiny_patch16_224', img_size=32, patch_size=8, depth=2,\n"
        "                              embed_dim=32, num_heads=4, num_classes=10).eval()\n"
        "    return model, (torch.randn(1, 3, 32, 32),)\n"
    ), TIMM_PRELUDE),
    Model("xt_decoder", "x-transformers", "decoder-only", (
        "    from x_transformers import Decoder, TransformerWrapper\n"
        "    model = TransformerWrapper(num_tokens=64, max_seq_len=64,\n"
        "                               attn_layers=Decoder(dim=32, depth=2, heads=4, rotary_pos_emb=True))\n"
        f"    return model.eval(), ({_IDS},)\n"
    )),
    Model("xt_encoder", "x-transformers", "encoder", (
        "    from x_transformers import Encoder, TransformerWrapper\n"
        "    model = TransformerWrapper(num_tokens=64, max_seq_len=64,\n"
        "                               attn_layers=Encoder(dim=32, depth=2, heads=4, ff_glu=True))\n"
        f"    return model.eval(), ({_IDS},)\n"
    )),
    Model("xt_vit", "x-transformers", "vision", (
        "    from x_transformers import Encoder, ViTransformerWrapper\n"
        "    model = ViTransformerWrapper(image_size=32, patch_size=8, num_classes=10,\n"
        "                                 attn_layers=Encoder(dim=32, depth=2, heads=4))\n"
        "    return model.eval(), (torch.randn(1, 3, 32, 32),)\n"
    )),
]

SUBSET = ["llama", "gpt2", "bert", "t5", "mixtral"]
