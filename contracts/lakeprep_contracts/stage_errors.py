"""How a Spark stage hands its own error to the Airflow task that submitted it.

The job writes `{"error": "Type: message", "refusal": bool}` to the `--error-file` it was
given and prints the same record, with that path, on one line of the driver's stderr:

    lakeprep error record: {"file": "<--error-file>", "error": "...", "refusal": false}

In local and client mode the driver runs on the Airflow worker and the operator reads the
file. In YARN cluster mode the driver runs in a container on a NodeManager, the file lands
in the container's working directory, and the operator finds the line in the driver's log
(fetched from the NodeManager when the application has ended). JSON keeps a multi-line
message on one line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

RECORD_PREFIX = "lakeprep error record: "


def error_record(message: str, refusal: bool) -> dict[str, Any]:
    """What the job records: its error (`Type: message`) and whether it refuses the input."""
    return {"error": message, "refusal": refusal}


def record_line(error_file: str, record: dict[str, Any]) -> str:
    """The driver-log line carrying `record` for `error_file`."""
    return RECORD_PREFIX + json.dumps({"file": error_file, **record}, sort_keys=True)


def records_in(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """error file -> record, from a driver log's lines (the last record of a file wins)."""
    found: dict[str, dict[str, Any]] = {}
    for line in lines:
        at = line.find(RECORD_PREFIX)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(RECORD_PREFIX) :])
        except json.JSONDecodeError:
            continue  # a line cut by a log viewer: the file's other records still count
        if isinstance(doc, dict) and isinstance(doc.get("file"), str) and isinstance(doc.get("error"), str):
            found[doc.pop("file")] = doc
    return found
