"""`annotate review` of Flax NNX, Flax Linen and Equinox ports: the torch weights are fitted to the
port's own leaves (kernels transposed, the fused `wqkv` split), each correct Llama port passes, and
each planted bug (one line of the correct port edited) is named at that line."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from jaxside.annotate.cli import main
from jaxside.annotate.installed import pip_install
from jaxside.annotate.review.fit import Leaf, fit, given_recipe, layout

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
PORTS = {"nnx": ("flax", "llama_nnx.py"), "linen": ("flax", "llama_linen.py"),
         "equinox": ("equinox", "llama_equinox.py")}
EPS = ("x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.{})",
       "x32 / (jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)) + self.{})")
# (port, bug) -> (text of the correct line, what the bug makes of it)
BUGS = {
    ("nnx", "transpose"): ("return self.o_proj(out)", "return out @ self.o_proj.kernel[...].T"),
    ("nnx", "eps"): tuple(t.format("eps") for t in EPS),
    ("nnx", "rope"): ("[even * cos - odd * sin, odd * cos + even * sin]",
                      "[odd * cos + even * sin, even * cos - odd * sin]"),
    ("linen", "transpose"): ('"bsh,he->bse"', '"bsh,eh->bse"'),
    ("linen", "eps"): tuple(t.format("epsilon") for t in EPS),
    ("linen", "rope"): ("[first * cos - second * sin, second * cos + first * sin]",
                        "[second * cos + first * sin, first * cos - second * sin]"),
    ("equinox", "transpose"): ("out @ self.wo.weight.T", "out @ self.wo.weight"),
    ("equinox", "eps"): tuple(t.format("eps") for t in EPS),
    ("equinox", "rope"): ("[real * cos - imag * sin, imag * cos + real * sin]",
                          "[imag * cos + real * sin, real * cos - imag * sin]"),
}


def _needs(port: str) -> Path:
    """The port's sample; its framework is part of the test extra, so neither missing is a skip."""
    importlib.import_module(PORTS[port][0])
    path = SAMPLES / PORTS[port][1]
    assert path.is_file(), f"missing sample {path}"
    return path


