#!/usr/bin/env bash
# Installs Debian's postgresql server for the multi-host study test (tests/studies/test_postgres.py),
# which starts its own throwaway cluster on loopback. The driver (psycopg 3) comes with the `dev`
# extra.
#
# It never fails the caller: where it cannot install (not root, no apt-get, no package mirror) it
# says why and exits 0, and the test then skips with that reason.
# Usage: scripts/ensure_postgres.sh        (make test calls it before pytest)
set -u

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "ensure_postgres: $(ls -d /usr/lib/postgresql/*/ | head -1) already installed"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure_postgres: not root, cannot apt-get install postgresql; the PostgreSQL study test will be skipped"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_postgres: no apt-get on this machine; the PostgreSQL study test will be skipped"
    exit 0
fi
echo "ensure_postgres: installing Debian's postgresql (apt-get)"
export DEBIAN_FRONTEND=noninteractive
log=/tmp/ensure_postgres.log
# The package's own cluster is not needed (the test makes its own), so it is not started.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } >"$log" 2>&1; then
    echo "ensure_postgres: apt-get install postgresql failed (see $log); the PostgreSQL study test will be skipped"
    exit 0
fi
echo "ensure_postgres: installed $(ls -d /usr/lib/postgresql/*/ | head -1)"
exit 0
