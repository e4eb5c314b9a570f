"""Map torch `state_dict` tensors onto a hand port's parameter pytree by path similarity."""

from __future__ import annotations

import re
from collections import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jaxside.annotate.errors import Failure

# Words ports and torch models use for the same thing; each group is one token after normalising.
_SYNONYMS = [
    {"attn", "attention", "self_attn", "self_attention"},
    {"mlp", "ffn", "feed_forward", "feedforward"},
    {"embed", "embedding", "embeddings", "tok_embeddings", "wte", "embed_tokens", "token_embedder"},
    {"lm_head", "output", "head", "unembed", "logits_dense"},
    {"blocks", "layers", "layer", "h"},
    {"k", "k_cache", "keys", "cached_key", "cache_k"},
    {"v", "v_cache", "values", "cached_value", "cache_v"},
    # Projections: gpt-fast / Meta names, Hugging Face names, Flax (MaxText) names.
    {"wq", "q_proj", "query"},
    {"wk", "k_proj", "key"},
    {"wv", "v_proj", "value"},
    {"wo", "o_proj", "out_proj", "out"},
    {"w1", "gate_proj", "wi_0"},
    {"w3", "up_proj", "wi_1"},
    {"w2", "down_proj"},
    {"rope", "freqs_cis", "rotary", "rotary_emb"},
    {"final_norm", "norm", "ln_f", "decoder_norm"},
    {"attn_norm", "attention_norm", "input_layernorm", "ln_1", "pre_self_attention_layer_norm"},
    {"mlp_norm", "ffn_norm", "post_attention_layernorm", "ln_2", "post_self_attention_layer_norm"},
]
_CANON = {word: min(group) for group in _SYNONYMS for word in group}
ROLES = set(_CANON.values())
"""The normalised words that name a known role (`q_proj` for `wq`, `query`, ...)."""
_NOISE = {"weight", "kv_cache", "params", "caches", "cache", "kernel", "scale"}


@dataclass
class Mapping:
    """Port leaf path (`params['blocks'][0]['attn']['wqkv']`) -> torch state_dict name; for a module
    port, how the leaf is made (`layers.0.attention.wqkv.weight[0:64].T as [64, 4, 16]`)."""

    pairs: dict[str, str] = field(default_factory=dict)
    unmapped_port: list[str] = field(default_factory=list)
    unused_torch: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)
    """Name of a port trace input -> the torch tensor it was given (or made from)."""
    note: str = ""
    """What the report adds about how the weights were mapped."""
    module_port: bool = False
    """The port is a module, traced as `(output, new state)`."""
    checked: list[str] = field(default_factory=list)
    """With `--port-weights`: the report's lines on the loader's leaves against the mapping."""
    unread: Any = None
    """`review.unread.Unread`: why each torch tensor the port does not read is left (set after aligning)."""


def tokens(path: str) -> list[str]:
    """Normalised words of a path: synonyms folded, `weight` and cache wrappers dropped."""
    words = [w.lower() for w in re.split(r"[./\[\]'\"]+", path) if w]
    result = []
    for word in words:
        if word in _NOISE:
            continue
        # Flax Linen numbers its submodules `layers_0`: the index is a word of its own.
        numbered = re.fullmatch(r"(\w*[a-z])_(\d+)", word) if word not in _CANON else None
        parts = [numbered.group(1), numbered.group(2)] if numbered else [word]
        result += [_CANON.get(part, part) for part in parts]
    return result


def similarity(port: str, torch_name: str) -> float:
    """How alike two paths are: shared words, with numbers (layer indices) required to agree."""
    a, b = tokens(port), tokens(torch_name)
    if [w for w in a if w.isdigit()] != [w for w in b if w.isdigit()]:
        return 0.0
    words_a, words_b = {w for w in a if not w.isdigit()}, {w for w in b if not w.isdigit()}
    if not words_a or not words_b:
        return 0.0
    shared = len(words_a & words_b)
    # The last word (what the leaf is) counts double: `wqkv` must meet `wqkv`.
    last = 1.0 if a and b and a[-1] == b[-1] else 0.0
    return (shared + last) / (len(words_a | words_b) + 1)


def best_match(port: str, names: list[str], taken: set[str]) -> str | None:
    scored = [(similarity(port, n), n) for n in names if n not in taken]
    scored = [s for s in scored if s[0] > 0]
    return max(scored)[1] if scored else None


def assign(port_paths: list[str], state: dict[str, Any]) -> Mapping:
    """One-to-one: the most alike (port, torch) pairs first."""
    scores = sorted(
        ((similarity(p, n), p, n) for p in port_paths for n in state), key=lambda s: -s[0]
    )
    mapping = Mapping()
    taken: set[str] = set()
    for score, port, name in scores:
        if score <= 0 or port in mapping.pairs or name in taken:
            continue
        mapping.pairs[port] = name
        taken.add(name)
    mapping.unmapped_port = [p for p in port_paths if p not in mapping.pairs]
    mapping.unused_torch = [n for n in state if n not in taken]
    return mapping


def read_params_map(path: str | abc.Mapping[str, str | None]) -> dict[str, str | None]:
    """The `PARAMS_MAP` a port file defines: {port leaf path: torch state_dict name} (given as a
    dict from Python: the dict). None keeps a module port's own value (a table it computes)."""
    if not isinstance(path, str):
        if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in path.items()):
            raise Failure("params_map is no dict of strings", "give {port leaf path: state_dict name}")
        return dict(path)
    namespace: dict[str, Any] = {"__file__": path}
    exec(compile(Path(path).read_text(encoding="utf-8"), path, "exec"), namespace)
    given = namespace.get("PARAMS_MAP")
    if not isinstance(given, dict) or not all(v is None or isinstance(v, str) for v in given.values()):
        raise Failure("defines no dict PARAMS_MAP of strings",
                      "write PARAMS_MAP = {port leaf path: state_dict name}", file=path)
    return dict(given)
