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
export BENCH_RUNS=${1:-5}
source "$(dirname "$0")/run-one.sh" bench_schema_paths