def _review(port: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["review", str(SAMPLES / "llama_model.py"), str(port), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("port", sorted(PORTS))
def test_correct_port_passes(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _review(_needs(port), capsys)
    assert code == 0, out + err
    assert "outputs match" in out
    assert "first divergence" not in out and "DIFFERS" not in out
    assert "6 split from 2 fused tensors" in out  # both layers' wqkv into q, k and v


@pytest.mark.parametrize(("port", "bug"), sorted(BUGS))
def test_planted_bug_is_named_at_its_line(port: str, bug: str, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    source = _needs(port)
    good, bad = BUGS[(port, bug)]
    lines = source.read_text().splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if good in line]
    assert len(hits) == 1, hits
    lines[hits[0]] = lines[hits[0]].replace(good, bad)
    broken = tmp_path / source.name
    broken.write_text("".join(lines))
    code, out, err = _review(broken, capsys)
    assert code == 1, out + err
    assert "outputs DIVERGE" in out
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    assert found, out
    assert (found.group(1), int(found.group(2))) == (source.name, hits[0] + 1), out


@pytest.mark.parametrize("port", sorted(PORTS))
def test_fitted_weights_give_torch_logits(port: str) -> None:
    """The fit alone, without review's tracing: the port on torch's weights computes torch's logits."""
    source = _needs(port)
    import jax.numpy as jnp
    import torch

    from jaxside.annotate.loading import load_file
    from jaxside.annotate.review.frameworks import module_port

    model, (idx, pos) = load_file(str(SAMPLES / "llama_model.py")).example()
    with torch.no_grad():
        expected = model(idx, pos).numpy()
    state = {name: jnp.asarray(t.numpy()) for name, t in model.state_dict().items()}
    data = (jnp.asarray(idx.numpy()), jnp.asarray(pos.numpy()))
    ported = module_port(load_file(str(source)).build(), data)
    fitted = fit(ported.leaves, {name: tuple(v.shape) for name, v in state.items()})
    assert not fitted.unmapped
    dtypes = {leaf.path: leaf.dtype for leaf in ported.leaves}
    values = {path: r.build(state, dtypes[path]) for path, r in fitted.recipes.items()}
    logits, _ = ported.call(values, data)
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-4, atol=1e-5)


def _leaf(path: str, *shape: int) -> Leaf:
    return Leaf(path, shape, np.float32, True)


def test_kernel_layouts_follow_the_shapes() -> None:
    assert layout(_leaf("a.kernel", 64, 4, 16), (64, 64)) == "kernel"  # DenseGeneral (in, heads, hd)
    assert layout(_leaf("a.kernel", 4, 16, 64), (64, 64)) == "kernel"  # out projection (heads, hd, out)
    assert layout(_leaf("a.kernel", 3, 3, 8, 16), (16, 8, 3, 3)) == "conv"
    assert layout(_leaf("a.kernel", 64, 32), (64, 32)) is None  # a kernel is never torch's layout
    assert layout(_leaf("a.weight", 64, 32), (64, 32)) == "same"
    assert layout(_leaf("a.w", 32, 64), (64, 32)) == "transpose"


def test_fused_tensor_splits_in_the_order_its_name_spells() -> None:
    leaves = [_leaf(f"layers.0.attn.{p}.kernel", 64, n) for p, n in (("v_proj", 32), ("q_proj", 64),
                                                                         ("k_proj", 32))]
    result = fit(leaves, {"layers.0.attention.wqkv.weight": (128, 64)})
    rows = {path.split(".")[3]: r.rows for path, r in result.recipes.items()}
    assert rows == {"q_proj": (0, 64), "k_proj": (64, 96), "v_proj": (96, 128)}
    assert not result.unmapped and not result.unused
    # Nothing says which 32 rows are which when the fused name does not spell the parts.
    assert fit(leaves, {"layers.0.attention.c_attn.weight": (128, 64)}).unmapped


def test_fused_leaf_stacks_sibling_tensors_in_the_order_its_name_spells() -> None:
    shapes = {f"layers.0.self_attn.{p}.weight": (n, 64) for p, n in (("v_proj", 32), ("k_proj", 32),
                                                                       ("q_proj", 64))}
    result = fit([_leaf("layers.0.attn.qkv_proj.kernel", 64, 128)], shapes)
    recipe = result.recipes["layers.0.attn.qkv_proj.kernel"]
    assert [name.split(".")[3] for name in recipe.sources] == ["q_proj", "k_proj", "v_proj"]
    state = {name: np.full(shape, float(i), np.float32) for i, (name, shape) in enumerate(shapes.items())}
    kernel = np.asarray(recipe.build(state, np.float32))
    assert kernel.shape == (64, 128) and list(kernel[0, [0, 64, 96]]) == [2.0, 1.0, 0.0]
    assert not result.unused


def test_given_recipes_win_and_the_rest_is_fitted() -> None:
    leaves = [_leaf("a.w", 4, 4), _leaf("head.weight", 8, 4)]
    shapes = {"a.weight": (4, 4), "head.weight": (8, 4)}
    result = fit(leaves, shapes, {"a.w": given_recipe(leaves[0], "a.weight.T", shapes)})
    assert result.recipes["a.w"].layout == "kernel"  # square: only the map can say it is transposed
    assert result.recipes["head.weight"].layout == "same"
    assert not result.unmapped and not result.unused


def test_split_recipe_takes_the_rows_then_transposes() -> None:
    weight = np.arange(12.0, dtype=np.float32).reshape(6, 2)
    recipe = given_recipe(_leaf("k.kernel", 2, 2), "w[2:4]", {"w": (6, 2)})
    np.testing.assert_array_equal(np.asarray(recipe.build({"w": weight}, np.float32)), weight[2:4].T)
    assert "does not fit" in given_recipe(_leaf("k.kernel", 2, 3), "w[2:4]", {"w": (6, 2)})


def test_params_map_names_a_leaf_of_the_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "map.py"
    bad.write_text("PARAMS_MAP = {'no.such.leaf': 'output.weight'}\n")
    code, out, err = _review(_needs("equinox"), capsys, "--params-map", str(bad), "-q")  # -q: errors only
    assert code == 2
    assert err.strip().splitlines() == [f"error: {bad}: PARAMS_MAP names no.such.leaf, which is not a leaf "
                                        "of the port; use a dotted path such as embedding.weight"]


def test_missing_framework_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    port = tmp_path / "port.py"
    port.write_text('"""A port."""\nimport equinox.not_installed_here\n')
    code, out, err = _review(port, capsys, "-q")
    assert code == 2
    hint = pip_install("review")  # as this jaxside was installed (tests/test_installed.py)
    assert err.strip().splitlines() == [f"error: {port}:2: needs equinox, which is not installed; "
                                        f"{hint} (or equinox)"]


def test_port_without_an_entry_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    port = tmp_path / "port.py"
    port.write_text("SIZE = 3\n")
    code, out, err = _review(port, capsys, "-q")
    assert code == 2
    assert err.strip().splitlines() == [f"error: {port}: defines no forward (a function), build (returning "
                                        "a module) or Transformer; name the port's function, module or "
                                        "factory with --port-entry"]


def test_missing_port_is_named_as_the_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    port = tmp_path / "port.py"  # never written
    code, out, err = _review(port, capsys, "-q")
    assert code == 2
    assert err.strip().splitlines() == [
        f"error: {port}: no such file; give the path of the JAX port's .py file"]
