#!/usr/bin/env bash
# Measures `ptah-harness up` on a state dir of its own: once cold (new PKI,
# initdb, mariadb-install-db) and N times warm (state kept, processes stopped),
# to a ready API server, Ready node and both databases. The numbers go into
# docs/performance.md. Usage: conformance/bench/harness-up.sh [N]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
runs=${1:-3}
cargo build --quiet -p conformance --bins
harness=${CARGO_TARGET_DIR:-target}/debug/ptah-harness
state=$(mktemp -d /tmp/ptah-bench-XXXXXX)
chmod 755 "$state"
trap '"$harness" --state-dir "$state" down >/dev/null 2>&1; rm -rf "$state"' EXIT

now() { date +%s.%N; }
measure() {
  local t0 t1
  t0=$(now)
  "$harness" --state-dir "$state" up 2>/dev/null
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}

printf 'cold up: %.1fs\n' "$(measure)"
"$harness" --state-dir "$state" down >/dev/null 2>&1
for i in $(seq "$runs"); do
  printf 'warm up %d: %.1fs\n' "$i" "$(measure)"
  "$harness" --state-dir "$state" down >/dev/null 2>&1
done
