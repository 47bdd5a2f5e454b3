#!/usr/bin/env bash
# Interop check: builds tikv-sim and this crate, starts a 3-store, 4-Region
# simulated cluster on a free port, runs the standard Rust TiKV client
# (tikv-client from crates.io) against its PD address, raw KV then
# transactions, and stops the sim.
# Exits with the interop program's status.
#
# Target dirs can be overridden: SIM_TARGET_DIR (tikv-plan) and
# INTEROP_TARGET_DIR (this crate).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sim_target="${SIM_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
interop_target="${INTEROP_TARGET_DIR:-$here/target}"

echo "building tikv-sim ..." >&2
(cd "$root" && CARGO_TARGET_DIR="$sim_target" cargo build --quiet -p tikv-sim --bin tikv-sim)
echo "building the interop client ..." >&2
(cd "$here" && CARGO_TARGET_DIR="$interop_target" cargo build --quiet)

workdir="$(mktemp -d)"
sim_pid=""
cleanup() {
    if [[ -n "$sim_pid" ]]; then
        kill "$sim_pid" 2>/dev/null || true
        wait "$sim_pid" 2>/dev/null || true
    fi
    rm -rf "$workdir"
}
trap cleanup EXIT

mkfifo "$workdir/sim.out"
"$sim_target/debug/tikv-sim" --stores 3 --regions 4 --pd 127.0.0.1:0 \
    >"$workdir/sim.out" 2>"$workdir/sim.err" &
sim_pid=$!

# The sim prints exactly one stdout line, pd=ADDR, once every server listens.
exec 3<"$workdir/sim.out"
if ! read -r -t 30 line <&3; then
    echo "tikv-sim printed no pd= line within 30 s; its stderr:" >&2
    cat "$workdir/sim.err" >&2
    exit 1
fi
pd="${line#pd=}"
if [[ "$line" != pd=* || -z "$pd" ]]; then
    echo "unexpected first line from tikv-sim: $line" >&2
    exit 1
fi
echo "tikv-sim is up: $line ($(grep -m1 '^control=' "$workdir/sim.err" || echo 'control=?'))" >&2

status=0
"$interop_target/debug/tikv-plan-interop" --pd "$pd" || status=$?
if [[ "$status" == 0 ]]; then
    "$interop_target/debug/tikv-plan-interop-txn" --pd "$pd" || status=$?
fi
exec 3<&-
exit "$status"
