#!/usr/bin/env bash
# Dump the WGSL of every kernel the tour compiles, for a before/after proof that a change to
# a code-generator change leaves the generated WGSL byte for byte as it was.
#
#   scripts/wgsl_dump.sh OUTDIR
#
# Runs the tour (`cargo run --example tour`: the debug build, i.e. its quick run, as
# scripts/test.sh does) with BRIGADE_DUMP_WGSL=OUTDIR, so `Device::kernel` writes each kernel it
# is given as OUTDIR/<label>-<16 hex of FNV-1a 64 of the text>.wgsl, then prints the sorted file
# names (the manifest) and their count. BRIGADE_MATMUL_TUNE=off: the measured matmul search would
# otherwise pick kernels by timing, which differs between runs; the heuristic's pick does not.
#
# The proof, on one machine (the same adapters and the same BRIGADE_DEVICES, since kernels
# depend on each device's limits):
#
#   git switch main        && scripts/wgsl_dump.sh /tmp/wgsl-before
#   git switch my-refactor && scripts/wgsl_dump.sh /tmp/wgsl-after
#   diff -r /tmp/wgsl-before /tmp/wgsl-after && echo "the generated WGSL is unchanged"
#
# A changed text shows as a pair of "Only in" lines (its hash changed); `diff` the two files to
# see how. The golden test (`cargo test --test wgsl_golden`, tests/data/wgsl_manifest.txt) pins
# a wider corpus (every primitive family, three limit sets) without a GPU; its failure message says
# how to dump and diff those texts.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -ne 1 || $1 == -* ]]; then
    echo "usage: $0 OUTDIR   (dumps the tour's WGSL into OUTDIR, which must be empty or absent)" >&2
    exit 2
fi
out=$1
if [[ -e $out && -n "$(ls -A "$out" 2>/dev/null)" ]]; then
    echo "error: $out is not empty: files of an earlier run would mix into this dump; remove it or name another directory" >&2
    exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
# brigade only logs a file it cannot write (the tour installs no logger), so check up front.
if [[ ! -w $out ]]; then
    echo "error: $out is not writable" >&2
    exit 2
fi

if [[ -z "${XDG_RUNTIME_DIR:-}" ]]; then
    # EGL (wgpu's GL backend) needs it, as in scripts/test.sh.
    export XDG_RUNTIME_DIR="/tmp/xdg-runtime-$(id -u)"
    mkdir -p -m700 "$XDG_RUNTIME_DIR"
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! BRIGADE_DUMP_WGSL="$out" BRIGADE_MATMUL_TUNE=off cargo run --example tour >"$log" 2>&1; then
    cat "$log" >&2
    echo "error: the tour failed (output above); the dump in $out is incomplete" >&2
    exit 1
fi

count=$(find "$out" -maxdepth 1 -name '*.wgsl' | wc -l)
if (( count == 0 )); then
    cat "$log" >&2
    echo "error: the tour ran but no WGSL was written to $out" >&2
    exit 1
fi
(cd "$out" && LC_ALL=C ls -1 -- *.wgsl | LC_ALL=C sort)
echo "$count kernels in $out (devices: ${BRIGADE_DEVICES:-every adapter})"
