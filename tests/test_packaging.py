"""pyproject.toml's package list names every package of the four source roots.

setuptools installs only the packages the list names: a sub-package left out is missing
from a built wheel although an editable install (and every test) still imports it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_package_under_the_source_roots_is_listed():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for top, folder in setuptools["package-dir"].items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            found.add(".".join((top, *parts)))
    assert sorted(found) == sorted(setuptools["packages"])
