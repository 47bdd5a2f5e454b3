#!/usr/bin/env bash
# A second client no one here wrote: tikv-python 0.1.1 (a pure-Python raw
# client, grpcio) runs its own integration tests (tests/test_integration.py,
# written against TiKV 8.5 in its CI) against tikv-sim. The sdist comes from
# PyPI at run time into a temporary folder (never into this repository) and
# is installed with pytest into a virtual environment there. Starts
# `tikv-sim --stores 3 --regions 8` (API v1, the client's default) on free
# ports, runs `pytest -m integration`, stops the sim; exits with pytest's
# status.
#
# Needs python3 with venv and pip, and PyPI. SIM_TARGET_DIR (default
# $CARGO_TARGET_DIR, else target/) is where tikv-sim is built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
sim_target="${SIM_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}}"
version="0.1.1"

echo "building tikv-sim ..." >&2
(cd "$root" && CARGO_TARGET_DIR="$sim_target" cargo build --quiet -p tikv-sim --bin tikv-sim)

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

echo "installing tikv-python $version from PyPI into a virtual environment ..." >&2
python3 -m venv "$workdir/venv"
pip="$workdir/venv/bin/pip"
"$pip" install --quiet --disable-pip-version-check "pytest>=8" "pytest-asyncio>=0.24"
"$pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$workdir/sdist" "tikv-python==$version"
tar -xzf "$workdir/sdist/tikv_python-$version.tar.gz" -C "$workdir"
src="$workdir/tikv_python-$version"
"$pip" install --quiet --disable-pip-version-check "$src"

mkfifo "$workdir/sim.out"
"$sim_target/debug/tikv-sim" --stores 3 --regions 8 --pd 127.0.0.1:0 \
    >"$workdir/sim.out" 2>"$workdir/sim.err" &
sim_pid=$!
exec 3<"$workdir/sim.out"
if ! read -r -t 30 line <&3; then
    echo "tikv-sim printed no pd= line within 30 s; its stderr:" >&2
    cat "$workdir/sim.err" >&2
    exit 1
fi
pd="${line#pd=}"
echo "tikv-sim is up: $line" >&2

# The tests' own knobs: the PD endpoints; the idle test keeps its default.
cd "$src"
status=0
TIKV_PD_ENDPOINTS="$pd" "$workdir/venv/bin/python" -m pytest -m integration \
    tests/test_integration.py -p no:cacheprovider -q || status=$?
exec 3<&-
exit "$status"
