#!/usr/bin/env bash
# The main job: installs what is missing, starts the local control plane and
# shows it working end to end. It leaves the harness running; stop it with
# `target/debug/ptah-harness down`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# As in test.sh: the same build, without incremental state.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
bash conformance/setup.sh demo
cargo build --workspace --bins --quiet
"${CARGO_TARGET_DIR:-target}"/debug/ptah-harness up
"${CARGO_TARGET_DIR:-target}"/debug/ptah-harness demo
