"""The benchmark modules run in-process here, and some set the environment their children
get (`benchmarks.environment.use_child_env`: a bench AIRFLOW_HOME, Airflow's logging at
WARNING, the Spark connection). Each test gets the environment back as it found it, so
no later test's `airflow dags test` runs with the benchmark's settings."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
