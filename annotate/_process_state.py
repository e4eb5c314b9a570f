"""The interpreter's process-wide settings a user file may change, saved and put back after an
in-process `annotate.cli.main()` (torch's are in `_torch_state`).

Covered: warning filters, logging levels (the root's, each existing logger's, `logging.disable`),
the recursion limit, environment variables, the SIGTERM handler, and the jax flags a model file
sets (`jax_enable_x64`, the default matmul precision, dtype and rank promotion, NaN/inf
debugging, `jax_disable_jit`). When jax was first imported during the run, its flags go back to
what a fresh import gives: their defaults, or the `JAX_...` environment variable that sets one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import warnings
from dataclasses import dataclass
from typing import Any

_JAX_FLAGS: dict[str, Any] = {
    "jax_enable_x64": False,
    "jax_default_matmul_precision": None,
    "jax_numpy_dtype_promotion": "standard",
    "jax_numpy_rank_promotion": "allow",
    "jax_debug_nans": False,
    "jax_debug_infs": False,
    "jax_disable_jit": False,
}
_TRUE = ("y", "yes", "t", "true", "on", "1")


@dataclass
class State:
    filters: list[Any]
    logging_levels: dict[str, int]
    logging_disable: int
    recursion_limit: int
    environ: dict[str, str]
    sigterm: Any
    jax_flags: dict[str, Any] | None


def save() -> State:
    manager = logging.root.manager
    loggers = {name: lg.level for name, lg in manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    return State(
        filters=list(warnings.filters),
        logging_levels={"": logging.root.level, **loggers},
        logging_disable=manager.disable,
        recursion_limit=sys.getrecursionlimit(),
        environ=dict(os.environ),
        sigterm=signal.getsignal(signal.SIGTERM),
        jax_flags=_jax_flags(),
    )


def restore(state: State) -> None:
    warnings.filters[:] = state.filters
    mutated = getattr(warnings, "_filters_mutated", None)  # the module's cache of them (to 3.13)
    if mutated is not None:
        mutated()
    for name, level in state.logging_levels.items():
        logging.getLogger(name or None).setLevel(level)
    logging.disable(state.logging_disable)
    sys.setrecursionlimit(state.recursion_limit)
    for name in [n for n in os.environ if n not in state.environ]:
        del os.environ[name]
    os.environ.update({k: v for k, v in state.environ.items() if os.environ.get(k) != v})
    with contextlib.suppress(ValueError, TypeError, OSError):  # not the main thread; a C handler
        if signal.getsignal(signal.SIGTERM) is not state.sigterm and state.sigterm is not None:
            signal.signal(signal.SIGTERM, state.sigterm)
    _restore_jax(state.jax_flags)


def _jax_flags() -> dict[str, Any] | None:
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is None:
        return None
    return {name: getattr(config, name) for name in _JAX_FLAGS if hasattr(config, name)}


def _restore_jax(saved: dict[str, Any] | None) -> None:
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is None:
        return
    wanted = saved if saved is not None else {name: _jax_default(name) for name in _JAX_FLAGS}
    for name, value in wanted.items():
        with contextlib.suppress(AttributeError, ValueError, TypeError):
            if getattr(config, name) != value:
                config.update(name, value)


def _jax_default(name: str) -> Any:
    given = os.environ.get(name.upper())
    default = _JAX_FLAGS[name]
    if given is None:
        return default
    return given.lower() in _TRUE if isinstance(default, bool) else given
