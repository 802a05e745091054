#!/usr/bin/env bash
# One-shot benchmark of brigade on a lent GPU machine (docs/PERFORMANCE.md, "A real
# GPU"). That machine has no Rust toolchain, no Vulkan loader and no network, and a session gets
# 15 minutes of device time in all, so everything is built here and carried in `.device/` (ignored).
#
#   scripts/device_bench.sh prepare   here: builds the release bench binary and the first_call
#                                     example, strips them into .device/, downloads the Vulkan
#                                     loader and EGL/GL libraries (amd64 .debs) into .device/gl/,
#                                     checks the size and prints the device `run` call to make.
#   scripts/device_bench.sh tour      on the device machine: examples/tour alone on vulkan:4
#   scripts/device_bench.sh probe     on the device machine, after `run`: where a matmul call's
#                                     time goes (see probe() below)
#   scripts/device_bench.sh run       on the device machine, as root, in the repo root (what that
#                                     `run` call executes): unpacks the .debs into /, then runs the
#                                     benchmarks with a hard timeout per step (about 7 minutes in
#                                     all) and writes under $OUT:
#       env.log            nvidia-smi, loader/ICD set-up, the adapters brigade sees (first_call)
#       bench.log          brigade's bench tables on vulkan:1 (and the gl:1 run appended, if any)
#       bench.tsv          every row, tab-separated: device, id, median ms, first-call ms, rate,
#                          unit, runs (brigade's BRIGADE_BENCH_OUT; JAX rows as device jax:gpu)
#       matmul_search.log  the measured matmul kernel search, per candidate: first_call's at 256³
#                          on each adapter, the vulkan bench run's at every size
#                          (RUST_LOG=brigade::device::tune=debug), and the choices it cached
#       jax.log            scripts/device_jax_ref.py: the same work in JAX on that GPU
#       bench_repeat.tsv   the repeat pass's rows (see DEVICE_BENCH_REPEAT)
#       tour.log           examples/tour on vulkan:4: every scenario, each result checked
#       summary.txt        the summary printed at the end
#
# Environment of `run` (for a simulation on a machine without a GPU):
#   DEVICE_BENCH_QUICK=1      small sizes (matmul 256,512; 2^20 elements)
#   DEVICE_BENCH_MATMUL, DEVICE_BENCH_ELEMS   other sizes (a comma list of n; f32 elements)
#   DEVICE_BENCH_NO_DEBS=1    do not unpack the .debs (never unpack them into / of this machine:
#                             `run` refuses to unless it sees an NVIDIA driver, or
#                             DEVICE_BENCH_FORCE_DEBS=1)
#   DEVICE_BENCH_REPEAT=0     skip the repeat pass (matmul up and down the sizes, then the
#                             bandwidth rows with 20 timed runs each, into bench_repeat.tsv)
#   DEVICE_BENCH_TOTAL_S      the whole run's time budget in seconds (default 420)
#   DEVICE_BENCH_PEAK_GFLOPS  the fp32 peak the matmul rows are set against (default 67000, the
#                             H200 SXM datasheet's non-tensor fp32 figure)
#   OUT                       where results go (set by the device tool; default /tmp/device_bench_out)
# Without an NVIDIA driver, JAX runs on its cpu platform (JAX_PLATFORMS=cpu) unless JAX_PLATFORMS is set.

