"""User code for the plain Python row: a Llama-shaped model over `toy_library` arrays."""

from __future__ import annotations

from typing import Any

from benchmarks.toy_library import Array


def rms_norm(x: Array, weight: Array) -> Array:
    variance = (x * x).mean(-1)
    normed = x * variance.rsqrt()
    return normed * weight


def rotate(x: Array, cos: Array, sin: Array) -> Array:
    rotated = x * cos + x.transpose().transpose() * sin
    return rotated


def attention(x: Array, p: dict[str, Array], cos: Array, sin: Array) -> Array:
    q = x @ p["wq"]
    k = x @ p["wk"]
    v = x @ p["wv"]
    q = rotate(q, cos, sin)
    k = rotate(k, cos, sin)
    scores = (q @ k.transpose()) * p["scale"]
    weights = scores.softmax()
    out = weights @ v
    return out @ p["wo"]


def feed_forward(x: Array, p: dict[str, Array]) -> Array:
    gate = (x @ p["w1"]).silu()
    up = x @ p["w3"]
    return (gate * up) @ p["w2"]


def block(x: Array, p: dict[str, Array], cos: Array, sin: Array) -> Array:
    h = x + attention(rms_norm(x, p["attention_norm"]), p, cos, sin)
    out = h + feed_forward(rms_norm(h, p["ffn_norm"]), p)
    return out


def model(tokens: Array, params: dict[str, Any]) -> Array:
    x = params["embed"].take(tokens)
    cos, sin = params["cos"], params["sin"]
    for layer in params["layers"]:
        x = block(x, layer, cos, sin)
    return rms_norm(x, params["norm"]) @ params["output"]


def build(layers: int, dim: int = 256, seq: int = 16, vocab: int = 4096) -> tuple[Array, dict[str, Any]]:
    """Inputs and parameters (shapes only: the library traces, it never computes)."""
    hidden = 3 * dim

    def layer() -> dict[str, Array]:
        return {
            "wq": Array((dim, dim)), "wk": Array((dim, dim)), "wv": Array((dim, dim)),
            "wo": Array((dim, dim)), "scale": Array(()), "attention_norm": Array((dim,)),
            "w1": Array((dim, hidden)), "w3": Array((dim, hidden)), "w2": Array((hidden, dim)),
            "ffn_norm": Array((dim,)),
        }

    params = {
        "embed": Array((vocab, dim)), "cos": Array((seq, dim)), "sin": Array((seq, dim)),
        "layers": [layer() for _ in range(layers)], "norm": Array((dim,)), "output": Array((dim, vocab)),
    }
    return Array((seq,), "int32"), params
