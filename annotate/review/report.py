"""The review's text report: per torch line the port lines and error, the first divergence, the unpaired."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from jaxside.annotate.options import ReviewOptions


def site_of(side: Any, var: Any) -> Any:
    index = side.producer.get(var)
    return side.trace.eqn_sites[index] if index is not None else None


Line = tuple[str, int]
"""A source line: (file, line number)."""


def labels(files: list[str]) -> dict[str, str]:
    """How to show each file: its name, or as much of its path as tells it from the others."""
    parts = {f: Path(f).parts for f in files}
    shown = {}
    for file, path in parts.items():
        depth = 1
        while depth < len(path) and any(other != file and o[-depth:] == path[-depth:]
                                         for other, o in parts.items()):
            depth += 1
        shown[file] = "/".join(path[-depth:])
    return shown


def _where(site: Any, label: dict[str, str]) -> str:
    if site is None:
        return "?"
    text = " ".join((site.text or "").split())
    return f"{label.get(site.file, Path(site.file).name)}:{site.line} `{text[:70]}`"


def rows(torch: Any, port: Any, alignment: Any) -> dict[Line, tuple[set[Line], float | None, bool, bool]]:
    """Torch line -> (port lines, max error, all close, has a counterpart)."""
    table: dict[Line, tuple[set[Line], float | None, bool, bool]] = {}
    for pair in alignment.pairs:
        site = site_of(torch, pair.torch_var)
        if site is None:
            continue
        key = (site.file, site.line)
        lines, err, ok, seen = table.get(key, (set(), None, True, False))
        if pair.port_var is not None:
            port_site = site_of(port, pair.port_var)
            if port_site is not None:
                lines.add((port_site.file, port_site.line))
            err = _worst(err, pair.error)
            seen = True
            ok = ok and pair.close
        table[key] = (lines, err, ok, seen)
    return dict(sorted(table.items(), key=lambda item: _order(torch, item[0])))


def _order(side: Any, line: Line) -> tuple[int, str, int]:
    """Files in the order the program reached them, lines in order within each."""
    files = side_files(side)
    return (files.index(line[0]) if line[0] in files else len(files), line[0], line[1])


def side_files(side: Any, main: str | None = None) -> list[str]:
    """The files a side's values come from: `main` (the file named on the command line) first,
    then the others in the order the program reached them."""
    found = {str(Path(main).resolve()): None} if main else {}
    for site in side.trace.eqn_sites:
        if site is not None:
            found.setdefault(site.file, None)
    return list(found)


def grouped(lines: set[Line] | list[Line], label: dict[str, str], sep: str = ",") -> str:
    """`layers.py:12,13 model.py:4`: line numbers after their file's name, files in first-seen order."""
    by_file: dict[str, list[int]] = {}
    for file, line in sorted(lines, key=lambda x: (x[0], x[1])):
        by_file.setdefault(file, []).append(line)
    return " ".join(f"{label.get(f, Path(f).name)}:{sep.join(map(str, ns))}" for f, ns in by_file.items())


def error_text(error: float) -> str:
    """An error as the report and the page both write it: three significant digits (`2.11`, `4.77e-07`)."""
    return f"{error:.3g}"


def _worst(*errors: float | None) -> float:
    """The largest error; NaN (one side NaN, the other not) above every number."""
    found = [e for e in errors if e is not None] or [0.0]
    return float("nan") if any(e != e for e in found) else max(found)


def _numbers(value: np.ndarray) -> str:
    flat = value.reshape(-1)[:4]
    return "[" + ", ".join(f"{x:.6g}" for x in flat) + (", ...]" if value.size > 4 else "]")


Words = list[tuple[str, Any]]
"""A sentence as (text, site) pieces: a site where the text names a port line (the page links it)."""


def agreed_until(torch: Any, port: Any, alignment: Any, torch_label: dict[str, str],
                 port_label: dict[str, str]) -> Words:
    """The last port value the first divergent one is computed from that equals a torch value:
    the bug is in the port's lines after it, up to the divergent one (a missing step, such as an
    attention scale torch folds into its fused call, has no port value of its own to name). When
    the divergent value itself equals an earlier torch value, the port skipped torch's steps from
    that one (the scores it masks unscaled): said so. Empty when no port value before it agrees."""
    first = alignment.first
    partners = {pair.port_var: pair.torch_var for pair in alignment.pairs
                if pair.close and pair.port_var is not None}
    if first.port_var in partners:
        return [("the port's value equals torch's earlier ", None),
                (_where(site_of(torch, partners[first.port_var]), torch_label), None),
                (": torch's steps from that one to this are missing in the port", None)]
    order = {var: i for i, var in enumerate(port.checkpoints)}
    agreed = [var for var in port.ancestors.get(first.port_var, ()) if var in partners and var in order]
    if not agreed:
        return []
    last = max(agreed, key=order.__getitem__)
    site = site_of(port, last)
    return [("after the port's last equal value: ", None), (_where(site, port_label), site),
            (f" = torch {_where(site_of(torch, partners[last]), torch_label)}", None)]


