"""The window's entries over the days' files (lakeprep_jobs.window_manifest): pure arithmetic."""

from __future__ import annotations

import collections
import itertools

import pytest

from lakeprep_jobs.window_manifest import (
    DayFile,
    class_pieces,
    cut_for_ranks,
    entries,
    ordered,
    prefix_pieces,
    split_entries,
    take_per_day,
)


def files(day: int, label: str, *rows: int, group: int = 3) -> list[DayFile]:
    return [
        DayFile(f"d{day}/part-{label}-{k}", n, 100 + n, f"{day}{label}{k}".ljust(64, "0"), group)
        for k, n in enumerate(rows)
    ]


def rows_of(pieces) -> list[tuple[str, int]]:
    """Every (file, row) a list of pieces names, in order."""
    return [(p.file.path, p.offset + i) for p in pieces for i in range(p.rows)]


@pytest.mark.parametrize(
    ("day_rows", "target"), [([5, 3, 2], 7), ([1, 1, 1], 2), ([9, 0, 4], 13), ([3, 3], 0)]
)
def test_take_per_day_is_exact_and_proportional(day_rows, target):
    taken = take_per_day(day_rows, target)
    assert sum(taken) == target
    n = sum(day_rows)
    for have, took in zip(day_rows, taken, strict=True):
        assert 0 <= took <= have
        assert abs(took - have * target / n) < 1


def test_take_per_day_refuses_more_than_there_is():
    with pytest.raises(ValueError, match="cannot take 4 rows of 3"):
        take_per_day([1, 2], 4)


def test_a_prefix_is_the_first_rows_of_the_files_cut_at_their_row_groups():
    pieces = prefix_pieces(files(0, "a", 7, 5), 10)
    assert rows_of(pieces) == [("d0/part-a-0", i) for i in range(7)] + [("d0/part-a-1", i) for i in range(3)]
    assert [(p.offset, p.rows) for p in pieces] == [(0, 3), (3, 3), (6, 1), (0, 3)]
    with pytest.raises(ValueError, match="13 rows asked of files holding 12"):
        prefix_pieces(files(0, "a", 7, 5), 13)


def test_undersampling_takes_each_days_first_rows_in_proportion():
    days = [files(0, "a", 4, 4), files(1, "a", 2)]  # 8 and 2 rows
    pieces = class_pieces(days, 5)
    taken = collections.Counter(path.split("/")[0] for path, _ in rows_of(pieces))
    assert taken == {"d0": 4, "d1": 1}
    assert rows_of(pieces) == [("d0/part-a-0", i) for i in range(4)] + [("d1/part-a-0", 0)]


def test_oversampling_repeats_every_row_then_a_proportional_prefix():
    days = [files(0, "a", 3), files(1, "a", 1)]
    pieces = class_pieces(
        days, 10
    )  # 4 rows: twice each, then 2 more (quotas 1.5 and 0.5: day 0 wins the tie)
    named = collections.Counter(rows_of(pieces))
    assert sum(named.values()) == 10
    assert [named[("d0/part-a-0", i)] for i in range(3)] == [3, 3, 2] and named[("d1/part-a-0", 0)] == 2
    assert {p.copy for p in pieces} == {0, 1, 2}


@pytest.mark.parametrize(
    ("world_size", "per_rank"), [(1, 17), (2, 8), (3, 5), (4, 4), (3, 6), (4, 5), (5, 7)]
)
def test_ranks_get_equal_contiguous_rows_dropped_from_the_end_or_padded_from_the_start(world_size, per_rank):
    pieces = ordered(class_pieces([files(0, "a", 5, 4), files(1, "a", 8)], 17))
    sequence = rows_of(pieces)
    ranks = cut_for_ranks(pieces, world_size, per_rank)
    assert [sum(p.rows for p in r) for r in ranks] == [per_rank] * world_size
    total = world_size * per_rank
    expected = list(itertools.islice(itertools.cycle(sequence), total))
    assert [row for r in ranks for row in rows_of(r)] == expected
    for r in ranks:
        assert all(p.rows <= p.file.group_rows for p in r)
    listed = entries(ranks)
    assert [e["rank"] for e in listed] == sorted(e["rank"] for e in listed)
    assert all(e["offset"] + e["rows"] <= e["file_rows"] for e in listed)


def test_split_entries_deal_the_classes_and_days_along_the_split():
    """Sorted by a hash of (path, offset, copy), not class after class: each rank of an
    unshuffled read holds rows of both classes."""
    days = {
        "0": [files(0, "0", 30, group=2), files(1, "0", 30, group=2)],
        "1": [files(0, "1", 30, group=2), files(1, "1", 30, group=2)],
    }
    listed = split_entries(days, {"0": 60, "1": 60}, world_size=4, rows_per_rank=30)
    for rank in range(4):
        classes = {e["path"].split("-")[1] for e in listed if e["rank"] == rank}
        assert classes == {"0", "1"}, rank
    again = split_entries(days, {"0": 60, "1": 60}, world_size=4, rows_per_rank=30)
    assert again == listed
