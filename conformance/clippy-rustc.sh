#!/bin/sh
# The test command compiles the workspace's own crates through Clippy
# (RUSTC_WORKSPACE_WRAPPER): each is linted as it is built, the lints of
# `cargo clippy --all-targets -- -D warnings`, so the dependencies are not
# compiled a second time in check mode for a separate `cargo clippy`.
# Cargo calls a wrapper as `wrapper RUSTC ARGS...`; clippy-driver takes the
# same form.
exec clippy-driver "$@" -D warnings
