#!/usr/bin/env bash
# Draws the README's pictures (SVG) from the CSV files under docs/img/data/,
# one command per picture:
#
#   perf/plot.sh ratios        docs/img/benchmark-ratios.svg  <- throughput.csv
#   perf/plot.sh leader-loss   docs/img/leader-loss.svg       <- failover.csv
#   perf/plot.sh cut-off       docs/img/cut-off.svg           <- cut-off-refuse.csv
#   perf/plot.sh chaos         docs/img/chaos-timeline.svg    <- chaos-timeline.csv
#   perf/plot.sh killed-bank   docs/img/killed-bank.svg       <- killed-bank.csv
#   perf/plot.sh week          docs/img/week.svg              <- week-restart.csv, week-crash.csv
#   perf/plot.sh all           the six
#
# With --run, the data is measured anew first (and written over the CSV
# files in docs/img/data/, the markdown or text output beside them):
#
#   ratios --run        perf/run.sh --only throughput --csv-dir docs/img/data
#                       (about 6 minutes; other options such as --rounds N
#                       pass through)
#   leader-loss --run   perf/run.sh --only failover --csv-dir docs/img/data
#   cut-off --run       perf/run.sh --only cut-off --csv-dir docs/img/data
#   week --run          perf/run.sh --only week --csv-dir docs/img/data
#                       (about 10 minutes)
#   killed-bank --run   perf/run.sh --only killed-bank --csv-dir docs/img/data
#                       (60 s per client; --bank-seconds N, --seed N pass through)
#   chaos --run         cargo run --release -p tikv-plan-chaos -- raw --seed 1
#                       --seconds 20 --timeline docs/img/data/chaos-timeline.csv
#                       (other options, e.g. --seed 2, pass through)
#
# --data DIR reads (and with --run writes) DIR instead of docs/img/data.
# The plotting program is perf/src/bin/plot.rs, built in release into
# PERF_TARGET_DIR (default perf/target/).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
perf_target="${PERF_TARGET_DIR:-$here/target}"

usage() {
    echo "usage: perf/plot.sh ratios|leader-loss|cut-off|chaos|killed-bank|week|all [--run] [--data DIR] [options for the run]" >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
picture="$1"
shift
case "$picture" in
    ratios | leader-loss | cut-off | chaos | killed-bank | week | all) ;;
    *) usage ;;
esac

run=false
data="$root/docs/img/data"
pass=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --run) run=true ;;
        --data)
            [[ $# -ge 2 ]] || usage
            data="$(mkdir -p "$2" && cd "$2" && pwd)"
            shift
            ;;
        *) pass+=("$1") ;;
    esac
    shift
done
if [[ "$run" == true && "$picture" == all ]]; then
    echo "perf/plot.sh: --run takes one picture at a time" >&2
    exit 2
fi
if [[ "$run" == false && ${#pass[@]} -gt 0 ]]; then
    echo "perf/plot.sh: ${pass[*]}: options for a run need --run" >&2
    exit 2
fi

status=0
if [[ "$run" == true ]]; then
    mkdir -p "$data"
    case "$picture" in
        ratios)
            "$here/run.sh" --only throughput --csv-dir "$data" "${pass[@]}" | tee "$data/throughput.md"
            ;;
        leader-loss)
            "$here/run.sh" --only failover --csv-dir "$data" "${pass[@]}" | tee "$data/failover.md"
            ;;
        cut-off)
            "$here/run.sh" --only cut-off --csv-dir "$data" "${pass[@]}" | tee "$data/cut-off.md"
            ;;
        week)
            "$here/run.sh" --only week --csv-dir "$data" "${pass[@]}" | tee "$data/week.md"
            ;;
        killed-bank)
            "$here/run.sh" --only killed-bank --csv-dir "$data" "${pass[@]}" | tee "$data/killed-bank.md"
            ;;
        chaos)
            # A run that finds a violation exits 1: draw it all the same,
            # then fail.
            (cd "$root" && cargo run --quiet --release -p tikv-plan-chaos -- raw --seed 1 --seconds 20 \
                --timeline "$data/chaos-timeline.csv" "${pass[@]}") | tee "$data/chaos-run.txt" || status=$?
            ;;
    esac
fi

echo "building the plotting program (release) ..." >&2
(cd "$here" && CARGO_TARGET_DIR="$perf_target" cargo build --quiet --release --bin plot)

# Relative to the repository root when inside it: the pictures name their
# data file.
shown="${data#"$root"/}"
draw() {
    (cd "$root" && "$perf_target/release/plot" "$1" --data "$shown" --out "docs/img/$2")
}
case "$picture" in
    ratios) draw ratios benchmark-ratios.svg ;;
    leader-loss) draw leader-loss leader-loss.svg ;;
    cut-off) draw cut-off cut-off.svg ;;
    chaos) draw chaos chaos-timeline.svg ;;
    killed-bank) draw killed-bank killed-bank.svg ;;
    week) draw week week.svg ;;
    all)
        draw ratios benchmark-ratios.svg
        draw leader-loss leader-loss.svg
        draw cut-off cut-off.svg
        draw chaos chaos-timeline.svg
        draw killed-bank killed-bank.svg
        draw week week.svg
        ;;
esac
exit "$status"
