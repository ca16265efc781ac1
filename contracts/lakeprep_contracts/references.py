"""Reference tables: dated snapshots and how values are compared, for preprocess and serving.

A reference table (the spec's `references[].uri`) is either a plain folder, one table
with no history, or a folder of dated snapshots:

    <lake>/reference/weather/dt=2013-01-01/      the table as it stood from that day
        part-*.csv
        _SUCCESS                                 complete (written last)
    <lake>/reference/weather/dt=2013-02-01/
        ...

A day D joins the newest snapshot dated on or before D, so a backfill of an old day
joins what was known then, never a later day's facts. A day before the first snapshot
has nothing to join and is refused (`SnapshotError`, a ValueError: a retry would refuse
again), naming the reference, the day and the first snapshot. The snapshot chosen must
be complete (`_SUCCESS`): an incomplete one is not passed over for an older one, which
a rerun after it completes would not reproduce.

Categorical values and string join keys are compared trimmed of
`lakeprep_contracts.records.WHITESPACE` at both ends, in preprocess (Spark's `btrim`) and
serving (Arrow's `utf8_trim`) alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

SNAPSHOT_PREFIX = "dt="


class SnapshotError(ValueError):
    """A reference table has no snapshot that a day can join, or a badly named one."""


def snapshot_days(names: Iterable[str], where: str) -> list[str]:
    """The days of the `dt=YYYY-MM-DD` folder names among `names`, oldest first.

    Names starting with `_` or `.` are skipped (staging, side files), as Spark's readers
    skip them. `where` (the table's URI) names the table in errors.

    :raises SnapshotError: a `dt=` name that is not an ISO date.
    """
    days = []
    for name in names:
        if not name.startswith(SNAPSHOT_PREFIX):
            continue
        day = name[len(SNAPSHOT_PREFIX) :]
        try:
            parsed = dt.date.fromisoformat(day)
        except ValueError:
            parsed = None
        if parsed is None or parsed.isoformat() != day:
            raise SnapshotError(
                f"{where}: snapshot folder {name!r} is not named dt=YYYY-MM-DD; rename it "
                "(a reference folder holds dated snapshots or data files, nothing else)"
            )
        days.append(day)
    return sorted(days)


def snapshot_for(days: Sequence[str], day: str, reference: str, where: str) -> str:
    """The newest of `days` (ISO dates) on or before `day`.

    :raises SnapshotError: naming the reference, its URI, the day and the first snapshot,
        when every snapshot is dated after `day`.
    """
    earlier = [d for d in days if d <= day]
    if not earlier:
        raise SnapshotError(
            f"reference {reference!r} ({where}) has no snapshot dated on or before {day}: its "
            f"first is {SNAPSHOT_PREFIX}{min(days)}. A day joins the table as it stood on that "
            f"day; land a snapshot {SNAPSHOT_PREFIX}<date on or before {day}>, or start the "
            "dataset on or after the first snapshot"
        )
    return max(earlier)
