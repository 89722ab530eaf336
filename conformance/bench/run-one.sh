# Sourced by the benchmark scripts: builds what the harness runs (the
# release manager with RELEASE=1) and runs the one benchmark test named in
# $1 with its output shown (ignored or not: the test command runs the path
# benchmarks once each, the scripts BENCH_RUNS times).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cargo build --quiet --workspace --bins
if [ "${RELEASE:-0}" = 1 ]; then
  cargo build --quiet --release -p ptah-operator --bin ptah-operator
  export PTAH_OPERATOR_BIN="${CARGO_TARGET_DIR:-$root/target}/release/ptah-operator"
fi
exec cargo nextest run --workspace --config-file conformance/nextest.toml --profile bench --cargo-quiet \
  --run-ignored all --no-capture -E "test($1)"
