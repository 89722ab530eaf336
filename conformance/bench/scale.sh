#!/usr/bin/env bash
# The manager at scale (issue 26): N PtahSchemas (ConfigMap sources, half on
# PostgreSQL, half on MariaDB, over BENCH_DATABASES databases, 20 by
# default, several schemas sharing each with `sharedRealm`), all under
# `policy.apply: Always`, on one manager from a cold start to all InSync;
# then three intervals idle; then an edit to 10% of them until InSync again.
# Prints the manager's RSS and CPU at each phase, its API requests and
# writes per schema per interval (audit log), the reconcile queue's p50/p99
# wait, and the time to all InSync beside the floor (the run's Jobs × the
# empty-Job throughput measured in the same run), as lines for
# docs/performance.md. The test command runs a 12-schema scale of the same
# code (conformance/tests/scale.rs).
# Usage: conformance/bench/scale.sh [N] [INTERVAL]   (after `ptah-harness up`)
#        conformance/bench/scale.sh all [INTERVAL]   (100, 300, then 1000)
# N defaults to 100, INTERVAL to 5m; the idle window is 3 × INTERVAL.
# How long here (2 cores): the test command's 12-schema run takes about 3
# minutes, `scale.sh 100 2m` about 12, `scale.sh 300 5m` about 40, and
# `BENCH_DATABASES=100 scale.sh 1000 15m` 1 h 51 min (measured at
# f08f33c: a 49-minute cold start, 45 minutes idle, a 13-minute edit).
# At 1000 a 5m interval asks 2000 Jobs per interval, more than the harness
# completes: give 1000 INTERVAL=15m or more.
# With RELEASE=1 the manager under test is the release build.
set -euo pipefail
if [ "${1:-}" = all ]; then
  for n in 100 300 1000; do
    "$0" "$n" "${2:-5m}"
  done
  exit 0
fi
export BENCH_SCHEMAS=${1:-100} BENCH_INTERVAL=${2:-5m}
cd "$(dirname "$0")/../.."
echo "scale.sh: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ' (with uncommitted changes)'), $(date -u +%FT%TZ), $(nproc) cores"
source conformance/bench/run-one.sh bench_scale
