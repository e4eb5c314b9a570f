"""Torch tensors the port does not take as weights, each with the reason the review can prove.

The port's weights are mapped from torch's `state_dict`; what is left over is not always a port
that forgot something:

- a **tied** tensor (nanoGPT's `lm_head.weight` is `transformer.wte.weight`) is one input of the
  torch trace: a port reading either name reads it;
- a **cache** torch updates in place (a KV cache) that no value the port returns can hold (one it
  holds but returns as it came, never written, counts as none): the port keeps no cache, as a
  one-shot forward need not, so the update is not compared (and the
  torch lines computing it or from it have no port values, for that reason alone);
- a **buffer** (not a parameter: a causal mask, a rotary table) from which torch computes values
  the port computes too, equal: the port makes it itself (`jnp.tril(...)`) or holds its own;
- a tensor torch's own program does not read (transformers' `original_inv_freq`) is no omission:
  not reported;
- anything else the port does not read, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Unread", "classify", "line_reasons", "tied_names"]


@dataclass
class Unread:
    tied: dict[str, str] = field(default_factory=dict)
    """Unread name -> the name tied to it (the same tensor) that the port reads."""
    uncached: list[str] = field(default_factory=list)
    """Torch state updated in place that the port keeps no counterpart of."""
    unwritten: list[str] = field(default_factory=list)
    """Of those, the ones the port reads (holds) but never writes."""
    made: list[str] = field(default_factory=list)
    """Torch buffers the port does not read but whose results it computes, equal."""
    unread: list[str] = field(default_factory=list)
    """The rest: torch tensors the port does not read."""
    later: list[str] = field(default_factory=list)
    """Buffers the port does not read whose every use in torch comes after the first divergence:
    whether the port makes them itself cannot be told."""
    reasons: dict[Any, str] = field(default_factory=dict)
    """Torch value computed from an uncached or made tensor -> `no cache` / `the port makes NAME`."""

    def text(self) -> str:
        """The weights line's tail: `; torch weights the port does not read: ...` and the like."""
        words = []
        if self.unread:
            words.append(f"torch weights the port does not read: {', '.join(self.unread)}")
        if self.later:
            words.append("torch buffers the port does not read, used only after the first divergence (so "
                         f"whether the port makes them itself is not known): {', '.join(self.later)}")
        if self.made:
            words.append(f"torch buffers the port holds or makes itself (what torch computes "
                         f"from them, the port computes equal): {', '.join(self.made)}")
        if self.tied:
            words.append("tied: " + ", ".join(f"{name} is {alias}, which the port reads"
                                              for name, alias in self.tied.items()))
        return "".join(f"; {word}" for word in words)

    def cache_line(self) -> str | None:
        """Said once: the port keeps no cache, so torch's in-place updates are not compared."""
        if not self.uncached:
            return None
        if self.unwritten == self.uncached:
            start, held = "the port holds caches it never writes", ""
        else:
            start = "the port keeps no cache"
            held = f"; it reads {', '.join(self.unwritten)} but never writes them" if self.unwritten else ""
        return (f"{start} (a one-shot forward needs none{held}): torch's "
                f"{', '.join(self.uncached)} (updated in place) are not compared, nor the torch lines "
                "marked (no cache)")


