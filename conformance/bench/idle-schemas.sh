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
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export BENCH_SCHEMAS=${1:-200} BENCH_INTERVAL=${2:-2m}
cargo build --quiet --workspace --bins
if [ "${RELEASE:-0}" = 1 ]; then
  cargo build --quiet --release -p ptah-operator --bin ptah-operator
  export PTAH_OPERATOR_BIN="${CARGO_TARGET_DIR:-$root/target}/release/ptah-operator"
fi
exec cargo nextest run --workspace --config-file conformance/nextest.toml --profile bench --cargo-quiet \
  --run-ignored only --no-capture -E 'test(bench_idle_schemas)'
