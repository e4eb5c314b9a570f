"""How this jaxside was installed, so a hint to add an extra names the same source."""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse


def pip_install(extra: str) -> str:
    """The pip command that adds `extra` (``review``) to this jaxside: from the path it was installed
    from (``-e`` when editable), from the checkout it runs from, from the URL, or from the registry."""
    try:
        distribution = metadata.distribution("jaxside")
    except metadata.PackageNotFoundError:  # run from a source checkout (PYTHONPATH=.)
        root = Path(__file__).resolve().parent.parent
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    try:
        direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    except ValueError:
        direct = {}
    url = direct.get("url")
    if not url:
        return f"pip install 'jaxside[{extra}]'"
    parsed = urlparse(url)
    if parsed.scheme == "file" and "vcs_info" not in direct:
        editable = "-e " if direct.get("dir_info", {}).get("editable") else ""
        return f"pip install {editable}{shlex.quote(f'{unquote(parsed.path)}[{extra}]')}"
    return f"pip install {shlex.quote(f'jaxside[{extra}] @ {url}')}"
