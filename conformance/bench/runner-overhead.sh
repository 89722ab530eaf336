#!/usr/bin/env bash
# Measures the runner's own cost per database operation beyond the Ptah
# child's run time (spawn, parse, check, deliver), on the harness: runs the
# executor end-to-end tests N times (a PtahSchema converging and a
# PtahMigration running, on PostgreSQL and MariaDB: Observe, Plan, Apply,
# History and migration Apply Jobs), then reads the `ptah-runner: timing`
# line every operation container writes and prints, per step, the count,
# the median and the largest runner time, beside Ptah's.
# Usage: conformance/bench/runner-overhead.sh [N]   (after `ptah-harness up`)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
runs=${1:-3}
cargo build --quiet --workspace --bins
source .harness/env
since=$(mktemp)
trap 'rm -f "$since"' EXIT
for _ in $(seq 1 "$runs"); do
  cargo nextest run --cargo-quiet -p conformance --config-file conformance/nextest.toml \
    --test executor_schema --test executor_migration >/dev/null 2>&1
done
# The operation containers' logs written since the runs began.
find "$PTAH_KUBELET_DIR/pods" -name 'ptah.log' -newer "$since" -print0 |
  xargs -0 grep -h '^ptah-runner: timing ' |
  awk '
    {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      step = f["step"]; n[step]++
      runner[step, n[step]] = f["runner_ms"]; ptah[step, n[step]] = f["ptah_ms"]
    }
    function median(a, s, k,   i, j, t, v) {
      for (i = 1; i <= k; i++) v[i] = a[s, i] + 0
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      return v[int((k + 1) / 2)]
    }
    function largest(a, s, k,   i, m) {
      m = 0; for (i = 1; i <= k; i++) if (a[s, i] + 0 > m) m = a[s, i] + 0
      return m
    }
    END {
      printf "%-8s %5s %16s %16s %14s\n", "step", "runs", "runner median ms", "runner max ms", "ptah median ms"
      for (s in n) printf "%-8s %5d %16d %16d %14d\n", s, n[s], median(runner, s, n[s]), largest(runner, s, n[s]), median(ptah, s, n[s])
    }'
