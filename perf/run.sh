#!/usr/bin/env bash
# Side-by-side benchmark: builds tikv-sim and this crate in release, then
# runs tikv-plan-perf, which starts its own tikv-sim child processes and
# prints markdown tables on stdout (progress on stderr).
#
#   perf/run.sh [--quick] [--no-csv] [other tikv-plan-perf options]
#
# --quick    a smoke run (seconds, not minutes; the numbers mean nothing)
# --no-csv   write no CSV files (by default the figures also go to
#            perf/results/*.csv, or to the directory --csv-dir DIR names)
# Other options go to the program: --rounds N, --window-ms MS,
# --only throughput|faults|failover|dead-store|cut-off|contention|replicas|slow-store|week|killed-bank,
# --csv-dir DIR (killed-bank also takes --bank-seconds N and --seed N).
#
# Target dirs can be overridden: SIM_TARGET_DIR (tikv-plan) and
# PERF_TARGET_DIR (this crate).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sim_target="${SIM_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
perf_target="${PERF_TARGET_DIR:-$here/target}"

args=()
csv=("--csv-dir" "$here/results")
for arg in "$@"; do
    case "$arg" in
        --no-csv) csv=() ;;
        --csv-dir) csv=(); args+=("$arg") ;;
        *) args+=("$arg") ;;
    esac
done

echo "building tikv-sim (release) ..." >&2
(cd "$root" && CARGO_TARGET_DIR="$sim_target" cargo build --quiet --release -p tikv-sim --bin tikv-sim)
echo "building tikv-plan-perf (release) ..." >&2
(cd "$here" && CARGO_TARGET_DIR="$perf_target" cargo build --quiet --release --bin tikv-plan-perf)

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
label="$(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
exec "$perf_target/release/tikv-plan-perf" --sim "$sim_target/release/tikv-sim" \
    --label "$label" "${csv[@]}" "${args[@]}"
