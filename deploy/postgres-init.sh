#!/bin/sh
# PostgreSQL's first start in deploy/compose.yaml (the postgres image runs this once, as its
# superuser, when the data volume is empty): two roles, so a compromised replica cannot touch the
# audit log's append-only trigger (docs/deploy.md, "The audit log is append-only twice").
# - toolgate_owner owns the database and, once `toolgate bridge migrate` has run as it (the
#   compose's `migrate` service), every table and the trigger. Nothing else logs in as it.
# - toolgate is the replicas' role: it may connect and owns nothing, so the migration's grants
#   are all it has (SELECT and INSERT on `audit`; no UPDATE, DELETE, TRUNCATE, ALTER or DROP).
# The passwords come from the environment (psql 15's \getenv): they never appear in this file or
# in a command line.
set -e   # no -u: the image sources this file when it is not executable
: "${TOOLGATE_OWNER_PASSWORD:?set TOOLGATE_OWNER_PASSWORD}"
: "${TOOLGATE_DB_PASSWORD:?set TOOLGATE_DB_PASSWORD}"
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres <<'SQL'
\getenv owner_password TOOLGATE_OWNER_PASSWORD
\getenv app_password TOOLGATE_DB_PASSWORD
CREATE ROLE toolgate_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE toolgate LOGIN PASSWORD :'app_password';
CREATE DATABASE toolgate OWNER toolgate_owner;
REVOKE CONNECT ON DATABASE toolgate FROM PUBLIC;
GRANT CONNECT ON DATABASE toolgate TO toolgate_owner, toolgate;
SQL
