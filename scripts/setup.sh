#!/usr/bin/env bash
# Installs what the tests and benchmarks need besides Rust: PostgreSQL's
# client programs (psql, pgbench) from Debian, used by the server tests.
# Idempotent; does nothing when they are already there.
set -euo pipefail

if command -v psql >/dev/null && command -v pgbench >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq postgresql-client >/dev/null
command -v psql >/dev/null && command -v pgbench >/dev/null || {
    echo "setup: postgresql-client did not provide psql and pgbench" >&2
    exit 1
}
