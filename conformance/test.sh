#!/usr/bin/env bash
# Runs every test: installs what is missing, checks formatting and lints,
# starts the local control plane, runs the whole workspace's tests on it, and
# stops what it started. The last line is the test runner's own summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$SECONDS
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# A fresh checkout gains nothing from incremental state; it doubled the
# target dir and once filled CI's disk.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

bash conformance/setup.sh test base
# The test runner and the Go tools build beside the checks and the Rust
# build: none of them keeps both cores busy throughout.
bash conformance/setup.sh test tools &
setup=$!
trap 'kill "$setup" 2>/dev/null || true' EXIT
say "cargo fmt --check"
cargo fmt --all --check
say "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
say "building"
cargo build --workspace --bins --quiet
# The test binaries too, while the tools still build: the test runner's
# own build below then finds them made (three minutes saved fresh).
cargo test --workspace --no-run --quiet 2>/dev/null || true
wait "$setup"
trap - EXIT
cargo nextest run --workspace --config-file conformance/nextest.toml --no-run --cargo-quiet

harness=${CARGO_TARGET_DIR:-target}/debug/ptah-harness
mkdir -p .harness
trap '"$harness" down >.harness/down.log 2>&1 || cat .harness/down.log >&2' EXIT
say "starting the local control plane"
"$harness" up
say "ready after $((SECONDS - start))s; running the tests"
cargo nextest run --workspace --config-file conformance/nextest.toml --cargo-quiet
