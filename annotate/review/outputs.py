"""The port's result against torch's, leaf by leaf, each named by its path as `--check` names them.

Any pytree either side returns counts (dicts, tuples, named tuples, flax struct dataclasses,
Hugging Face's `ModelOutput`): the traces name every leaf by its path (`['logits']`, `.logits`,
`[0]`). A torch leaf meets the port leaf whose path spells the same keys, else the next port leaf
of as many elements. A leaf the port does not return (the cache Hugging Face's torch models
return by default, which their Flax ports return only when asked) is not compared, unless no
leaf is: then, as for the state torch updates in place, some port value must equal it.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from jaxside.annotate.review.align import Constant, close, error
from jaxside.annotate.table import leaf_table

_KEY = re.compile(r"\[(?:'([^']*)'|\"([^\"]*)\"|(\d+))\]|\.(\w+)")


@dataclass
class Leaf:
    torch_path: str
    port_path: str | None
    """None when the port returns nothing for it: then `close` says whether any port value equals it."""
    shape: str
    error: float | None
    close: bool
    counts: bool = True
    """Whether it decides the verdict (a leaf the port does not return does not, see above)."""


def keys(path: str) -> tuple[str, ...]:
    """`['logits']`, `.logits` -> ('logits',); `[0].cache['k']` -> ('0', 'cache', 'k')."""
    return tuple(next(g for g in m.groups() if g is not None) for m in _KEY.finditer(path))


def _port_outputs(port: Any, module_port: bool) -> list[tuple[str, Any]]:
    """The port's returned leaves: for a module port (traced as `(output, new state)`), the output's."""
    found = []
    for path, var in port.outputs:
        if module_port:
            if not path.startswith("[0]"):
                continue
            path = path[3:]
        found.append((path, var))
    return found


def match_outputs(torch: Any, port: Any, module_port: bool) -> dict[Any, tuple[str, Any] | None]:
    """Each torch output leaf's var -> the port output leaf (path, var) it meets, or None."""
    free = [(path, var) for path, var in _port_outputs(port, module_port) if var in port.values]
    found: dict[Any, tuple[str, Any] | None] = {}
    for path, var in torch.outputs:
        if var not in torch.values:
            continue
        size, want = torch.values[var].size, keys(path)
        same = [item for item in free if keys(item[0]) == want and port.values[item[1]].size == size]
        named = [item for item in free if want and keys(item[0])[-1:] == want[-1:]
                 and port.values[item[1]].size == size]
        sized = [item for item in free if port.values[item[1]].size == size]
        found[var] = (same or named or sized or [None])[0]
        if found[var] is not None:
            free.remove(found[var])
    return found


def unreturned(matches: dict[Any, tuple[str, Any] | None]) -> set[Any]:
    """The torch output leaves not compared: those the port does not return, unless it returns none."""
    missing = {var for var, match in matches.items() if match is None}
    return missing if len(missing) < len(matches) else set()


def _computed(torch: Any, port: Any, alignment: Any, rtol: float, atol: float) -> dict[Any, bool]:
    """Torch value -> whether a port value equals it: its pair's verdict, or for a constant (no
    equation made it, so nothing was paired with it) whether a value the port made or returns does."""
    found = {pair.torch_var: pair.close for pair in alignment.pairs}
    theirs = [port.values[v] for v in [*port.checkpoints, *port.outvars] if v in port.values]
    for var in torch.outvars:
        if isinstance(var, Constant) and var in torch.values:
            value = torch.values[var]
            found[var] = any(t.size == value.size and t.dtype == value.dtype and close(value, t, rtol, atol)
                             for t in theirs)
    return found


def compare_outputs(torch: Any, port: Any, alignment: Any, rtol: float, atol: float,
                    matches: dict[Any, tuple[str, Any] | None], uncached: Collection[str] = ()) -> list[Leaf]:
    """Every torch output leaf and in-place state update against the port; an update of a cache
    the port does not keep (`uncached`, by torch name) is listed, not compared."""
    paired = _computed(torch, port, alignment, rtol, atol)
    ignored = unreturned(matches)
    result = []
    for path, var in torch.outputs:
        if var not in matches:
            continue
        value, match = torch.values[var], matches[var]
        shape = f"{value.dtype}{list(value.shape)}"
        if match is None:
            result.append(Leaf(path or "output", None, shape, None, paired.get(var, False),
                               counts=var not in ignored))
            continue
        got = port.values[match[1]]
        result.append(Leaf(path or "output", match[0] or "output", shape, error(value, got),
                           close(value, got, rtol, atol)))
    for update, var in torch.state:
        if var in torch.values:
            value = torch.values[var]
            result.append(Leaf(f"{update.input.name} (updated in place)", None,
                               f"{value.dtype}{list(value.shape)}", None, paired.get(var, False),
                               counts=update.input.name not in uncached))
    return result


def matched(leaves: list[Leaf]) -> bool:
    """Whether the outputs match: every leaf that counts is close."""
    return all(leaf.close for leaf in leaves if leaf.counts)


def lines(leaves: list[Leaf]) -> list[str]:
    """`outputs (torch <- port):` then a line per leaf, as `--check` prints them."""
    rows = []
    for leaf in leaves:
        verdict = "ok" if leaf.close else "MISMATCH"
        if leaf.port_path is None:
            how = "a value the port computed" if leaf.close else "no port value equals it"
            if not leaf.counts:
                kept = leaf.torch_path.endswith("(updated in place)")
                how = ("the port keeps no cache" if kept else "not returned by the port") + ": not compared"
                verdict = ""
            rows.append((leaf.torch_path, leaf.shape, f"{how}  {verdict}".rstrip()))
        else:
            rows.append((leaf.torch_path, leaf.shape,
                         f"<- {leaf.port_path}  max abs {leaf.error:.2e}  {verdict}"))
    return ["outputs (torch <- port):", *leaf_table(rows)]
