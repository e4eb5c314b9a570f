"""`annotate review` of one-shot ports of a model with a tied head, a boolean causal mask buffer and a
zeroed KV cache written in place (tests/ports/tied_cached.py, in nanoGPT's and gpt-fast's style).
What the port does not read is reported for what it is: the head tied to the embedding is read
through it, a mask the port makes (`jnp.tril`) or holds (an NNX variable) is no omission, a port
that keeps no cache says so once and its outputs still match, while a port that keeps one is held
to it and a port that forgets the mask is told so, at the line where it diverges."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest
import torch
from review_rows import line_number, review

PORTS = Path(__file__).resolve().parent / "ports"
TORCH = PORTS / "tied_cached.py"
TIED = "tied: lm_head.weight is wte.weight, which the port reads"
MADE = re.compile(r"torch buffers the port holds or makes itself \([^)]*\): causal_mask(;|$)", re.M)
NO_CACHE = "the port keeps no cache (a one-shot forward needs none)"


def _line(path: Path, text: str) -> int:
    return line_number(path.read_text().splitlines(), text)


def _review(port: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    return review(TORCH, port, capsys, *extra)


def _weights(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("weights:"))


@pytest.mark.parametrize("port", ["tied_cached_port.py", "tied_cached_nnx.py"])
def test_a_one_shot_port_reads_everything_it_needs(port: str, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    if port.endswith("nnx.py"):
        pytest.importorskip("flax")
    page = tmp_path / "review.html"
    code, out = _review(PORTS / port, capsys, "--html", str(page))
    assert code == 0, out
    weights = _weights(out)
    assert TIED in weights and MADE.search(weights), out
    assert "does not read" not in out and "original_mask" not in out, out  # torch never reads that one
    # The cache: said once, its in-place updates listed, not compared; the lines writing it marked.
    assert out.count(NO_CACHE) == 1, out
    assert len(re.findall(r"\(updated in place\)\s+float32\[1, 2, 12, 8\]  the port keeps no cache: "
                          r"not compared$", out, re.M)) == 4, out
    for text in ("self.k_cache[:, :, pos] = k", "self.v_cache[:, :, pos] = v"):
        row = rf"^tied_cached\.py:{_line(TORCH, text)}\s+-\s+unmatched  \(no cache\)$"
        assert re.search(row, out, re.M), out
    assert "first divergence" not in out and "DIFFERS" not in out and "outputs match" in out, out
    assert page.read_text(encoding="utf-8").count("unmatched (no cache)") == 4  # the page says so too


def test_a_port_keeping_the_cache_is_held_to_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Its helpers are imported from tied_cached_port, found beside it (the directory review puts first
    # on sys.path): never one imported before from elsewhere, as an edited copy of another test's.
    sys.modules.pop("tied_cached_port", None)
    code, out = _review(PORTS / "tied_cached_kv.py", capsys)
    assert code == 0, out
    assert NO_CACHE not in out and "(no cache)" not in out and TIED in _weights(out), out
    kept = re.findall(r"\(updated in place\)\s+float32\[.*\]  a value the port computed  ok$", out, re.M)
    assert len(kept) == 4, out
    # The keys' cache written with the values: no longer a cache the port does not keep.
    port = tmp_path / "tied_cached_kv.py"
    shutil.copy(PORTS / "tied_cached_port.py", tmp_path)  # its helpers
    source = (PORTS / "tied_cached_kv.py").read_text()
    port.write_text(source.replace(".at[:, :, pos].set(k)", ".at[:, :, pos].set(v)"))
    sys.modules.pop("tied_cached_port", None)
    code, out = _review(port, capsys)
    assert code == 1, out
    assert NO_CACHE not in out, out
    assert re.search(r"^  h\.0\.attn\.k_cache \(updated in place\)\s+float32\[.*\]  no port value "
                     r"equals it  MISMATCH$",
                     out, re.M), out
    # Nothing lines up and differs (the port's keys come of other values): the first torch value
    # it has no counterpart for is named, the keys' cache write.
    write = _line(TORCH, "self.k_cache[:, :, pos] = k")
    named = rf"^first divergence: no port value lines up.*\n  torch tied_cached\.py:{write} "
    assert re.search(named, out, re.M), out


@pytest.mark.parametrize(("bug", "text", "edit"), [
    ("mask", "    att = jnp.where(jnp.tril(", "    pass  # "),
    ("scale", "att = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(C // HEADS)",
     "att = q @ k.transpose(0, 1, 3, 2)"),
])
def test_a_port_missing_a_step_diverges_after_its_last_equal_value(
        bug: str, text: str, edit: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = (PORTS / "tied_cached_port.py").read_text()
    assert source.count(text) == 1
    port = tmp_path / "tied_cached_port.py"
    port.write_text(source.replace(text, edit))
    code, out = _review(port, capsys)
    assert code == 1, out
    # The port has no value of torch's masked, scaled scores (its keys are its own 6, torch's cache
    # 12): the first divergence is the attention's output, after the port's last equal value, the
    # heads split; the step missing lies between them.
    torch_line = _line(TORCH, "y = F.softmax(att, dim=-1) @ self.v_cache")
    port_line = _line(PORTS / "tied_cached_port.py", "y = jax.nn.softmax(att, axis=-1) @ v")
    heads = _line(PORTS / "tied_cached_port.py", "q, k, v = (t.reshape(B, T, HEADS")
    found = re.search(r"^first divergence:\n  torch (\S+) .*\n  port  (\S+) .*\n  max error .*\n"
                      r"  after the port's last equal value: (\S+) ", out, re.M)
    assert found is not None, out
    assert found.groups() == (f"tied_cached.py:{torch_line}", f"tied_cached_port.py:{port_line}",
                              f"tied_cached_port.py:{heads}"), out
    weights = _weights(out)
    if bug == "mask":  # forgotten: the port's attention differs where torch's mask is first used
        assert "torch weights the port does not read: causal_mask" in weights, out
    assert TIED in weights and "outputs DIVERGE" in out, out


def test_a_buffer_used_only_after_the_first_divergence_is_not_judged(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    pytest.importorskip("flax")
    source = (PORTS / "tied_cached_nnx.py").read_text()
    port = tmp_path / "tied_cached_nnx.py"
    port.write_text(source.replace("epsilon=1e-5, ", ""))  # Flax's default epsilon, 1e-6: torch has 1e-5
    code, out = _review(port, capsys)
    assert code == 1, out
    weights = _weights(out)
    assert re.search(r"torch buffers the port does not read, used only after the first divergence \(so "
                     r"whether the port makes them itself is not known\): causal_mask(;|$)", weights), out
    assert "torch weights the port does not read" not in weights and not MADE.search(weights), out
    norm = _line(TORCH, "x = x + self.attn(self.ln_1(x), mask, pos)")
    assert re.search(rf"^first divergence:\n  torch tied_cached\.py:{norm} `self\.ln_1\(x\)`", out, re.M), out


def test_a_port_holding_a_cache_it_never_writes_keeps_none(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    """Zeroed caches the port holds (mapped from torch's) and reads, but computes nothing from: no
    value is equal 'by their grace' (the port never used them), and they count as no cache."""
    pytest.importorskip("flax")
    source = (PORTS / "tied_cached_nnx.py").read_text()
    caches = ("        self.k_cache = nnx.Cache(jnp.zeros((1, HEADS, MAX, DIM // HEADS)))\n"
              "        self.v_cache = nnx.Cache(jnp.zeros((1, HEADS, MAX, DIM // HEADS)))\n")
    mask = "        self.mask = nnx.Variable("
    held = source.replace(mask, caches + mask).replace(
        "        B, T, C = x.shape\n", "        B, T, C = x.shape\n"
        "        assert self.k_cache[...].shape[2] >= T and self.v_cache[...].shape[2] >= T\n")
    assert held.count("self.k_cache") == 2
    port = tmp_path / "tied_cached_nnx.py"
    port.write_text(held)
    code, out = _review(port, capsys)
    assert code == 0, out
    assert re.search(r"^weights: 31 mapped into a Flax NNX GPT", out, re.M), out  # the caches among them
    assert out.count("the port holds caches it never writes (a one-shot forward needs none): torch's "
                     "h.0.attn.k_cache,") == 1, out
    assert "DIFFERS" not in out and "MISMATCH" not in out and "first divergence" not in out, out
    assert MADE.search(_weights(out)) and TIED in _weights(out), out


class _TokenTypes(torch.nn.Module):
    """BERT's embeddings, cut down: the token type embedding's first row added to every token, the
    type ids a buffer of zeros (transformers' `token_type_ids`)."""

    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(10, 4)
        self.token_type_embeddings = torch.nn.Embedding(2, 4)
        self.register_buffer("token_type_ids", torch.zeros(1, 6, dtype=torch.long), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        types = self.token_type_ids[:, : idx.shape[1]].expand(idx.shape[0], -1)
        return torch.tanh(self.word_embeddings(idx) + self.token_type_embeddings(types))


def _token_types_port(params, idx):
    # An int index on a weight is a row of it, not an item of a list of layers.
    return jnp.tanh(params["word_embeddings"]["weight"][idx] + params["token_type_embeddings"]["weight"][0])


def test_an_int_index_on_a_weight_is_a_row_of_it() -> None:
    import jaxside

    torch.manual_seed(0)
    report = jaxside.review(_TokenTypes().eval(), _token_types_port, torch.randint(0, 10, (2, 5)))
    assert report.ok, report.text()
    assert report.weights == {"params['word_embeddings']['weight']": "word_embeddings.weight",
                              "params['token_type_embeddings']['weight']": "token_type_embeddings.weight"}
    weights = next(line for line in report.text().splitlines() if line.startswith("weights:"))
    assert weights.endswith("the port computes equal): token_type_ids"), weights