def _unpartnered(torch: Any, alignment: Any, unread: Any, torch_label: dict[str, str]) -> list[str]:
    """Outputs that diverge with no value that lines up and differs (the port computes the value
    from other inputs than torch's, a cache written with the wrong tensor): the first torch value
    the port has no counterpart for, with no other reason (no cache) to have none."""
    reasons = unread.reasons if unread is not None else {}
    pair = next((p for p in alignment.pairs if p.port_var is None and p.torch_var not in reasons), None)
    if pair is None:
        return []
    value = torch.values[pair.torch_var]
    return ["first divergence: no port value lines up with a differing torch value; the first torch value "
            "the port has no counterpart for:",
            f"  torch {_where(site_of(torch, pair.torch_var), torch_label)}  "
            f"{value.dtype}{list(value.shape)}  {_numbers(value)}", ""]


def text(options: ReviewOptions, torch: Any, port: Any, alignment: Any, mapping: Any,
         leaves: list[Any]) -> str:
    from jaxside.annotate.review.outputs import lines as output_lines
    from jaxside.annotate.review.outputs import matched
    from jaxside.annotate.review.unread import line_reasons

    outputs_close = matched(leaves)
    unread = mapping.unread
    torch_file = options.source.file
    out = [f"review: {torch_file} ({torch.trace.entry}) against {options.port} ({port.trace.entry}), "
           f"rtol {options.rtol:g} atol {options.atol:g}",
           f"weights: {len(mapping.pairs)} mapped{mapping.note}" + (
               unread.text() if unread is not None else "; torch weights the port does not read: "
               + ", ".join(mapping.unused_torch) if mapping.unused_torch else ""),
           *mapping.checked, "", f"{'torch line':<24}{'port lines':<32}{'max error':>10}"]
    torch_label = labels(side_files(torch, torch_file))
    port_label = labels(side_files(port, options.port))
    why = line_reasons(torch, alignment, unread, site_of)
    for (file, line), (lines, err, ok, seen) in rows(torch, port, alignment).items():
        where = grouped(lines, port_label) if lines else "-"
        shown = error_text(err) if err is not None else "unmatched"
        mark = ("" if (file, line) not in why else f"  ({why[(file, line)]})") if not seen else (
            "  ok" if ok else "  DIFFERS")
        name = f"{torch_label.get(file, Path(file).name)}:{line}"
        out.append(f"{name:<24}{where:<32}{shown:>10}{mark}".replace(f"{name}{where}", f"{name} {where}"))
    cache = unread.cache_line() if unread is not None else None
    out += ["", *([cache] if cache else [])]
    first = alignment.first
    if first is not None:
        t, p = torch.values[first.torch_var], port.values[first.port_var]
        out += ["first divergence:",
                f"  torch {_where(site_of(torch, first.torch_var), torch_label)}  {t.dtype}{list(t.shape)}  "
                f"{_numbers(t)}",
                f"  port  {_where(site_of(port, first.port_var), port_label)}  {p.dtype}{list(p.shape)}  "
                f"{_numbers(p)}",
                f"  max error {error_text(first.error)}"]
        words = agreed_until(torch, port, alignment, torch_label, port_label)
        out += ["  " + "".join(text for text, _ in words)] if words else []
        out.append("")
    elif not outputs_close:
        out += _unpartnered(torch, alignment, unread, torch_label)
    lost = {(site.file, site.line) for site in (site_of(port, v) for v in alignment.unmatched_port)
            if site is not None}
    if lost:
        out.append(f"port lines with values torch never computed: {grouped(lost, port_label, ', ')}")
    out += output_lines(leaves)
    if not outputs_close:
        out += ["weights as mapped (port <- torch; --params-map overrides):"]
        out += [f"  {port} <- {source}" for port, source in mapping.pairs.items()]
    out.append("outputs match" if outputs_close else "outputs DIVERGE")
    return "\n".join(out) + "\n"

