"""The page around a view: one offline HTML file with the shared style and script inlined."""

from __future__ import annotations

import html
from importlib import resources


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


READER = ("<span class=reader><button class=link id=theme type=button "
          "title='light, dark, or as the system is'>theme: auto</button> "
          "<button class=link id=smaller type=button title='smaller code'>A−</button> "
          "<button class=link id=larger type=button title='larger code'>A+</button></span>")
"""The reader's controls on every page: theme and code size, kept in the browser (view.js)."""


def document(title: str, intro: str, legend: list[tuple[str, str, str]], body: str,
             controls: str = "") -> str:
    """A whole page: header (title, one line of help, a legend of `(label, colour, help)`), then `body`."""
    chips = "".join(f"<span style='--chip:{colour}' title='{html.escape(tip, quote=True)}'>"
                    f"{html.escape(label)}</span>" for label, colour, tip in legend)
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_asset('view.css')}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p>{intro}</p>"
        f"<div class=legend>{chips}{controls}{READER}</div></header>\n"
        f"{body}\n<button id=back type=button></button>"
        f"<script>{_asset('view.js')}</script></body></html>\n"
    )


def framed(page: str) -> str:
    """A page inside a notebook's output: in an iframe, so its style and script stay its own."""
    return (f"<iframe srcdoc=\"{html.escape(page, quote=True)}\" "
            "style='width:100%;height:36em;border:1px solid #8884'></iframe>")
