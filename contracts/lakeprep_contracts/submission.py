"""A Spark job's argv in a form every launcher passes through unchanged.

YARN starts the driver of a cluster-mode application from a script the NodeManager
writes (`launch_container.sh`: `exec /bin/bash -c "... '<arg>' ..."`), and Spark's
quoting of the arguments for it (`YarnSparkHadoopUtil.escapeForShell`) does not survive
backslashes: a fused plan, each stage's `--params` JSON inside the plan's JSON, reached
bash as a syntax error. So in YARN cluster mode the operator passes the argv as one
URL-safe base64 argument, `--argv-base64 <JSON list>`, and the job decodes it before
it parses anything (`decode_argv`). Other modes pass the argv as it is.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Sequence

ENCODED_ARGV = "--argv-base64"


def encode_argv(argv: Sequence[str]) -> list[str]:
    """`argv` as the two arguments `--argv-base64 <base64 of its JSON list>`."""
    payload = json.dumps(list(argv), separators=(",", ":")).encode()
    return [ENCODED_ARGV, base64.urlsafe_b64encode(payload).decode("ascii")]


def decode_argv(argv: Sequence[str] | None = None) -> list[str]:
    """The job's argv (`sys.argv[1:]` when None), decoded if it came encoded."""
    given = list(sys.argv[1:] if argv is None else argv)
    if not given or given[0] != ENCODED_ARGV:
        return given
    if len(given) != 2:
        raise ValueError(f"{ENCODED_ARGV} takes the whole argv as one argument, got {len(given) - 1}")
    try:
        decoded = json.loads(base64.urlsafe_b64decode(given[1].encode("ascii")))
    except (binascii.Error, UnicodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{ENCODED_ARGV} must be the base64 of a JSON list of strings: {err}") from err
    if not isinstance(decoded, list) or not all(isinstance(arg, str) for arg in decoded):
        raise ValueError(f"{ENCODED_ARGV} must be the base64 of a JSON list of strings, got {decoded!r:.200}")
    return decoded
