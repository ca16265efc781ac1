"""A stage's failure, recorded for the operator: its error and whether it is a refusal.

`--error-file` (a path on the driver's machine) receives the stage's own error when it
fails, as JSON `{"error": "Type: message", "refusal": bool}`, and the driver's stderr the
same record on one line (`lakeprep_contracts.stage_errors`: YARN cluster mode reads it
there), so the Airflow task can fail with it instead of spark-submit's command line, and
without retries when it is a refusal of the input or the parameters (`is_refusal`):
running again would refuse again.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator

from lakeprep_contracts import stage_errors

# Spark's refusals of a value it cannot cast or parse (ANSI mode, Spark 4's default): the
# error condition in brackets (Spark's error-conditions.json), or the Java exception in
# the text of a JVM error pyspark did not convert (Py4JJavaError), `Caused by:` included.
_DATA_ERROR = re.compile(
    r"\[(CAST_INVALID_INPUT|CAST_OVERFLOW|CAST_OVERFLOW_IN_TABLE_INSERT|CANNOT_PARSE_TIMESTAMP"
    r"|CANNOT_PARSE_DECIMAL|MALFORMED_RECORD_IN_PARSING)(\.\w+)?\]"
    r"|java\.lang\.NumberFormatException|java\.time\.format\.DateTimeParseException"
)


def is_refusal(err: BaseException) -> bool:
    """Whether `err` refuses the stage's input or parameters, so that a retry would refuse again.

    ValueError and TypeError: ContractError, FitError, FooterError, bad `--params`, a bad
    plan. Spark's errors for data it cannot cast or parse (`_DATA_ERROR`). Anything else
    (a NameNode or a master that does not answer, a lost executor) is worth a retry.
    """
    return isinstance(err, (ValueError, TypeError)) or bool(_DATA_ERROR.search(str(err)))


@contextlib.contextmanager
def failure_recorded(error_file: str | None) -> Iterator[None]:
    """Write an error's `Type: message` and whether it is a refusal to `error_file` (the
    operator fails the task with it, without retries for a refusal), re-raise.

    The same record goes to stderr on one line (`lakeprep_contracts.stage_errors`): in YARN
    cluster mode the file stays in the driver's container and the operator reads the line
    from the driver's log instead.
    """
    try:
        yield
    except Exception as err:
        if error_file:
            record = stage_errors.error_record(f"{type(err).__name__}: {err}", is_refusal(err))
            with open(error_file, "w", encoding="utf-8") as f:
                json.dump(record, f)
            print(stage_errors.record_line(error_file, record), file=sys.stderr, flush=True)
        raise
