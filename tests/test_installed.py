"""Hints that say how to install an extra name the source this jaxside was installed from."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from jaxside.annotate import installed


class Distribution:
    def __init__(self, direct: dict | None) -> None:
        self.direct = direct

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct is None else json.dumps(self.direct)


@pytest.mark.parametrize("direct, hint", [
    (None, "pip install 'jaxside[review]'"),  # from the registry: pip records no direct URL
    ({"url": "file:///src/jax%20side", "dir_info": {}}, "pip install '/src/jax side[review]'"),
    ({"url": "file:///src/jaxside", "dir_info": {"editable": True}}, "pip install -e '/src/jaxside[review]'"),
    ({"url": "https://example.org/jaxside-0.1.0-py3-none-any.whl", "archive_info": {}},
     "pip install 'jaxside[review] @ https://example.org/jaxside-0.1.0-py3-none-any.whl'"),
])
def test_the_hint_follows_how_jaxside_was_installed(monkeypatch, direct, hint):
    monkeypatch.setattr(metadata, "distribution", lambda name: Distribution(direct))
    assert installed.pip_install("review") == hint


def test_run_from_a_checkout_the_hint_installs_the_checkout(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    hint = installed.pip_install("review")
    assert hint.startswith("pip install -e '/") and hint.endswith("[review]'")
    root = hint.removeprefix("pip install -e '").removesuffix("[review]'")
    assert (Path(root) / "pyproject.toml").is_file()
