"""pyproject.toml's package list names every package of the four source roots.

setuptools installs only the packages the list names: a sub-package left out is missing
from a built wheel although an editable install (and every test) still imports it, and a
folder of package data left out (the JSON Schemas) makes every install warn.
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
        for sub in [root, *(d for d in root.rglob("*") if d.is_dir())]:
            if any(sub.glob("*.py")) or any(sub.glob("*.json")):  # modules or package data
                found.add(".".join((top, *sub.relative_to(root).parts)))
    assert sorted(found) == sorted(setuptools["packages"])
