#!/usr/bin/env bash
# Installs what the tests and benchmarks need besides Rust.
#
#   bash scripts/setup.sh           what the server tests drive Stride with:
#                                   psql and pgbench (Debian's postgresql-client),
#                                   Java and pgjdbc (Debian), psycopg,
#                                   asyncpg, SQLAlchemy and pandas (PyPI,
#                                   scripts/requirements-test.txt)
#   bash scripts/setup.sh --peers   also the peer comparison (scripts/peers.py):
#                                   PostgreSQL's server (Debian's postgresql) and
#                                   duckdb + psycopg (PyPI, scripts/requirements.txt)
#
# Idempotent; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")"

peers=0
case "${1:-}" in
    "") ;;
    --peers) peers=1 ;;
    *) echo "usage: bash scripts/setup.sh [--peers]" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() {
    if [ "$apt_updated" = 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
    $SUDO apt-get install -y -qq "$@" >/dev/null
}

if ! command -v psql >/dev/null || ! command -v pgbench >/dev/null; then
    apt_install postgresql-client
    command -v psql >/dev/null && command -v pgbench >/dev/null || {
        echo "setup: postgresql-client did not provide psql and pgbench" >&2
        exit 1
    }
fi

if ! command -v java >/dev/null; then
    apt_install default-jre-headless
fi
if [ ! -f /usr/share/java/postgresql.jar ]; then
    apt_install libpostgresql-jdbc-java
fi
if ! python3 -c "import psycopg, sqlalchemy, asyncpg, pandas" 2>/dev/null; then
    python3 -m pip install -q -r requirements-test.txt
fi

if [ "$peers" = 1 ]; then
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt_install postgresql
    fi
    python3 -m pip install -q -r requirements.txt
fi
