"""``python -m benchmarks.review_zoo`` (``make review-zoo``): published ports through annotate review.

transformers 4.x ships hand-written Flax ports of its torch models; transformers 5 dropped them, so
this runs in a venv of its own (``.venv-review-zoo``: transformers 4.57, flax, torch 2.13.0). For
each model, in a fresh process as a user would run it, on a tiny config:

- the Flax port as installed against the torch model, both at their default call (`return_dict`,
  torch's default sdpa attention), the weights given by transformers' own converter through
  ``--port-weights``: it must pass (exit 0) with no DIFFERS line and no first divergence;
- a copy of the Flax modeling file with one line edited: the first divergence must name that line.

Exit status 1 if a row fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 900


@dataclass(frozen=True)
class Published:
    torch_class: str
    config: str
    package: str
    """`gpt2`: transformers.models.<package>.modeling_flax_<package>."""
    flax_model: str
    flax_module: str
    edit: tuple[str, str]
    """A line of the Flax file (a unique part of it) and what the planted bug makes of it."""


MODELS = {
    "gpt2": Published(
        "GPT2LMHeadModel", "GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=32)",
        "gpt2", "FlaxGPT2LMHeadModel", "FlaxGPT2LMHeadModule",
        # The exact GELU where GPT-2 uses the tanh approximation.
        ("hidden_states = self.act(hidden_states)",
         "hidden_states = nn.gelu(hidden_states, approximate=False)")),
    "llama": Published(
        "LlamaForCausalLM", "LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, "
        "num_attention_heads=4, num_key_value_heads=2, vocab_size=64, max_position_embeddings=32)",
        "llama", "FlaxLlamaForCausalLM", "FlaxLlamaForCausalLMModule",
        # The rotary halves' signs swapped.
        ("(-tensor[..., tensor.shape[-1] // 2 :], tensor[..., : tensor.shape[-1] // 2])",
         "(tensor[..., tensor.shape[-1] // 2 :], -tensor[..., : tensor.shape[-1] // 2])")),
}

TORCH = """import torch
from transformers import {config_class}, {torch_class}

CONFIG = {config}


def example():
    torch.manual_seed(0)
    model = {torch_class}(CONFIG).eval()
    return model, (torch.randint(0, 64, (1, 8)),)
"""

PORT = """import flax.linen as nn
import jax.numpy as jnp
from transformers import {config_class}
from transformers.modeling_flax_pytorch_utils import convert_pytorch_state_dict_to_flax
from {module} import {flax_model}, {flax_module}

CONFIG = {config}


class Entry(nn.Module):
    \"\"\"The Flax module at its default call, given the mask and positions torch makes itself.\"\"\"

    @nn.compact
    def __call__(self, input_ids):
        mask = jnp.ones_like(input_ids)
        positions = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
        return {flax_module}(CONFIG, name="model")(input_ids, mask, positions)


def build():
    return Entry()


def load(port, state_dict):
    \"\"\"transformers' own converter, as a user of the port loads torch weights.\"\"\"
    module, _ = port
    params = convert_pytorch_state_dict_to_flax(state_dict, {flax_model}(CONFIG))
    return module, {{"params": {{"model": params}}}}
"""


def _review(torch_file: Path, port_file: Path) -> tuple[int, str, float]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jaxside", "review", str(torch_file), str(port_file), "--port-weights", "load",
         "-q"], capture_output=True, text=True, timeout=TIMEOUT, cwd=port_file.parent,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - start


def _edited_copy(model: Published, into: Path) -> tuple[str, int]:
    """The Flax modeling file copied beside the entry, its relative imports made absolute, one
    line edited: (module name, edited line)."""
    import importlib

    source = Path(importlib.import_module(_module(model)).__file__).read_text(encoding="utf-8")
    source = re.sub(r"^from \.\.\.", "from transformers.", source, flags=re.M)
    source = re.sub(r"^from \.", f"from transformers.models.{model.package}.", source, flags=re.M)
    good, bad = model.edit
    lines = source.splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if good in line]
    if len(hits) != 1:
        raise SystemExit(f"{model.package}: {good!r} is on {len(hits)} lines of the Flax file, not one")
    lines[hits[0]] = lines[hits[0]].replace(good, bad)
    name = f"modeling_flax_{model.package}_edited"
    (into / f"{name}.py").write_text("".join(lines), encoding="utf-8")
    return name, hits[0] + 1


def _module(model: Published) -> str:
    return f"transformers.models.{model.package}.modeling_flax_{model.package}"


def run(name: str, model: Published, work: Path) -> list[tuple[str, str, bool, float]]:
    """Rows: (what, verdict, ok, seconds)."""
    fields = {"config_class": model.config.partition("(")[0], "torch_class": model.torch_class,
              "config": model.config, "flax_model": model.flax_model, "flax_module": model.flax_module}
    torch_file = work / f"torch_{name}.py"
    torch_file.write_text(TORCH.format(**fields), encoding="utf-8")
    clean = work / f"port_{name}.py"
    clean.write_text(PORT.format(module=_module(model), **fields), encoding="utf-8")
    code, out, seconds = _review(torch_file, clean)
    passed = code == 0 and "DIFFERS" not in out and "first divergence" not in out
    rows = [(f"{name}: published port", f"exit {code}, DIFFERS {out.count('DIFFERS')}, first divergence "
             f"{'shown' if 'first divergence' in out else 'none'}", passed, seconds)]
    if not passed:
        print(out, file=sys.stderr)
    module, line = _edited_copy(model, work)
    edited = work / f"port_{name}_edited.py"
    edited.write_text(PORT.format(module=module, **fields), encoding="utf-8")
    code, out, seconds = _review(torch_file, edited)
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    named = f"{found.group(1)}:{found.group(2)}" if found else "nothing"
    passed = code == 1 and named == f"{module}.py:{line}"
    rows.append((f"{name}: one line edited ({module}.py:{line})", f"exit {code}, first divergence at {named}",
                 passed, seconds))
    if not passed:
        print(out, file=sys.stderr)
    return rows


def main(names: list[str]) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="review-zoo-") as tmp:
        for name in names or list(MODELS):
            rows += run(name, MODELS[name], Path(tmp))
    width = max(len(what) for what, *_ in rows)
    for what, verdict, ok, seconds in rows:
        print(f"{what:<{width}}  {verdict:<52} {seconds:6.1f} s  {'ok' if ok else 'FAILED'}")
    return 0 if all(ok for _, _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
