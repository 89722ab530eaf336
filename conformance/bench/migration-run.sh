#!/usr/bin/env bash
# A PtahMigration's approval to InSync for ten new versions at a time, end
# to end on the harness's PostgreSQL (the Apply Job, then the history read
# back), split into Ptah's time (the runner's timing lines) and the
# operator's own (the rest), beside the floor: an empty Job from create to
# Complete. Usage: conformance/bench/migration-run.sh [N] (after
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
  --run-ignored only --no-capture -E 'test(bench_migration_run)'
