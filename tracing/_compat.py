"""Import torchax on a torch that removed the named-tensor overloads it still names.

torch 2.13 removed named tensors, and with them every ATen overload that takes a
``Dimname`` (``aten.prod.dim_Dimname``, ``aten.std.names_dim``, ...).  torchax 0.0.13
still spells some of them out at import time (a cast-policy table in ``torchax.amp``
and a decomposition list in ``torchax.decompositions``), so ``import torchax`` raises
``AttributeError``.  Upstream fixed this after 0.0.13 (google/torchax#102).

The fix here is scoped in three ways: it is tried only after a plain import has
failed with exactly that error; while it is active, only a *missing* overload whose
name marks it as a named-tensor one resolves, to an inert placeholder that equals no
real operator; and it is undone as soon as torchax's modules have loaded.  A torchax
that imports cleanly never sees it.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
from collections.abc import Iterator
from types import ModuleType

# Overload names torch used for named-tensor variants: dim_Dimname, Dimname_Scalar,
# dimname, names_dim, correction_names, names_ScalarOpt_dim, ...
_NAMED_OVERLOAD = re.compile(r"dimname|(^|_)names(_|$)", re.IGNORECASE)

# torchax modules that spell out overloads at import time; Environment imports the
# last two lazily, so they are imported here while the shim is active.
_TORCHAX_MODULES = ("torchax", "torchax.amp", "torchax.decompositions", "torchax.ops.jaten")

shim_applied = False
"""True once this process needed the shim to import torchax."""


class RemovedOverload:
    """Stands for an overload the installed torch no longer has; matches no operator."""

    def __init__(self, packet: object, name: str) -> None:
        self.qualified_name = f"{packet}.{name}"

    def __repr__(self) -> str:
        return f"<removed overload {self.qualified_name}>"


def is_removed_named_overload_error(error: BaseException) -> bool:
    """Whether `error` is torch refusing a named-tensor overload that no longer exists."""
    match = re.search(r"has no overload name '([^']*)'", str(error))
    return isinstance(error, AttributeError) and match is not None and bool(
        _NAMED_OVERLOAD.search(match.group(1))
    )


@contextlib.contextmanager
def named_overloads_as_placeholders() -> Iterator[None]:
    """While active, a missing named-tensor overload resolves to a `RemovedOverload`."""
    from torch._ops import OpOverloadPacket

    original = OpOverloadPacket.__getattr__

    def getattr_or_placeholder(packet: OpOverloadPacket, name: str) -> object:
        try:
            return original(packet, name)
        except AttributeError as error:
            if is_removed_named_overload_error(error):
                return RemovedOverload(packet, name)
            raise

    attribute = "__getattr__"  # torch's class patched for the block: what this shim is for
    setattr(OpOverloadPacket, attribute, getattr_or_placeholder)
    try:
        yield
    finally:
        setattr(OpOverloadPacket, attribute, original)


def import_torchax() -> ModuleType:
    """Import torchax, through the shim only if the plain import fails for this reason."""
    global shim_applied
    try:
        for name in _TORCHAX_MODULES:
            importlib.import_module(name)
    except AttributeError as error:
        if not is_removed_named_overload_error(error):
            raise
        _forget_partial_import()
        with named_overloads_as_placeholders():
            for name in _TORCHAX_MODULES:
                importlib.import_module(name)
        shim_applied = True
    return sys.modules["torchax"]


def _forget_partial_import() -> None:
    """Drop the torchax modules a failed import left half-initialised."""
    for name in [m for m in sys.modules if m == "torchax" or m.startswith("torchax.")]:
        del sys.modules[name]
