"""lakeprep's Spark stages: each module is a pure transform plus a small `run` and `main`.

Shipped to the cluster with `--py-files lakeprep_jobs.zip`; Airflow refers to these
modules by path and argv, never by import.
"""
