"""The files an export's manifest names, wherever they are (its own shards or the sampled days')."""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path


def named_paths(manifest: dict) -> list[str]:
    """Each distinct file the manifest's entries name, relative to its folder (normalised:
    a prepared export names `../../../sample/<dataset>/dt=<day>/part-...`)."""
    paths = {posixpath.normpath(s["path"]) for split in manifest["splits"].values() for s in split["shards"]}
    return sorted(paths)


def named_files(folder: Path, manifest: dict) -> dict[str, str]:
    """sha256 of each file the manifest names, by `named_paths`."""
    return {p: hashlib.sha256((folder / p).read_bytes()).hexdigest() for p in named_paths(manifest)}