set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEV_DIR=.device
MAX_DEVICE_BYTES=$((50 * 1024 * 1024))
GL_DEBS=(libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
NVIDIA_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
NVIDIA_EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
DEVICE_COMMAND='bash scripts/device_bench.sh run'
DEVICE_TIMEOUT_S=500

die() {
    echo "device_bench: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# The path of the executable of `target` ("bench" or "first_call") in cargo's JSON messages.
executable_of() {
    python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == name:
        print(m["executable"])
' "$1" | tail -n 1
}

prepare() {
    set -e
    command -v cargo >/dev/null || die "prepare needs cargo"
    command -v python3 >/dev/null || die "prepare needs python3"
    [ "$(uname -m)" = x86_64 ] || die "the device machine is x86-64: build on an x86-64 machine (uname -m: $(uname -m))"
    if ! git check-ignore -q "$DEV_DIR"; then
        echo "/$DEV_DIR" >>.gitignore
        echo "added /$DEV_DIR to .gitignore"
    fi
    rm -rf "$DEV_DIR"
    mkdir -p "$DEV_DIR/gl"

    echo "== building the bench binary (release)"
    local json exe fc tour
    json=$(mktemp)
    nice -n 19 cargo bench --bench bench --no-run --message-format=json >"$json"
    exe=$(executable_of bench <"$json")
    [ -x "$exe" ] || die "no bench executable in cargo's output"
    echo "== building the first_call example (adapters + the matmul search's debug log)"
    nice -n 19 cargo build --release --example first_call --message-format=json >"$json"
    fc=$(executable_of first_call <"$json")
    [ -x "$fc" ] || die "no first_call executable in cargo's output"
    echo "== building the tour example (every scenario, each result checked)"
    nice -n 19 cargo build --release --example tour --message-format=json >"$json"
    tour=$(executable_of tour <"$json")
    [ -x "$tour" ] || die "no tour executable in cargo's output"
    rm -f "$json"
    local name src
    for name in bench first_call tour; do
        case $name in bench) src=$exe ;; first_call) src=$fc ;; tour) src=$tour ;; esac
        if command -v strip >/dev/null; then
            strip -o "$DEV_DIR/$name" "$src"
        else
            cp "$src" "$DEV_DIR/$name"
        fi
    done

    echo "== downloading the Vulkan loader and EGL/GL libraries (amd64 .debs)"
    # A private apt state (lists and cache) under /tmp: the system's apt state stays untouched.
    local apt=/tmp/brigade-device-apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    local o=(-q -oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oAPT::Sandbox::User=root
        "-oDir::State::Lists=$apt/lists" "-oDir::Cache=$apt/cache")
    apt-get "${o[@]}" update >/dev/null || die "apt-get update (private lists in $apt) failed"
    (cd "$DEV_DIR/gl" && apt-get "${o[@]}" download "${GL_DEBS[@]}") ||
        die "apt-get download failed"
    local n
    n=$(find "$DEV_DIR/gl" -name '*.deb' | wc -l)
    [ "$n" -eq "${#GL_DEBS[@]}" ] || die "expected ${#GL_DEBS[@]} .debs in $DEV_DIR/gl, found $n"

    # scripts/device_jax_ref.py is tracked: it travels with the working tree.
    [ -f scripts/device_jax_ref.py ] || die "scripts/device_jax_ref.py is missing"
    python3 -m py_compile scripts/device_jax_ref.py
    rm -rf scripts/__pycache__

    {
        echo "built $(date -u +%FT%TZ) on $(uname -srm)"
        echo "git $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src shaders benches examples Cargo.toml Cargo.lock || echo ' + uncommitted changes')"
        rustc --version
        (cd "$DEV_DIR" && sha256sum bench first_call tour gl/*.deb)
    } >"$DEV_DIR/MANIFEST"

    local bytes tree
    bytes=$(du -sb "$DEV_DIR" | cut -f1)
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -n 1 | cut -f1)
    echo
    du -ah "$DEV_DIR" | sort -k2
    echo "$DEV_DIR: $bytes bytes ($((bytes / 1024 / 1024)) MiB); the working tree that travels with it: $((tree / 1024 / 1024)) MiB (limit 64 MiB in all)"
    if [ "$bytes" -gt "$MAX_DEVICE_BYTES" ]; then
        die "$DEV_DIR is over $((MAX_DEVICE_BYTES / 1024 / 1024)) MiB: too large to carry"
    fi
    if [ $((bytes + tree)) -gt $((60 * 1024 * 1024)) ]; then
        die "$DEV_DIR and the working tree together are over 60 MiB (the device tool's limit is 64)"
    fi
    cat <<EOF

Ready. On a session lent a device machine (status: can_start_another true), make ONE call:

  run(command: "$DEVICE_COMMAND",
      carry: [".device"],
      timeout_s: $DEVICE_TIMEOUT_S)

It ends in about 7 minutes at most (a timeout per step). Results come back under files_at:
env.log, bench.log, bench.tsv, matmul_search.log, jax.log, summary.txt; the summary is also at
the end of output_tail. Then give_back, unless rerunning at once.
EOF
}

# --- run (on the device machine) ---------------------------------------------------------------

# Seconds for the next step: at most $1, leaving $2 for the steps after it (at least 10).
budget() {
    local left=$((TOTAL_S - SECONDS - $2))
    [ "$left" -gt "$1" ] && left=$1
    [ "$left" -lt 10 ] && left=10
    echo "$left"
}

# Any Vulkan ICD manifest where the loader looks by default.
have_system_icd() {
    local d
    for d in /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
        compgen -G "$d/*.json" >/dev/null && return 0
    done
    return 1
}

have_system_egl_vendor() {
    local d
    for d in /etc/glvnd/egl_vendor.d /usr/share/glvnd/egl_vendor.d; do
        compgen -G "$d/*.json" >/dev/null && return 0
    done
    return 1
}

# Unpacks the carried .debs (on the device machine only), points the loaders at the NVIDIA
# driver's manifests where they would not find them, and prints what the machine has.
setup_env() {
    local quick=$1 has_nvidia=$2
    echo "# device_bench run $(date -u +%FT%TZ) on $(uname -srm), $(nproc) cores; quick=$quick"
    [ -f "$DEV_DIR/MANIFEST" ] && sed 's/^/manifest: /' "$DEV_DIR/MANIFEST"
    if [ "${DEVICE_BENCH_NO_DEBS:-0}" = 1 ]; then
        echo "== .debs: not unpacked (DEVICE_BENCH_NO_DEBS=1)"
    elif [ "$has_nvidia" = 1 ] || [ "${DEVICE_BENCH_FORCE_DEBS:-0}" = 1 ]; then
        echo "== unpacking the .debs of $DEV_DIR/gl into /"
        local f
        for f in "$DEV_DIR"/gl/*.deb; do dpkg -x "$f" / || echo "dpkg -x $f failed"; done
        ldconfig
    else
        echo "== .debs: not unpacked (no NVIDIA driver seen; DEVICE_BENCH_FORCE_DEBS=1 to force)"
    fi
    if [ -d /usr/local/nvidia/lib64 ] && ! ldconfig -p | grep -q libGLX_nvidia; then
        export LD_LIBRARY_PATH=/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH (the NVIDIA libraries are not in ld.so's cache)"
    fi
    if [ -e "$NVIDIA_ICD" ] && ! have_system_icd && [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
        export VK_DRIVER_FILES=$NVIDIA_ICD VK_ICD_FILENAMES=$NVIDIA_ICD
        echo "VK_DRIVER_FILES=$VK_DRIVER_FILES (no ICD in the loader's default folders)"
    fi
    if [ -e "$NVIDIA_EGL" ] && ! have_system_egl_vendor && [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ]; then
        export __EGL_VENDOR_LIBRARY_FILENAMES=$NVIDIA_EGL
        echo "__EGL_VENDOR_LIBRARY_FILENAMES=$NVIDIA_EGL (no EGL vendor in glvnd's default folders)"
    fi
    echo "== loader libraries"
    ldconfig -p | grep -E 'libvulkan\.so|libEGL\.so|libGLX_nvidia|libEGL_nvidia' || echo "(none in ld.so's cache)"
    if command -v nvidia-smi >/dev/null; then
        echo "== nvidia-smi"
        timeout 30 nvidia-smi
        timeout 30 nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total,driver_version --format=csv
    else
        echo "== nvidia-smi: not present"
    fi
}

run() {
    OUT=${OUT:-/tmp/device_bench_out}
    mkdir -p "$OUT"
    TOTAL_S=${DEVICE_BENCH_TOTAL_S:-420}
    local quick=${DEVICE_BENCH_QUICK:-0}
    local matmul elems gl_matmul jax_matmul
    if [ "$quick" = 1 ]; then
        matmul=256,512
        gl_matmul=256
        elems=$((1 << 20))
    else
        matmul=256,512,1024,2048,4096,8192
        gl_matmul=1024,4096
        elems=$((1 << 26))
    fi
    matmul=${DEVICE_BENCH_MATMUL:-$matmul}
    elems=${DEVICE_BENCH_ELEMS:-$elems}
    jax_matmul=$matmul
    [ -x "$DEV_DIR/bench" ] || die "$DEV_DIR/bench is missing: run 'scripts/device_bench.sh prepare' first and carry .device"
    local has_nvidia=0
    { command -v nvidia-smi >/dev/null || [ -e "$NVIDIA_ICD" ]; } && has_nvidia=1

    local env_log=$OUT/env.log
    # In this shell (not a pipeline's subshell): its exports hold for the steps below.
    setup_env "$quick" "$has_nvidia" >"$env_log" 2>&1
    cat "$env_log"
    unset RUST_LOG BRIGADE_DEVICES BRIGADE_MATMUL_TUNE BRIGADE_MATMUL_TEXTURE

    # 1. The adapters brigade sees (its default layout) and, with debug logs, the measured matmul
    #    kernel search at 256³ per adapter.
    local t search=$OUT/matmul_search.log
    t=$(budget 45 210)
    echo "== adapters brigade sees (examples/first_call, ${t}s max)" | tee -a "$env_log"
    if [ -x "$DEV_DIR/first_call" ]; then
        BRIGADE_CACHE_DIR=$(mktemp -d /tmp/brigade-cache.XXXXXX) RUST_LOG=brigade=debug \
            timeout -k 5 "$t" "$DEV_DIR/first_call" 2>/tmp/first_call.err | tee -a "$env_log"
        echo "first_call: exit ${PIPESTATUS[0]}" | tee -a "$env_log"
        grep -v 'DEBUG' /tmp/first_call.err | tail -n 20 | tee -a "$env_log"
        {
            echo "# first_call, RUST_LOG=brigade=debug: the matmul kernel search per candidate (256³)"
            grep -i matmul /tmp/first_call.err
        } >"$search"
    else
        echo "(no $DEV_DIR/first_call)" | tee -a "$env_log"
    fi
    local gl_seen=0
    grep -q '^## device .*\[gl' "$env_log" && gl_seen=1

    # 2. The bench on the Vulkan adapter, with a fresh cache directory (first calls measured
    #    honestly: no pipelines or matmul choices from before).
    local cache bench_rc
    cache=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    t=$(budget 180 110)
    echo "== brigade bench on vulkan:1 (${t}s max)"
    BRIGADE_DEVICES=vulkan:1 \
        BRIGADE_BENCH=compile,copy,memcpy,matmul,elementwise,sum,reduce,upload,readback,tiny,loop,parts \
        BRIGADE_BENCH_MATMUL=$matmul BRIGADE_BENCH_ELEMS=$elems \
        BRIGADE_BENCH_OUT=$OUT/bench.tsv BRIGADE_CACHE_DIR=$cache \
        RUST_LOG=brigade::device::tune=debug \
        timeout -k 10 "$t" "$DEV_DIR/bench" --bench 2>&1 | tee "$OUT/bench.log"
    bench_rc=${PIPESTATUS[0]}
    echo "bench (vulkan): exit $bench_rc$([ "$bench_rc" = 124 ] && echo ' (timed out)')" | tee -a "$OUT/bench.log"
    # An early error (say, a binding limit below the arrays' 256 MiB) before any matmul row:
    # once more at the bench's default 2^24 elements, the rows appended.
    if [ "$bench_rc" != 0 ] && [ "$bench_rc" != 124 ] && [ "$elems" -gt $((1 << 24)) ] &&
        ! awk -F '\t' '$1 ~ /^vulkan/ && $2 ~ /^matmul_/ { f = 1 } END { exit !f }' "$OUT/bench.tsv" 2>/dev/null; then
        t=$(budget 120 110)
        echo "== the bench stopped before its matmul rows: again at 2^24 elements (${t}s max)" |
            tee -a "$OUT/bench.log"
        elems=$((1 << 24))
        BRIGADE_DEVICES=vulkan:1 \
            BRIGADE_BENCH=compile,copy,memcpy,matmul,elementwise,sum,reduce,upload,readback,tiny,parts \
            BRIGADE_BENCH_MATMUL=$matmul BRIGADE_BENCH_ELEMS=$elems \
            BRIGADE_BENCH_OUT=$OUT/bench.tsv BRIGADE_CACHE_DIR=$cache \
            timeout -k 10 "$t" "$DEV_DIR/bench" --bench 2>&1 | tee -a "$OUT/bench.log"
        echo "bench (vulkan, 2^24 elements): exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"
    fi
    {
        echo
        echo "# the vulkan bench run's matmul searches (RUST_LOG=brigade::device::tune=debug):"
        grep 'brigade: matmul' "$OUT/bench.log" || echo "(no search logged)"
        echo
        echo "# the matmul choices the vulkan bench run measured and cached in $cache:"
        echo "# adapter <tab> class (log2 sizes) <tab> kernel <tab> GFLOP/s of the search's sample"
        cat "$cache"/matmul-choices*.txt 2>/dev/null || echo "(none written)"
    } >>"$search"

    # 2b. Once more, to tell a steady rate from a first pass's ramp (GPU clocks, caches): matmul
    #     up the sizes and back down, then the bandwidth rows, 20 timed runs each, into
    #     bench_repeat.tsv (the summary reads bench.tsv only).
    if [ "${DEVICE_BENCH_REPEAT:-1}" = 1 ] && [ "$quick" = 0 ]; then
        t=$(budget 90 100)
        echo "== repeat on vulkan:1: matmul up and down, bandwidth rows, 20 runs (${t}s max)" |
            tee -a "$OUT/bench.log"
        local up down
        up=$matmul
        down=$(echo "$matmul" | tr ',' '\n' | sort -rn | tail -n +2 | paste -sd, -)
        BRIGADE_DEVICES=vulkan:1 BRIGADE_BENCH=matmul,elementwise,sum,reduce BRIGADE_BENCH_REPS=20 \
            BRIGADE_BENCH_MATMUL=$up,$down BRIGADE_BENCH_ELEMS=$elems \
            BRIGADE_BENCH_OUT=$OUT/bench_repeat.tsv BRIGADE_CACHE_DIR=$cache \
            timeout -k 10 "$t" "$DEV_DIR/bench" --bench 2>&1 | tee -a "$OUT/bench.log" | grep -v DEBUG
        echo "bench (vulkan, repeat): exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"
    fi

    # 3. The same on the GL adapter (EGL), matmul and elementwise only, when brigade sees one.
    if [ "$gl_seen" = 1 ] || [ ! -x "$DEV_DIR/first_call" ]; then
        t=$(budget 60 70)
        echo "== brigade bench on gl:1 (${t}s max)"
        {
            echo
            echo "######## gl:1 (matmul $gl_matmul, elementwise, copy reference)"
            BRIGADE_DEVICES=gl:1 BRIGADE_BENCH=copy,matmul,elementwise \
                BRIGADE_BENCH_MATMUL=$gl_matmul BRIGADE_BENCH_ELEMS=$elems \
                BRIGADE_BENCH_OUT=$OUT/bench.tsv BRIGADE_CACHE_DIR=$(mktemp -d /tmp/brigade-cache.XXXXXX) \
                timeout -k 10 "$t" "$DEV_DIR/bench" --bench 2>&1
            echo "bench (gl): exit $?"
        } | tee -a "$OUT/bench.log"
    else
        echo "== gl: brigade sees no GL adapter here: skipped" | tee -a "$OUT/bench.log"
    fi

    # 4. JAX on the same machine (its GPU; its cpu platform in a quick run without a GPU).
    t=$(budget 100 5)
    echo "== JAX reference (${t}s max)"
    local jax_env=(PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false)
    if [ "$has_nvidia" = 0 ] && [ -z "${JAX_PLATFORMS:-}" ]; then
        jax_env+=(JAX_PLATFORMS=cpu)
    fi
    env "${jax_env[@]}" timeout -k 10 "$t" python3 scripts/device_jax_ref.py \
        --matmul "$jax_matmul" --elems "$elems" --out "$OUT/bench.tsv" 2>&1 | tee "$OUT/jax.log"
    echo "jax: exit ${PIPESTATUS[0]}" | tee -a "$OUT/jax.log"

    # 4b. The tour (every tutorial scenario, each result checked against the reference
    #     interpreter or the host) on four logical devices of the Vulkan adapter: pmap, the
    #     collectives, training, the big product, on a real GPU. Last, so it cannot starve the rest.
    if [ -x "$DEV_DIR/tour" ]; then
        t=$(budget 120 5)
        echo "== tour on vulkan:4 (${t}s max)"
        BRIGADE_DEVICES=vulkan:4 BRIGADE_CACHE_DIR=$cache \
            timeout -k 5 "$t" "$DEV_DIR/tour" >"$OUT/tour.log" 2>&1
        local tour_rc=$?
        echo "tour: exit $tour_rc$([ "$tour_rc" = 124 ] && echo ' (timed out)')" | tee -a "$OUT/tour.log"
        grep -E '✓|✗|FAIL|rror' "$OUT/tour.log" | tail -n 40
    fi

    # 5. Clocks after the runs, then the summary.
    local gpu=""
    if command -v nvidia-smi >/dev/null; then
        gpu=$(timeout 30 nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>/dev/null | head -n 1)
        {
            echo "== nvidia-smi after the runs"
            timeout 30 nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv
        } 2>&1 | tee -a "$env_log"
    fi
    echo
    GPU_QUERY=$gpu PEAK_GFLOPS=${DEVICE_BENCH_PEAK_GFLOPS:-67000} python3 - "$OUT/bench.tsv" <<'PY' | tee "$OUT/summary.txt"
import os, re, sys
from collections import defaultdict

path = sys.argv[1]
rows = defaultdict(dict)  # device -> id -> (median ms, rate, unit)
try:
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 7:
            rows[f[0]][f[1]] = (float(f[2]), float(f[4]), f[5])
except FileNotFoundError:
    print(f"summary: no {path}: nothing was measured")
    sys.exit(0)

peak = float(os.environ.get("PEAK_GFLOPS", "67000"))
gpu = os.environ.get("GPU_QUERY", "").strip()
print("# device_bench summary")
if gpu:
    print(f"GPU (nvidia-smi name, clocks.max.sm): {gpu}")
    m = re.search(r"(\d+)\s*MHz", gpu)
    if m and "H200" in gpu:
        mhz = int(m.group(1))
        print(f"fp32 peak: {peak / 1000:.0f} TFLOP/s, the H200 SXM datasheet figure (non-tensor);"
              f" 132 SMs x 128 lanes x 2 FLOP x {mhz} MHz = {132 * 128 * 2 * mhz / 1e6:.1f} TFLOP/s")
    else:
        print(f"fp32 peak used: {peak / 1000:.0f} TFLOP/s (H200 SXM datasheet figure, non-tensor)")
else:
    print(f"no nvidia-smi: matmul rows are set against {peak / 1000:.0f} TFLOP/s, the H200 SXM "
          "datasheet fp32 figure, for form only")

def pct(g):
    p = 100 * g / peak
    return f"{p:.1f} %" if p >= 1 else f"{p:.3f} %"

def sizes(d, prefix):
    out = []
    for k in d:
        m = re.fullmatch(prefix + r"(\d+)", k)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)

jax = next((d for d in rows if d.startswith("jax:")), None)
for dev in [d for d in rows if not d.startswith("jax:")] + ([jax] if jax else []):
    r = rows[dev]
    print(f"\n## {dev}")
    ns = sizes(r, "matmul_")
    if ns:
        print("| matmul f32 n³ | median ms | GFLOP/s | % of fp32 peak |"
              + (" JAX HIGHEST GFLOP/s | JAX default (TF32?) GFLOP/s |" if jax and dev != jax else ""))
        print("|---|---|---|---|" + ("---|---|" if jax and dev != jax else ""))
        for n in ns:
            ms, g, _ = r[f"matmul_{n}"]
            line = f"| {n} | {ms:.3f} | {g:.0f} | {pct(g)} |"
            if jax and dev != jax:
                j = rows[jax]
                hi = j.get(f"matmul_{n}")
                de = j.get(f"matmul_default_{n}")
                line += f" {hi[1]:.0f} |" if hi else " |"
                line += f" {de[1]:.0f} |" if de else " |"
            print(line)
        if dev == jax:
            for n in sizes(r, "matmul_default_"):
                ms, g, _ = r[f"matmul_default_{n}"]
                print(f"| {n} default precision | {ms:.3f} | {g:.0f} | {pct(g)} (TF32 if on tensor cores: not an fp32 figure) |")
    copies = {k: v[1] for k, v in r.items() if k.startswith("copy_")}
    ref = max(copies.values()) if copies else None
    if ref:
        best = max(copies, key=copies.get)
        print(f"copy reference: {best} {ref:.1f} GB/s (read + write)")
    for k, what in (("elementwise", "fused tanh(exp(x*1.5+2))*y"),
                    ("elementwise_affine", "fused (x*1.5+2)*y"),
                    ("elementwise6", "fused 6 ops, 3 in"),
                    ("sum", "full sum"),
                    ("sum_xy", "sum(x*y)"),
                    ("upload", "upload"),
                    ("readback", "readback (to_host)"),
                    ("readback_into", "readback (read_into)")):
        if k in r:
            ms, g, unit = r[k]
            vs = ""
            if ref and unit == "GB/s" and k.startswith("sum"):
                vs = f", {100 * g / (ref / 2):.0f} % of the copy row's read bandwidth (half the row)"
            elif ref and unit == "GB/s" and not k.startswith(("upload", "readback")):
                vs = f", {100 * g / ref:.0f} % of the copy row"
            jx = ""
            if jax and dev != jax and k in rows[jax]:
                jg = rows[jax][k][1]
                jx = f"; JAX {jg:.1f} GB/s (brigade {g / jg:.2f}x)"
            print(f"{what}: {g:.1f} {unit} ({ms:.3f} ms){vs}{jx}")
    for k, what in (("tiny_readback", "tiny call + readback"), ("tiny_sync", "tiny op + wait"),
                    ("loop_fori", "fori_loop step"), ("loop_while", "while_loop step"),
                    ("loop_long", "fori_loop step (the long loop)")):
        if k in r:
            print(f"{what}: {r[k][1]:.1f} µs")
    for k in ("compile_elementwise", "compile_sum", "compile_matmul"):
        if k in r:
            print(f"first call {k[8:]}: {r[k][1]:.1f} ms")
PY
    echo "device_bench: done in ${SECONDS}s; results in $OUT: $(cd "$OUT" && echo *)"
}

# A shorter run after `run`: where a matmul call's time goes. The bench's matmul rows
# (each with its last call's submit and wait times, the buffers the pool created and what it
# holds) in several processes, each with a fresh cache. DEVICE_BENCH_PROBE=pool: in the main
# run's order of groups and after the copy group alone, each with and without the buffer pool
# (BRIGADE_BENCH_POOL_LIMIT=0), then the bandwidth rows with 20 timed runs; =bisect (default):
# after each of the groups that come before the matmul rows in the main run, alone and in pairs.
# Results in $OUT/probe.log and probe.tsv.
# The start of the short modes: $OUT, the time budget ($2 s unless DEVICE_BENCH_TOTAL_S), the
# carried binary $1, the loaders (env.log), and none of the caller's brigade settings.
begin_short() {
    OUT=${OUT:-/tmp/device_bench_out}
    mkdir -p "$OUT"
    TOTAL_S=${DEVICE_BENCH_TOTAL_S:-$2}
    [ -x "$DEV_DIR/$1" ] || die "$DEV_DIR/$1 is missing: run 'scripts/device_bench.sh prepare' first and carry .device"
    local has_nvidia=0
    { command -v nvidia-smi >/dev/null || [ -e "$NVIDIA_ICD" ]; } && has_nvidia=1
    setup_env "${DEVICE_BENCH_QUICK:-0}" "$has_nvidia" >"$OUT/env.log" 2>&1
    unset RUST_LOG BRIGADE_DEVICES BRIGADE_MATMUL_TUNE BRIGADE_MATMUL_TEXTURE
}

probe() {
    begin_short bench 240
    local matmul=${DEVICE_BENCH_MATMUL:-256,512,1024,2048,4096,8192}
    local elems=${DEVICE_BENCH_ELEMS:-$((1 << 26))}
    local c1 c2 t
    c1=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    c2=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    step() {
        local title=$1 groups=$2 cache=$3 reps=$4 pool=${5:-}
        t=$(budget 60 20)
        echo "== $title (${t}s max)"
        BRIGADE_DEVICES=vulkan:1 BRIGADE_BENCH=$groups BRIGADE_BENCH_REPS=$reps \
            BRIGADE_BENCH_MATMUL=$matmul BRIGADE_BENCH_ELEMS=$elems \
            BRIGADE_BENCH_OUT=$OUT/probe.tsv BRIGADE_CACHE_DIR=$cache \
            env ${pool:+BRIGADE_BENCH_POOL_LIMIT=$pool} \
            timeout -k 5 "$t" "$DEV_DIR/bench" --bench 2>&1 | grep -E '^\| (matmul|reference|fused|full|reduction)|CHECK|rror'
        echo "exit ${PIPESTATUS[0]}"
    }
    local c3 c4
    c3=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    c4=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    local c5 c6
    c5=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    c6=$(mktemp -d /tmp/brigade-cache.XXXXXX)
    {
        if [ "${DEVICE_BENCH_PROBE:-bisect}" = pool ]; then
            step "the main run's order (compile, copy, memcpy, matmul), fresh cache" compile,copy,memcpy,matmul "$c1" 10
            step "the same order, fresh cache, no buffer pool" compile,copy,memcpy,matmul "$c2" 10 0
            step "copy, then matmul, fresh cache" copy,matmul "$c3" 10
            step "copy, then matmul, fresh cache, no buffer pool" copy,matmul "$c4" 10 0
            step "bandwidth rows, 20 runs" elementwise,sum,reduce "$c4" 20
        else
            # Which of the groups before the matmul rows slows them.
            step "compile, copy, matmul" compile,copy,matmul "$c1" 10
            step "memcpy, copy, matmul" memcpy,copy,matmul "$c2" 10
            step "compile, matmul" compile,matmul "$c3" 10
            step "memcpy, matmul" memcpy,matmul "$c4" 10
            step "copy, memcpy, matmul" copy,memcpy,matmul "$c5" 10
            step "matmul" matmul "$c6" 10
        fi
    } 2>&1 | tee "$OUT/probe.log"
    echo "device_bench probe: done in ${SECONDS}s"
}

# The tour alone on vulkan:4 (every tutorial scenario, each result checked), for a lease with
# little time left: $OUT/tour.log.
tour_only() {
    begin_short tour 170
    local t
    t=$(budget 160 5)
    BRIGADE_DEVICES=vulkan:4 timeout -k 5 "$t" "$DEV_DIR/tour" >"$OUT/tour.log" 2>&1
    local rc=$?
    echo "tour: exit $rc$([ "$rc" = 124 ] && echo ' (timed out)') in ${SECONDS}s" | tee -a "$OUT/tour.log"
    grep -E '^==|✓|✗|FAIL|rror' "$OUT/tour.log" | cut -c1-160 | tail -n 80
}

case "${1:-}" in
prepare) prepare ;;
tour) tour_only ;;
run) run ;;
probe) probe ;;
-h | --help | help) usage ;;
*)
    usage >&2
    exit 2
    ;;
esac
