#!/usr/bin/env bash
# Installs everything the harness and the tests need on a fresh machine:
# Debian packages, the test runner, and the pinned Go tools (cached by pins).
# Safe to run again: each step is skipped when what it makes is present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/tools/pins.env"
say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Debian packages: PostgreSQL 15, MariaDB, bubblewrap (the process kubelet's
# sandbox), OpenSSH (the harness's git-over-SSH server), git, and envsubst
# (gettext-base) for the harness examples; iproute2 (the process kubelet's
# local route for Pod IPs) and python3 (the servers in the kubelet's network
# tests).
packages=(postgresql mariadb-server mariadb-client bubblewrap openssh-server openssh-client git curl gettext-base iproute2 python3)
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

# rustfmt and clippy come with the toolchain here; add them where they don't.
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

if ! cargo nextest --version 2>/dev/null | grep -q "$NEXTEST_VERSION"; then
  say "installing cargo-nextest $NEXTEST_VERSION (a few minutes, once)"
  cargo install --locked --quiet cargo-nextest --version "$NEXTEST_VERSION"
fi

say "building the pinned Go tools (cached; the first build takes ~20 minutes)"
bash "$here/tools/build.sh" >/dev/null
