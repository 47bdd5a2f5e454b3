#!/usr/bin/env bash
# Runs client-rust 0.4.0's own integration and fail-point tests against
# tikv-sim, with tikv-client 0.4.0 and with tikv-plan renamed to tikv_client
# (see src/main.rs). Arguments go to the runner (--mode, --variant, --jobs,
# --filter, --timeout). Builds in the workspace's target dir (or
# $CARGO_TARGET_DIR), so tikv-plan's and tikv-sim's dependencies are built once.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --quiet --manifest-path "$root/client-rust-suite/Cargo.toml"
exec "$CARGO_TARGET_DIR/debug/tikv-plan-client-rust-suite" "$@"
