"""Retraining without re-preparing: the export's Asset, its event, and the partition to train.

`export_shards` of `lakeprep_<name>` publishes the Asset `export_asset(name)`; a successful
export's event carries `export_event_extra(...)` (the partition date, the manifest's URI,
the config hash). `lakeprep_<name>_train` is scheduled on that Asset and trains on the
partition `partition_to_train` resolves (docs/TRAINING.md, "Retraining from an export"):

1. `run_ds` in the run's conf (the trigger form's *Partition date*), when set;
2. else `ds` from the extra of the latest triggering event of the export Asset;
3. else the run fails, saying how to choose a partition.

Asset-triggered runs have no logical date (the scheduler creates them with
`logical_date=None`), so the date must come from the event, not from `{{ ds }}`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset

log = logging.getLogger(__name__)

RUN_DS_PARAM = "run_ds"
# Registered as a user-defined macro of the train DAG (bound to its spec's export Asset).
PARTITION_MACRO = "lakeprep_partition_to_train"
TRAIN_RUN_DS_TEMPLATE = "{{ " + PARTITION_MACRO + "(params, triggering_asset_events) }}"
EXTRA_KEYS = ("dataset", "ds", "manifest_uri", "config_hash")
_DS = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def export_asset(dataset: str) -> Asset:
    """The Asset a dataset's `export_shards` produces.

    Static at parse time (the lake root is a Variable, read only in tasks), so the URI is
    a lakeprep-scheme name, not the export's location; the location is in each event.
    """
    return Asset(name=f"lakeprep_{dataset}.export_shards", uri=f"lakeprep://{dataset}/export_shards")


def export_event_extra(*, dataset: str, ds: str, partition_uri: str, config_hash: str) -> dict[str, str]:
    """The extra of a successful export's Asset event (keys: `EXTRA_KEYS`)."""
    return {
        "dataset": dataset,
        "ds": ds,
        "manifest_uri": f"{partition_uri.rstrip('/')}/manifest.json",
        "config_hash": config_hash,
    }


def describe_export_events(
    context: Any, outlets: Sequence[Any], spec: Any, *, ds: str, partition_uri: str
) -> None:
    """Give each outlet Asset's event the partition it stands for (its `extra`); `spec`: the
    run's `DatasetSpec`.

    Airflow emits the events only when the task succeeds, so they always name a
    committed partition. Asset-triggered consumers have no logical date: the date
    and the manifest's URI come from here.
    """
    assets = [outlet for outlet in outlets if isinstance(outlet, Asset)]
    if not assets:
        return
    from lakeprep_airflow.spec import config_hash

    extra = export_event_extra(
        dataset=spec.name, ds=ds, partition_uri=partition_uri, config_hash=config_hash(spec)
    )
    for asset in assets:
        context["outlet_events"][asset].extra = extra


def _checked_ds(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _DS.match(value.strip()):
        raise ValueError(f"partition date {value!r} from {where} must be a date YYYY-MM-DD")
    return value.strip()


def partition_to_train(
    params: Mapping[str, Any], triggering_asset_events: Mapping[Asset, Sequence[Any]], *, asset: Asset
) -> str:
    """The partition date a train run trains on (precedence in the module docstring).

    `triggering_asset_events` is the run's context entry: events of each triggering Asset
    (each with `.extra` and `.timestamp`). When several exports were consumed by one run
    (the scheduler folds the events queued since the previous run into one run), the
    latest is trained and the others are logged: retrain them from the trigger form.
    """
    explicit = params.get(RUN_DS_PARAM)
    if explicit not in (None, ""):
        return _checked_ds(explicit, f"the run's conf ({RUN_DS_PARAM})")
    events = sorted(triggering_asset_events.get(asset) or (), key=lambda e: e.timestamp)
    if not events:
        raise ValueError(
            f"no partition to train: this run was not triggered by an event of {asset.name!r} "
            f"({asset.uri}); trigger it with {RUN_DS_PARAM} (the form's Partition date, YYYY-MM-DD)"
        )
    latest = events[-1]
    where = f"the extra of the {asset.name!r} event of {latest.timestamp}"
    ds = _checked_ds((latest.extra or {}).get("ds"), where)
    skipped = [str((e.extra or {}).get("ds")) for e in events[:-1]]
    if skipped:
        log.warning(
            "this run consumed %d export events; training the latest (%s), not %s: retrain those by hand",
            len(events),
            ds,
            ", ".join(skipped),
        )
    return ds
