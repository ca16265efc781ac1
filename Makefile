# lakeprep: `make demo` runs the main job on real data; `make test` runs the whole suite;
# `make run DATASET=<name> FROM=YYYY-MM-DD [TO=YYYY-MM-DD]` runs any spec's days.
# Both create or reuse .venv and install what they need (Debian packages via apt when missing).

SHELL := /bin/bash
PY ?= python3.11
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lakeprep-installed

# The embedded default: a project-local lake, Spark local, Airflow on SQLite.
export PATH := $(BIN):$(PATH)
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__UNIT_TEST_MODE := False
export AIRFLOW_VAR_LAKEPREP_LAKE_ROOT ?= file://$(CURDIR)/.lake
export AIRFLOW_CONN_SPARK_DEFAULT ?= {"conn_type": "spark", "host": "local[2]"}
export PYSPARK_PYTHON ?= $(BIN)/python
export PYTHONPATH := $(CURDIR)/plugins:$(CURDIR)/spark_jobs:$(CURDIR)/training:$(CURDIR)/contracts

DEMO_FROM ?= 2013-01-01
DEMO_TO ?= 2013-01-03
# `make run`: a spec in pipelines/ by name, and its days (TO defaults to FROM).
DATASET ?=
FROM ?=
TO ?= $(FROM)

.PHONY: demo run test lint format venv system-deps land-demo-data cluster-up cluster-down up down clean bench bench-quick

system-deps:
	@if ! dpkg -s libkrb5-dev >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1 \
	    || ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || ! test -x /usr/bin/chromium; then \
	  echo "installing Debian packages: libkrb5-dev (gssapi build for the HDFS provider), Java 17, PostgreSQL (make up), chromium (the UI browser test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev openjdk-17-jre-headless postgresql chromium >/dev/null; \
	fi

# providers-apache-spark pulls pyspark-client (4.2), which ships the same pyspark/ files as
# pyspark (4.3): the last installed wins file by file. Put pyspark's own back on top, to
# match its jars (on the mix, TorchDistributor's barrier stage fails in Py4J: "Constructor
# ...UserDefinedPythonFunction(...) does not exist").
$(STAMP): requirements.txt requirements-dev.txt requirements-train.txt pyproject.toml | system-deps
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt -r requirements-train.txt
	$(BIN)/pip install -q --no-deps --force-reinstall "$$(grep -E '^pyspark==' requirements.txt)"
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $@

venv: $(STAMP)

$(AIRFLOW_HOME)/airflow.db: $(STAMP)
	@mkdir -p $(AIRFLOW_HOME)
	airflow db migrate >/dev/null

land-demo-data: $(STAMP)
	$(BIN)/python -m lakeprep_airflow.demo_data --lake "$(AIRFLOW_VAR_LAKEPREP_LAKE_ROOT)" --from $(DEMO_FROM) --to $(DEMO_TO)

# One `airflow dags test` per day on the embedded default, then the summary; the dataset,
# the dates and the raw partitions are checked first (lakeprep_airflow/run_dataset.py).
# Each spark-submit maps Spark's classes from a class-data archive (dumped once, ~40 s;
# docs/PIPELINE.md, "Faster JVM start-ups"); an explicit SPARK_SUBMIT_OPTS wins.
# Lineage on by default: every task's OpenLineage events, one JSON line each (docs/LINEAGE.md).
run: export AIRFLOW__OPENLINEAGE__TRANSPORT ?= {"type": "file", "log_file_path": "$(AIRFLOW_HOME)/openlineage-events.jsonl", "append": true}
run: export AIRFLOW__OPENLINEAGE__NAMESPACE ?= lakeprep
run: $(STAMP) $(AIRFLOW_HOME)/airflow.db
	$(BIN)/python -m lakeprep_airflow.run_dataset --dataset "$(DATASET)" --from "$(FROM)" --to "$(TO)" \
	  --lake "$(AIRFLOW_VAR_LAKEPREP_LAKE_ROOT)" --spark-cache $(VENV)/lakeprep-cache

# The flights dataset's real data for DEMO_FROM..DEMO_TO, landed and run.
demo: land-demo-data
	@$(MAKE) --no-print-directory run DATASET=flights FROM=$(DEMO_FROM) TO=$(DEMO_TO)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --no-loadscope-reorder --durations=25

# Benchmarks against the floor (benchmarks/, results in benchmarks/RESULTS.md): 1 M, 4 M and
# 16 M generated flights rows, niced so a shared machine stays usable. BENCH_ARGS adds options
# (e.g. BENCH_ARGS="--rows 1000000 --reps 2"). bench-quick is the 20 k-row smoke run
# (results in .bench/quick/) that `make test` runs through tests/benchmarks/.
bench: $(STAMP)
	nice -n 10 $(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-quick: $(STAMP)
	nice -n 10 $(BIN)/python -m benchmarks --quick $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# A real single-node HDFS, Spark standalone and YARN cluster on 127.0.0.1 (see docs/CLUSTERS.md).
cluster-up: $(STAMP)
	$(BIN)/python hadoop/cluster.py up --yarn
	@echo 'Spark standalone: eval "$$($(BIN)/python hadoop/cluster.py env)"'
	@echo 'Spark on YARN:    eval "$$($(BIN)/python hadoop/cluster.py env --yarn)"'

cluster-down:
	python3 hadoop/cluster.py down

# The real Airflow services (api-server, scheduler, dag-processor, triggerer) on PostgreSQL,
# on 127.0.0.1, state in .stack/ (see docs/OPERATIONS.md). Prints the UI URL and the login.
up: $(STAMP)
	$(BIN)/python ops/airflow_stack.py up

down:
	python3 ops/airflow_stack.py down

clean: cluster-down down
	rm -rf .lake .airflow .pytest_cache .cluster .stack
