#!/usr/bin/env bash
# The two paths of a PtahSchema change, end to end on the harness's
# PostgreSQL: (a) a ConfigMap edit to its plan published (Observe, Plan) and
# (b) the plan's approval to InSync (Apply, then the proof's Observe and
# Plan). Each run is split into Ptah's time (the runner's timing lines) and
# the operator's own (the rest), beside the floor: an empty Job from create
# to Complete. Usage: conformance/bench/schema-paths.sh [N] (after
# `ptah-harness up`). With RELEASE=1 the manager under test is the release
# build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export BENCH_RUNS=${1:-5}
cargo build --quiet --workspace --bins
if [ "${RELEASE:-0}" = 1 ]; then
  cargo build --quiet --release -p ptah-operator --bin ptah-operator
  export PTAH_OPERATOR_BIN="${CARGO_TARGET_DIR:-$root/target}/release/ptah-operator"
fi
exec cargo nextest run --workspace --config-file conformance/nextest.toml --profile bench --cargo-quiet \
  --run-ignored only --no-capture -E 'test(bench_schema_paths)'
