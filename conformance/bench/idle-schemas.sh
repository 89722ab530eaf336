#!/usr/bin/env bash
# The manager at scale: N PtahSchemas (ConfigMap sources on the harness's
# PostgreSQL, each on a database of its own that holds the declared table)
# read every INTERVAL by one manager. Over one read cycle of every schema it
# prints the manager's memory, its requests and writes per schema from the
# API server's audit log, and how late each due pass started (the reconcile
# queue's wait). Usage: conformance/bench/idle-schemas.sh [N] [INTERVAL]
# (after `ptah-harness up`; 200 schemas take about 15 minutes here).
# With RELEASE=1 the manager under test is the release build.
set -euo pipefail
export BENCH_SCHEMAS=${1:-200} BENCH_INTERVAL=${2:-2m}
source "$(dirname "$0")/run-one.sh" bench_idle_schemas
