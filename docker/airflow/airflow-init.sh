#!/usr/bin/env bash
# One-shot setup of the compose stack, run by the airflow-init service as root (as the
# official Airflow docker-compose.yaml runs its airflow-init).
#
#   1. Migrate the metadata database. Called directly rather than through the image
#      entrypoint's _AIRFLOW_DB_MIGRATE switch, which runs `airflow db migrate || true` and
#      so would let the other Airflow services start against a half-migrated database.
#   2. Create the admin user. `airflow users create` (FAB auth manager) leaves an existing
#      user as it is, so a restart does not fail; changing the password in .env afterwards
#      does not change the stored one.
#   3. Give the shared logs volume to AIRFLOW_UID, the user every other Airflow container
#      runs as.
#
# /entrypoint (the official image's) waits for the database, puts the airflow user's
# packages on the path when run as root, then executes the airflow command given.
set -euo pipefail

: "${AIRFLOW_UID:?AIRFLOW_UID must be set; docker-compose.yaml passes it from .env}"
: "${_AIRFLOW_WWW_USER_USERNAME:?the admin user name must be set (AIRFLOW_ADMIN_USERNAME in .env)}"
: "${_AIRFLOW_WWW_USER_PASSWORD:?the admin password must be set (AIRFLOW_ADMIN_PASSWORD in .env)}"

/entrypoint airflow db migrate

/entrypoint airflow users create \
  --username "${_AIRFLOW_WWW_USER_USERNAME}" \
  --password "${_AIRFLOW_WWW_USER_PASSWORD}" \
  --firstname Airflow \
  --lastname Admin \
  --email "${_AIRFLOW_WWW_USER_EMAIL:-admin@example.com}" \
  --role Admin

mkdir -p /opt/airflow/logs
chown -R "${AIRFLOW_UID}:0" /opt/airflow/logs

/entrypoint airflow version
