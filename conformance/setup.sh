#!/usr/bin/env bash
# Installs what a command needs on a fresh machine: Debian packages, and for
# the tests the test runner and lints, and the pinned Go tools that command
# uses (cached by pins).
# Usage: setup.sh [demo|test] [all|base|tools|later]   (test and all by default)
#   base: the Debian packages and, for the tests, rustfmt and clippy;
#   tools: the test runner (tests) and the pinned Go tools. The test command
#   runs `base` first, then `tools` beside its Rust build.
#   later: what the demo uses only after its schema is InSync: kubectl (for
#   the commands it closes with) and the tracing backend (Jaeger, about 5
#   minutes cold). The demo's `tools` leave them out, so the demo builds
#   them while it runs and waits for them only to show its trace.
# The demo needs no test runner and none of the tools only tests use (Flux,
# Argo CD's health engine, helm, promtool, cosign, the registry).
# Safe to run again: each step is skipped when what it makes is present.
set -euo pipefail
command=${1:-test}
part=${2:-all}
usage="usage: setup.sh [demo|test] [all|base|tools|later]"
case $command in demo | test) ;; *) echo "$usage" >&2; exit 2 ;; esac
case $part in all | base | tools | later) ;; *) echo "$usage" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
source "$here/tools/pins.env"
say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Debian packages: PostgreSQL 15, MariaDB, bubblewrap (the process kubelet's
# sandbox), OpenSSH (the harness's git-over-SSH server), git, and envsubst
# (gettext-base) for the harness examples; iproute2 (the process kubelet's
# local route for Pod IPs) and python3 (the servers in the kubelet's network
# tests).
if [ "$part" = all ] || [ "$part" = base ]; then
packages=(postgresql mariadb-server mariadb-client bubblewrap openssh-server openssh-client git curl gettext-base iproute2 python3)
# The console's browser test: headless chromium through chromium-driver.
[ "$command" = test ] && packages+=(chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # The harness runs its own database servers; keep the packages' services off.
  policy=/usr/sbin/policy-rc.d; made_policy=0
  if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' | $sudo tee $policy >/dev/null; $sudo chmod +x $policy; made_policy=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  [ $made_policy = 1 ] && $sudo rm -f $policy
fi

if [ "$command" = test ]; then
  # rustfmt and clippy come with the toolchain here; add them where they don't.
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
fi
[ "$part" = base ] && exit 0

runner=""
if [ "$command" = test ] && [ "$part" != later ]; then
  # The test runner builds beside the Go tools: neither keeps both cores
  # busy throughout (downloads, links).
  if ! cargo nextest --version 2>/dev/null | grep -q "$NEXTEST_VERSION"; then
    say "installing cargo-nextest $NEXTEST_VERSION beside the tools (a few minutes on 2 cores, once)"
    # Without self-update (nextest's advice for CI builds): fewer crates.
    # The debug profile: the runner starts processes and waits on them, and
    # an optimised build cost minutes of a fresh run's two cores.
    cargo install --locked --quiet --debug cargo-nextest --version "$NEXTEST_VERSION" \
      --no-default-features --features default-no-update &
    runner=$!
  fi
fi

# The command's tools (as listed); kubectl and the tracing backend are the
# `later` part alone, and the demo's `tools` leave them to that part.
later() { [ "$1" = kubectl ] || [ "$1" = jaeger ]; }
read -ra listed <<<"$(bash "$here/tools/build.sh" --list "$command")"
tools=()
for t in "${listed[@]}"; do
  if [ "$part" = later ]; then
    later "$t" || continue
  elif [ "$command:$part" = demo:tools ] && later "$t"; then
    continue
  fi
  tools+=("$t")
done
say "the pinned Go tools the $command uses (cached by their pins): ${tools[*]}"
bash "$here/tools/build.sh" "${tools[@]}" >/dev/null
if [ -n "$runner" ]; then
  wait "$runner"
  say "cargo-nextest $NEXTEST_VERSION installed"
fi
