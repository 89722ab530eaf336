#!/usr/bin/env bash
# The main job: installs what is missing, starts the local control plane and
# shows it working end to end. It leaves the harness running; stop it with
# `target/debug/ptah-harness down`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# As in test.sh: the same build, without incremental state.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
target=${CARGO_TARGET_DIR:-target}
bash conformance/setup.sh demo base
# The tools InSync needs while the Rust binaries build beside them: neither
# keeps both cores busy throughout (downloads, links).
bash conformance/setup.sh demo tools &
setup=$!
trap 'kill "$setup" 2>/dev/null || true' EXIT
# Only the binaries the demo runs (not the console, crdgen or the test
# registry); the same features as the test command's build, which reuses them.
cargo build --workspace --quiet --bin ptah-harness --bin process-kubelet --bin git-http-server \
  --bin ptah-operator --bin ptah-runner --bin kubectl-ptah
wait "$setup"
# kubectl and the tracing backend (about 6 minutes cold) build while the
# demo runs: the schema goes InSync without them, and the demo waits for
# this build only to show a trace and the commands to try next
# (`ptah-harness demo` reads these two variables).
mkdir -p "$target"
export PTAH_DEMO_LATER_LOG=$target/demo-later-build.log
bash conformance/setup.sh demo later >"$PTAH_DEMO_LATER_LOG" 2>&1 &
export PTAH_DEMO_LATER_BUILD=$!
trap 'kill "$PTAH_DEMO_LATER_BUILD" 2>/dev/null || true' EXIT
"$target"/debug/ptah-harness up
"$target"/debug/ptah-harness demo
wait "$PTAH_DEMO_LATER_BUILD"
trap - EXIT
