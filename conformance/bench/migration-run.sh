#!/usr/bin/env bash
# A PtahMigration's approval to InSync for ten new versions at a time, end
# to end on the harness's PostgreSQL (the Apply Job, then the history read
# back), split into Ptah's time (the runner's timing lines) and the
# operator's own (the rest), beside the floor: an empty Job from create to
# Complete. Usage: conformance/bench/migration-run.sh [N] (after
# `ptah-harness up`). With RELEASE=1 the manager under test is the release
# build.
set -euo pipefail
export BENCH_RUNS=${1:-5}
source "$(dirname "$0")/run-one.sh" bench_migration_run
