#!/usr/bin/env bash
# The main job: installs what is missing, starts the local control plane and
# shows it working end to end. It leaves the harness running; stop it with
# `target/debug/ptah-harness down`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# As in test.sh: the same build, without incremental state.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# The Debian packages and the demo's tools while the Rust binaries build
# beside them: neither keeps both cores busy throughout (downloads, links).
bash conformance/setup.sh demo &
setup=$!
trap 'kill "$setup" 2>/dev/null || true' EXIT
cargo build --workspace --bins --quiet
wait "$setup"
trap - EXIT
"${CARGO_TARGET_DIR:-target}"/debug/ptah-harness up
"${CARGO_TARGET_DIR:-target}"/debug/ptah-harness demo
