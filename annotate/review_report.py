"""The review's text report: per torch line the port lines and error, the first divergence, the unpaired."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np


def site_of(side: Any, var: Any) -> Any:
    index = side.producer.get(var)
    return side.trace.eqn_sites[index] if index is not None else None


def _where(site: Any) -> str:
    if site is None:
        return "?"
    text = " ".join((site.text or "").split())
    return f"{Path(site.file).name}:{site.line} `{text[:70]}`"


def rows(torch: Any, port: Any, alignment: Any) -> dict[int, tuple[set[int], float | None, bool, bool]]:
    """Torch line -> (port lines, max error, all close, has a counterpart)."""
    table: dict[int, tuple[set[int], float | None, bool, bool]] = {}
    for pair in alignment.pairs:
        site = site_of(torch, pair.torch_var)
        if site is None:
            continue
        lines, err, ok, seen = table.get(site.line, (set(), None, True, False))
        if pair.port_var is not None:
            port_site = site_of(port, pair.port_var)
            if port_site is not None:
                lines.add(port_site.line)
            err = _worst(err, pair.error)
            seen = True
            ok = ok and pair.close
        table[site.line] = (lines, err, ok, seen)
    return dict(sorted(table.items()))


def _worst(*errors: float | None) -> float:
    """The largest error; NaN (one side NaN, the other not) above every number."""
    found = [e for e in errors if e is not None] or [0.0]
    return float("nan") if any(e != e for e in found) else max(found)


def _numbers(value: np.ndarray) -> str:
    flat = value.reshape(-1)[:4]
    return "[" + ", ".join(f"{x:.6g}" for x in flat) + (", ...]" if value.size > 4 else "]")


def text(options: argparse.Namespace, torch: Any, port: Any, alignment: Any, mapping: Any,
         outputs_close: bool) -> str:
    out = [f"review: {options.file} ({torch.trace.entry}) against {options.port} ({port.trace.entry}), "
           f"rtol {options.rtol:g} atol {options.atol:g}",
           f"weights: {len(mapping.pairs)} mapped{mapping.note}" + (
               f"; torch weights the port does not read: {', '.join(mapping.unused_torch)}"
               if mapping.unused_torch else ""),
           "", f"{'torch line':<24}{'port lines':<32}{'max error':>10}"]
    torch_name, port_name = Path(options.file).name, Path(options.port).name
    for line, (lines, err, ok, seen) in rows(torch, port, alignment).items():
        where = f"{port_name}:{','.join(str(n) for n in sorted(lines))}" if lines else "-"
        shown = f"{err:.3g}" if err is not None else "unmatched"
        mark = "" if not seen else ("  ok" if ok else "  DIFFERS")
        out.append(f"{torch_name + ':' + str(line):<24}{where:<32}{shown:>10}{mark}")
    out.append("")
    first = alignment.first
    if first is not None:
        t, p = torch.values[first.torch_var], port.values[first.port_var]
        out += ["first divergence:",
                f"  torch {_where(site_of(torch, first.torch_var))}  {t.dtype}{list(t.shape)}  {_numbers(t)}",
                f"  port  {_where(site_of(port, first.port_var))}  {p.dtype}{list(p.shape)}  {_numbers(p)}",
                f"  max error {first.error:.3g}", ""]
    lost = sorted({site_of(port, v).line for v in alignment.unmatched_port if site_of(port, v) is not None})
    if lost:
        out.append(f"port lines with values torch never computed: {', '.join(map(str, lost))}")
    if not outputs_close:
        out += ["weights as mapped (port <- torch; --params-map overrides):"]
        out += [f"  {port} <- {source}" for port, source in mapping.pairs.items()]
    out.append("outputs match" if outputs_close else "outputs DIVERGE")
    return "\n".join(out) + "\n"

