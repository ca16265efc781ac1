"""The window's export as entries over the sampled days' own files: pure arithmetic, no rows read.

Each sampled day wrote its prepared rows once, as files of one split and one class, every
class's rows in the order of the balance hash (`lakeprep_jobs.day_shards`). A run's
export is then a choice of rows of those files, written down as manifest entries
(`path`, `offset`, `rows`: docs/MANIFEST.md, "Prepared shards and shard slices"):

- **Balancing with exact counts** (`stages.balance`, the train split only): a class cut
  to `target` rows takes, from each day, a share of `target` proportional to the day's
  rows of that class (largest remainder, `exact.apportion`), and from that day the
  **first** rows of its hash order: a prefix of its files, the rows the balance hash
  ranks first, as `balance.rebalance` keeps. A class raised to `target` rows repeats all
  its rows `target // n` times and takes a prefix of `target % n` rows, shared over the
  days the same way. Validation and test are named whole: never balanced.
- **Read-time augmentation** (`augment: jitter | text`, train only): every kept row is
  named `synthetic_per_row` more times, entries marked `synthetic: k`, which the loader
  reads as the row's k-th synthetic copy and augments afresh each epoch.
- **Entries**: the chosen rows of each file are cut at the files' row-group boundaries
  (`row_group_rows`), so an entry is at most one row group and the loader reads whole
  groups. The entries of a split are ordered by a hash of (path, offset, copy): the
  days, classes and files are dealt evenly along the split, so that every rank's part of
  an unshuffled read holds a share of each, and a shuffled epoch (which permutes
  entries) mixes them again.
- **Ranks**: the split is cut to `plan.rows` (the world-size remainder dropped from the
  end or padded from the start, `export_shards.plan_split`) and then at every multiple
  of `rows_per_rank`: rank `r` holds the contiguous entries of rows
  `[r * rows_per_rank, (r + 1) * rows_per_rank)`, exactly what the trainer's read-time
  plan reads at the export's world size (`lakeprep_train.dataset.plan_rank`). An entry
  that straddles a boundary becomes two entries of the same file.

Everything is a function of the `_shards.json` documents, the counts and the params, so
a rerun names the same entries in the same order.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from lakeprep_jobs import exact


@dataclasses.dataclass(frozen=True)
class DayFile:
    """One file of a day's (split, class): its path relative to the manifest's folder."""

    path: str
    rows: int
    bytes: int
    sha256: str
    group_rows: int  # rows per Parquet row group: entries are cut at multiples of it


@dataclasses.dataclass(frozen=True)
class Piece:
    """Rows `[offset, offset + rows)` of `file`; `copy` k > 0 is their k-th repeat;
    `synthetic` k > 0: read as their k-th synthetic copy (augmented by the loader)."""

    file: DayFile
    offset: int
    rows: int
    copy: int = 0
    synthetic: int = 0

    def order_key(self) -> str:
        key = f"{self.file.path}\n{self.offset}\n{self.copy}" + (
            f"\n{self.synthetic}" if self.synthetic else ""
        )
        return hashlib.sha256(key.encode()).hexdigest()


def take_per_day(day_rows: Sequence[int], target: int) -> list[int]:
    """Rows each day gives to a class cut to `target` (of `sum(day_rows)`): shares
    proportional to the days' rows, largest remainder, ties to the earlier day."""
    n = sum(day_rows)
    if not 0 <= target <= n:
        raise ValueError(f"cannot take {target} rows of {n}")
    if target == n:
        return list(day_rows)
    return exact.apportion([Fraction(r * target, n) for r in day_rows], target)


def prefix_pieces(files: Sequence[DayFile], rows: int, copy: int = 0) -> list[Piece]:
    """The first `rows` rows of `files` (in order) as pieces of at most a row group each,
    cut at the files' row-group boundaries (multiples of `group_rows`)."""
    out: list[Piece] = []
    left = rows
    for f in files:
        if f.group_rows < 1:
            raise ValueError(f"{f.path}: row_group_rows {f.group_rows!r} must be >= 1")
        take = min(left, f.rows)
        for start in range(0, take, f.group_rows):
            out.append(Piece(f, start, min(f.group_rows, take - start), copy))
        left -= take
        if not left:
            break
    if left:
        raise ValueError(f"{rows} rows asked of files holding {rows - left}")
    return out


