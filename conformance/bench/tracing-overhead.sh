#!/usr/bin/env bash
# Tracing's cost, side by side in one run: a PtahSchema under Always on the
# harness's PostgreSQL edited N times under a manager exporting its traces
# (and its Jobs') to the harness's Jaeger, then under one exporting none:
# edit → plan published, edit → InSync, and the manager's CPU per pass (its
# /proc CPU time over the passes its /metrics counted). Usage:
# conformance/bench/tracing-overhead.sh [N] (after `ptah-harness up`). With
# RELEASE=1 the manager under test is the release build.
set -euo pipefail
export BENCH_RUNS=${1:-5}
source "$(dirname "$0")/run-one.sh" bench_tracing_overhead
