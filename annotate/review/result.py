"""One review as an object: both sides traced and aligned, with its rows, first divergence, weight
mapping and verdict, and the report as text (what ``annotate review`` prints) and as a page."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxside.annotate.options import ReviewOptions

__all__ = ["Divergence", "Review", "Row", "review_entries"]


@dataclass(frozen=True)
class Row:
    """One torch line of the report: the port lines whose values matched it, and the largest error."""

    torch: tuple[str, int]
    """(file, line)."""
    port: tuple[tuple[str, int], ...]
    error: float | None
    """None: no port value found for it (`unmatched`)."""
    ok: bool
    """Every value of the line matched its port counterpart within the tolerances."""


@dataclass(frozen=True)
class Divergence:
    """The first torch value whose port counterpart exists and differs: where the port goes wrong."""

    torch: tuple[str, int]
    port: tuple[str, int] | None
    torch_text: str
    port_text: str
    error: float


@dataclass
class Review:
    """A torch entry against its JAX port (`annotate review`, as data)."""

    options: ReviewOptions
    torch: Any
    port: Any
    alignment: Any
    mapping: Any
    leaves: list[Any]

    @property
    def ok(self) -> bool:
        """Whether the outputs match (the command's exit code 0)."""
        from jaxside.annotate.review.outputs import matched

        return matched(self.leaves)

    @property
    def rows(self) -> list[Row]:
        """Per torch line (in the order the program reached them) its port lines and error."""
        from jaxside.annotate.review.report import rows

        return [Row(line, tuple(sorted(lines)), error, ok and seen)
                for line, (lines, error, ok, seen) in rows(self.torch, self.port, self.alignment).items()]

    @property
    def first_divergence(self) -> Divergence | None:
        from jaxside.annotate.review.report import site_of

        first = self.alignment.first
        if first is None:
            return None
        mine, theirs = site_of(self.torch, first.torch_var), site_of(self.port, first.port_var)
        return Divergence(
            (mine.file, mine.line) if mine else ("?", 0), (theirs.file, theirs.line) if theirs else None,
            (mine.text or "") if mine else "", (theirs.text or "") if theirs else "", first.error)

    @property
    def weights(self) -> dict[str, str]:
        """How the torch weights were mapped onto the port: port leaf path -> torch state_dict name."""
        return dict(self.mapping.pairs)

    def text(self) -> str:
        """The report ``annotate review`` prints."""
        from jaxside.annotate.review.report import text

        return text(self.options, self.torch, self.port, self.alignment, self.mapping, self.leaves)

    def html(self) -> str:
        """The two-column page ``annotate review --html`` writes."""
        from jaxside.annotate.review.page import html_page
        from jaxside.annotate.review.report import site_of
        from jaxside.annotate.review.unread import line_reasons

        reasons = line_reasons(self.torch, self.alignment, self.mapping.unread, site_of)
        return html_page(self.options, self.torch, self.port, self.alignment, reasons)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        first = self.first_divergence
        where = f", first divergence at {Path(first.torch[0]).name}:{first.torch[1]}" if first else ""
        verdict = "outputs match" if self.ok else "outputs DIVERGE"
        return (f"<Review of {self.torch.trace.entry} against {self.port.trace.entry}: {verdict}"
                f"{where}, {len(self.mapping.pairs)} weights mapped>")

    def _repr_html_(self) -> str:
        from jaxside.render.html.page import framed

        return framed(self.html())


def review_entries(
    options: ReviewOptions,
    entry: Any,
    port: Callable[[str], tuple[Any, Any, str]],
    phase: Callable[[str], None],
) -> Review:
    """Trace `entry` (the torch side, an `annotate.loading.Entry`), then the port (`port(torch_entry)`
    gives its module, its function, module or factory, and that one's name; `torch_entry` is the
    traced entry's qualname), run both on the same inputs and weights, and align them."""
    from jaxside.annotate.review.align import align, side
    from jaxside.annotate.review.outputs import compare_outputs, match_outputs, unreturned
    from jaxside.annotate.review.sides import in_out_weights, input_pairs, port_side, torch_side
    from jaxside.annotate.review.unread import classify, tied_names

    torch_trace, torch_args, state, data = torch_side(options, entry)
    aliases = tied_names(entry.fn)
    phase(f"tracing the port {Path(options.port).name}")
    module, port_entry, name = port(torch_trace.entry)
    port_trace, port_args, mapping = port_side(options, module, port_entry, name, state, data,
                                               in_out_weights(entry.fn))
    phase("running both sides")
    torch, ported = side(torch_trace, torch_args), side(port_trace, port_args)
    phase("comparing values")
    inputs = input_pairs(torch_trace, port_trace, mapping.inputs, aliases)
    matches = match_outputs(torch, ported, mapping.module_port)
    alignment = align(torch, ported, inputs, options.rtol, options.atol, unreturned(matches))
    returned = {match[1] for match in matches.values() if match is not None}
    mapping.unread = classify(torch, ported, alignment, mapping.unused_torch, aliases, returned)
    leaves = compare_outputs(torch, ported, alignment, options.rtol, options.atol, matches,
                             set(mapping.unread.uncached))
    return Review(options, torch, ported, alignment, mapping, leaves)