def class_pieces(days: Sequence[Sequence[DayFile]], target: int) -> list[Piece]:
    """A class's pieces for `target` rows: `days` are its files on each day of the window.

    Below its rows: a proportional prefix of each day's files (`take_per_day`). Above:
    every row `target // n` times, then a proportional prefix of `target % n` rows.
    """
    day_rows = [sum(f.rows for f in files) for files in days]
    n = sum(day_rows)
    if target and not n:
        raise ValueError(f"{target} rows asked of a class without rows")
    whole, extra = (target // n, target % n) if target > n else (0, target)
    out: list[Piece] = []
    for copy in range(whole):
        for files, rows in zip(days, day_rows, strict=True):
            out += prefix_pieces(files, rows, copy)
    for files, rows in zip(days, take_per_day(day_rows, extra), strict=True):
        out += prefix_pieces(files, rows, whole)
    return out


def ordered(pieces: Sequence[Piece]) -> list[Piece]:
    """The split's pieces dealt along it: sorted by a hash of (path, offset, copy)."""
    return sorted(pieces, key=Piece.order_key)


def cut_for_ranks(pieces: Sequence[Piece], world_size: int, rows_per_rank: int) -> list[list[Piece]]:
    """`pieces` cut to `world_size * rows_per_rank` rows, then into each rank's contiguous part.

    Fewer rows than that are padded by repeating the sequence from its start (as often as
    it takes); more are dropped from its end.
    """
    total = world_size * rows_per_rank
    have = sum(p.rows for p in pieces)
    if total and not have:
        raise ValueError(f"{total} rows planned over pieces holding none")
    sequence: list[Piece] = []
    held = 0
    while held < total:  # more than once only to pad
        for p in pieces:
            rows = min(p.rows, total - held)
            if not rows:
                break
            sequence.append(dataclasses.replace(p, rows=rows))
            held += rows
    ranks: list[list[Piece]] = [[] for _ in range(world_size)]
    position = 0
    for p in sequence:
        start, end = position, position + p.rows
        while start < end:
            rank = start // rows_per_rank
            stop = min(end, (rank + 1) * rows_per_rank)
            ranks[rank].append(dataclasses.replace(p, offset=p.offset + start - position, rows=stop - start))
            start = stop
        position = end
    return ranks


def entries(ranks: Sequence[Sequence[Piece]]) -> list[dict[str, Any]]:
    """The manifest's `shards` of a split, rank by rank (docs/MANIFEST.md)."""
    return [
        {
            "path": p.file.path,
            "rank": rank,
            "offset": p.offset,
            "rows": p.rows,
            "file_rows": p.file.rows,
            "bytes": p.file.bytes,
            "sha256": p.file.sha256,
            **({"synthetic": p.synthetic} if p.synthetic else {}),
        }
        for rank, pieces in enumerate(ranks)
        for p in pieces
    ]


def split_entries(
    days: Mapping[str, Sequence[Sequence[DayFile]]],
    targets: Mapping[str, int],
    *,
    world_size: int,
    rows_per_rank: int,
    synthetic_per_row: int = 0,
) -> list[dict[str, Any]]:
    """One split's entries: `days` maps each class (a string) to its files per day,
    `targets` the rows each class keeps (its rows, unless balanced). With
    `synthetic_per_row` n (train, read-time augmentation), every kept row is named n more
    times, as its synthetic copies 1..n."""
    pieces: list[Piece] = []
    for label in sorted(days):
        pieces += class_pieces(days[label], targets[label])
    pieces += [dataclasses.replace(p, synthetic=k) for k in range(1, synthetic_per_row + 1) for p in pieces]
    return entries(cut_for_ranks(ordered(pieces), world_size, rows_per_rank))