def tied_names(model: Any) -> dict[str, list[str]]:
    """Every tensor name of a torch module -> all its names (itself first among them: tied
    weights, one tensor under several names); {} for a function."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return {}
    groups: dict[int, list[str]] = {}
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    for name, tensor in named:
        groups.setdefault(id(tensor), []).append(name)
    return {name: names for names in groups.values() for name in names}


def classify(torch: Any, port: Any, alignment: Any, unused: list[str],
             aliases: dict[str, list[str]], outputs: set[Any]) -> Unread:
    """Sort the torch tensors the port does not read (`unused`) by what the two programs show;
    `outputs`: the port results that meet torch's (none of them can be a cache)."""
    result = Unread()
    unused_set = set(unused)
    by_name: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    for item in torch.trace.inputs:
        if item.kind != "arg":
            for name in aliases.get(item.name, [item.name]):
                by_name[name], kinds[name] = item.var, item.kind
    pairs = {pair.torch_var: pair for pair in alignment.pairs}
    used = frozenset().union(*(torch.ancestors.get(v, frozenset()) for v in torch.outvars))
    rest = []
    for name in unused:
        if by_name.get(name) not in used:
            continue  # torch's program does not read it either (transformers' `original_inv_freq`)
        read = [alias for alias in aliases.get(name, []) if alias != name and alias not in unused_set]
        if read:
            result.tied[name] = read[0]
        else:
            rest.append(name)
    # A cache the port holds but never writes comes back as it went in: kept no more than none.
    unwritten = set(port.trace.jaxpr.jaxpr.invars)
    returned = [port.values[v] for v in port.outvars if v in port.values and v not in outputs
                and v not in unwritten]
    for update, var in torch.state:
        if var not in torch.values or (var in pairs and pairs[var].close):
            continue
        value = torch.values[var]
        if not any(v.size == value.size and v.dtype == value.dtype for v in returned):
            result.uncached.append(update.input.name)
            if update.input.name not in unused_set:
                result.unwritten.append(update.input.name)
            source = by_name.get(update.input.name)
            for name in aliases.get(update.input.name, [update.input.name]):
                if name in rest:
                    rest.remove(name)
            _mark(result.reasons, torch, alignment, {source, var} - {None}, "no cache")
    order = {pair.torch_var: i for i, pair in enumerate(alignment.pairs)}
    first = order.get(alignment.first.torch_var) if alignment.first is not None else None
    made: dict[Any, str] = {}
    for name in rest:
        var = by_name.get(name)
        uses = [pair for pair in alignment.pairs if var in torch.ancestors.get(pair.torch_var, ())]
        if var is None or kinds.get(name) == "param" or not uses:
            result.unread.append(name)
        elif any(pair.close and pair.port_var is not None for pair in uses):
            result.made.append(name)
            made[var] = name
        elif first is not None and all(order[pair.torch_var] > first for pair in uses):
            result.later.append(name)
        else:
            result.unread.append(name)
    weights = frozenset(item.var for item in torch.trace.inputs if item.kind != "arg") - set(made)
    for var, name in made.items():
        _mark(result.reasons, torch, alignment, {var}, f"the port makes {name}", weights)
    return result


def _mark(reasons: dict[Any, str], torch: Any, alignment: Any, sources: set[Any], why: str,
          others: frozenset[Any] = frozenset()) -> None:
    """Give the torch values without a port partner that come of `sources` the reason `why`: those
    that reach a source going back through values without a partner (a value after a partnered
    one that differs has no partner for that reason, not this one), and none of `others` (a
    weight: BERT's token type embedding, gathered by the position ids, is a value of its own)."""
    partnered = {pair.torch_var for pair in alignment.pairs if pair.port_var is not None}
    eqns = torch.trace.jaxpr.jaxpr.eqns
    for pair in alignment.pairs:
        if pair.port_var is not None or pair.torch_var in reasons:
            continue
        stack, seen, found = [pair.torch_var], {pair.torch_var}, False
        while stack:
            var = stack.pop()
            if var in others:
                found = False
                break
            if var in sources:
                found = True
                continue
            index = torch.producer.get(var)
            if index is None:
                continue
            for read in eqns[index].invars:
                if hasattr(read, "aval") and not hasattr(read, "val") and read not in seen \
                        and read not in partnered:
                    seen.add(read)
                    stack.append(read)
        if found:
            reasons[pair.torch_var] = why


def line_reasons(torch: Any, alignment: Any, unread: Unread | None,
                 site_of: Any) -> dict[tuple[str, int], str]:
    """Torch line -> why it has no port value, when every value of it without one has that reason."""
    if unread is None:
        return {}
    found: dict[tuple[str, int], set[str | None]] = {}
    for pair in alignment.pairs:
        site = site_of(torch, pair.torch_var)
        if site is not None and pair.port_var is None:
            found.setdefault((site.file, site.line), set()).add(unread.reasons.get(pair.torch_var))
    return {line: next(iter(why)) for line, why in found.items() if len(why) == 1 and None not in why}
