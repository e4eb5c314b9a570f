"""The Llama sample at benchmark sizes, and bare torchax tracing of it (the baseline of a capture)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "samples" / "llama_model.py"
SEQ = 16
"""Tokens per call: a short prefill, so tracing rather than tensor sizes sets the pace."""


def load_llama() -> ModuleType:
    """`samples/llama_model.py` as the module `llama_model` (once): a user file, not a library."""
    module = sys.modules.get("llama_model")
    if module is not None and getattr(module, "__file__", None) == str(LLAMA):
        return module
    spec = importlib.util.spec_from_file_location("llama_model", LLAMA)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_model"] = module
    spec.loader.exec_module(module)
    return module


def llama(layers: int, dim: int = 256, smoke: bool = False) -> tuple[Any, tuple[Any, Any]]:
    """A random-weight Llama with `layers` blocks of width `dim` (8 heads, 4 KV heads), and its inputs."""
    import torch

    llama_model = load_llama()
    if smoke:
        config = llama_model.ModelArgs.from_name("tiny")
        config.n_layer = layers
    else:
        config = llama_model.ModelArgs(
            block_size=256, vocab_size=4096, n_layer=layers, n_head=8, n_local_heads=4, dim=dim
        )
    torch.manual_seed(0)
    model = llama_model.Transformer(config)
    model.setup_caches(max_batch_size=1, max_seq_length=config.block_size)
    model.eval()
    seq = min(SEQ, config.block_size)
    tokens = torch.randint(0, config.vocab_size, (1, seq))
    return model, (tokens, torch.arange(seq))


def bare_function(model: Any, inner: Callable[[], AbstractContextManager[Any]] | None = None) -> Any:
    """`f(*state, *inputs)` tracing `model` through torchax with nothing of ours in the way.

    The state is swapped in with ``torch.func.functional_call``; `f` returns the output and
    the state it updated in place (the KV cache), as a capture does.
    A new `f` per call: `jax.make_jaxpr` caches traces per function. `inner()`, if given, is
    entered innermost, where a capture enters its frame recorder.
    """
    import torch

    from jaxside.tracing import _internals

    env = _internals.torchax.default_env()
    names = [name for name, _ in model.named_parameters()] + [name for name, _ in model.named_buffers()]

    def f(*values: Any) -> list[Any]:
        tensors = [_internals.wrap(value, env) for value in values]
        state = dict(zip(names, tensors))
        with contextlib.ExitStack() as stack:
            stack.enter_context(env)
            stack.enter_context(torch.device("jax"))
            if inner is not None:
                stack.enter_context(inner())
            out = torch.func.functional_call(model, state, tuple(tensors[len(names):]))
        jax_value = _internals.jax_value
        return [jax_value(out), *(jax_value(t) for t, v in zip(tensors, values) if jax_value(t) is not v)]

    return f


def jax_inputs(model: Any, inputs: tuple[Any, ...]) -> list[Any]:
    """The state and inputs as JAX arrays, converted the way a capture converts them."""
    from jaxside.tracing import _internals

    tensors = [t for _, t in model.named_parameters()] + [t for _, t in model.named_buffers()]
    return [_internals.to_jax_array(t) for t in [*tensors, *inputs]]


def bare_make_jaxpr(model: Any, inputs: tuple[Any, ...]) -> Any:
    """Bare torchax tracing, inputs converted included: what a capture costs without jaxside."""
    import jax

    return jax.make_jaxpr(bare_function(model))(*jax_inputs(model, inputs))
