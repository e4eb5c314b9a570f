"""`annotate review` of jaxside's own export as the port (export, edit by hand, keep it honest): every
torch line that made JAX paired with the export's lines, none differing. The exports are the goldens,
which tests/test_golden.py keeps equal to what `--export` writes; the function port's weights are found
by running it on stand-ins, which must get through `jnp.take`, `lax.conv_general_dilated` and `lax`
primitives given a weight itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from review_rows import assert_every_line_paired

from jaxside.annotate.cli import main
from jaxside.annotate.review.probing import discover

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("sample", [
    "llama_model",  # jnp.take(params["tok_embeddings"]["weight"], idx, axis=0); state threaded through
    "cnn",  # lax.conv_general_dilated(x, params["conv1"]["weight"], ...)
    "seed_example",  # a torch function: the export's entry keeps its name, my_mathy_thing
])
def test_a_samples_export_reviews_clean_against_its_torch_file(sample, capsys):
    export = ROOT / "tests" / "golden" / "export" / f"{sample}.py"
    code = main(["review", str(ROOT / "samples" / f"{sample}.py"), str(export)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert_every_line_paired(out, at_least=4)
    assert "outputs match" in out and "first divergence" not in out


def test_stand_ins_learn_leaves_that_lax_primitives_and_jitted_functions_are_given():
    state = {
        "embed.weight": jnp.arange(12.0).reshape(4, 3),
        "proj.weight": jnp.ones((3, 2)),
        "proj.bias": jnp.full((2,), 0.5),
        "layers.0.scale": jnp.ones(()),
        "layers.1.scale": jnp.full((), 2.0),
    }

    def port(params, idx):
        h = jnp.take(params["embed"]["weight"], idx, axis=0)  # jitted: the stand-in is a pytree
        h = jax.lax.dot_general(h, params["proj"]["weight"], (((1,), (0,)), ((), ())))  # refused, run again
        h = jnp.asarray(params["proj"]["bias"]) + h  # refused, run again
        for layer in params["layers"]:
            h = h * layer["scale"]  # an operator: forwarded
        return h

    probes, mapping = discover(port, list(state), state, ["params"], (jnp.array([0, 3]),))
    assert mapping.unmapped_port == [] and mapping.unused_torch == []
    assert mapping.pairs == {
        "params['embed']['weight']": "embed.weight",
        "params['proj']['weight']": "proj.weight",
        "params['proj']['bias']": "proj.bias",
        "params['layers'][0]['scale']": "layers.0.scale",
        "params['layers'][1]['scale']": "layers.1.scale",
    }
    params = probes[0].build(lambda path: state[mapping.pairs[path]])
    got = port(params, jnp.array([0, 3]))
    want = (state["embed.weight"][jnp.array([0, 3])] @ state["proj.weight"] + 0.5) * 2.0
    np.testing.assert_allclose(np.asarray(got), np.asarray(want))


def test_a_port_error_that_is_not_about_a_stand_in_is_the_ports():
    state = {"w.weight": jnp.ones((3, 2))}

    def port(params, x):
        return x @ params["w"]["weight"].T  # (2, 3) @ (2, 3): the port's own mistake

    with pytest.raises(TypeError, match="dot_general requires contracting dimensions"):
        discover(port, list(state), state, ["params"], (jnp.ones((2, 3)),))


def test_stand_ins_iterate_each_list_by_its_own_length_one_item_at_a_time():
    """vit-pytorch's layout: `layers` holds lists of (attention, feed-forward), `embed` is a longer
    Sequential, and a weight JAX refuses (`jnp.asarray`) comes inside the loop's first item. Each list
    is as long as the torch list most like it (was: the longest in the state_dict, so `layers[2]`,
    which no torch weight resembles), and an item is made only when the loop reaches it (was: all
    made first, so the second, unindexed when the first item's body was refused, counted as a leaf)."""
    state = {
        **{f"embed.{i}.weight": jnp.full((2,), float(i)) for i in range(4)},
        **{f"layers.{i}.{j}.weight": jnp.full((2,), float(10 * i + j)) for i in range(2) for j in range(2)},
    }

    def port(params, h):
        for weights in params["embed"]:
            h = h + weights["weight"]
        for item in params["layers"]:
            h = jnp.asarray(item[0]["weight"]) * h  # refused: run again with it a leaf
            h = h + item[1]["weight"]
        return h

    probes, mapping = discover(port, list(state), state, ["params"], (jnp.ones(2),))
    assert mapping.unmapped_port == [] and mapping.unused_torch == []
    assert mapping.pairs["params['layers'][1][0]['weight']"] == "layers.1.0.weight"
    assert len(mapping.pairs) == 8


_TABLE_MODEL = '''
import torch
from torch import nn


class Rotary(nn.Module):
    """gpt-fast's way: the table a plain tensor attribute set after building, no buffer."""

    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.freqs = None

    def setup(self, length):
        self.freqs = torch.linspace(0.5, 1.5, length)[:, None]

    def forward(self, x):
        return self.proj(x) * self.freqs[torch.arange(0, x.shape[1], dtype=torch.long)]


def example():
    torch.manual_seed(0)
    model = Rotary(4).eval()
    model.setup(8)
    return model, (torch.randn(1, 5, 4),)
'''


def test_a_plain_tensor_attribute_is_a_weight_of_the_review(tmp_path):
    model = tmp_path / "rotary.py"
    model.write_text(_TABLE_MODEL)
    port = tmp_path / "port.py"
    assert main([str(model), "--export", "-o", str(port), "-q"]) == 0
    # in a process of its own, as a user runs it: JAX warns once per process
    done = subprocess.run([sys.executable, "-m", "jaxside", "review", str(model), str(port)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, out + err  # was 2: freqs is not in the module's state_dict
    assert "outputs match" in out and "weights: 3 mapped" in out
    # JAX's own warning on torch's int64 arange is said in our words at the line, as annotate says it
    assert "UserWarning" not in err
    assert f"{model.name}:18: torch.arange asks for int64, which JAX computes as int32" in err
