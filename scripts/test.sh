#!/usr/bin/env bash
# brigade's test command: installs what the tests need (idempotent; fast when
# everything is already there), then runs fmt, clippy, the test suite (real
# kernels on Mesa's software Vulkan and GL drivers; the page's demos natively too), doc tests,
# and clippy for the wasm, Metal (macOS) and DX12 (Windows) targets, then builds the demo page
# (web/) for wasm and runs its browser test in headless Chromium on WebGPU.
#
#   scripts/test.sh                     full run (what CI runs via .ci/run)
#   BRIGADE_TEST_QUICK=1 scripts/test.sh [FILTER...]
#                                       skip fmt, clippy, cross-target checks and the browser test;
#                                       extra args go to `cargo test` (e.g. a test-name filter)
#   BRIGADE_MESA=default scripts/test.sh
#                                       use Debian 12's own Mesa 22.3 instead of Mesa 25
#                                       from bookworm-backports (1.5-2x faster compute on lavapipe)
#
# Also runs the particles example in a real window under Xvfb (see window_test).
#
# Stops at the first failing step and names it. Prints one timing line per step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

QUICK="${BRIGADE_TEST_QUICK:-0}"
MESA_CHOICE="${BRIGADE_MESA:-auto}" # auto | default
MESA_FALLBACK_MARKER=/var/lib/brigade/mesa-backports-unavailable
BPO_SOURCES=/etc/apt/sources.list.d/debian-backports.sources

APT_PKGS=(mesa-vulkan-drivers libvulkan1 vulkan-tools libegl1 libegl-mesa0 libgl1-mesa-dri)
# Data the tests and examples read (never downloaded at run time): Fashion-MNIST's gzipped IDX
# files in /usr/share/datasets/fashion-mnist (tests/fashion_mnist.rs, examples/common/).
DATA_APT_PKGS=(dataset-fashion-mnist)
CROSS_TARGETS=(wasm32-unknown-unknown aarch64-apple-darwin x86_64-pc-windows-msvc)
# The whole workspace: the library and the page's crate (web/), whose unit tests run the page's
# demos natively on cpu and Vulkan devices, in one build of the library.
TEST_FEATURES=(--workspace)

export DEBIAN_FRONTEND=noninteractive
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"
if [[ "${CI:-}" == "true" ]]; then
    # Fresh clone, one-shot build: incremental artifacts only cost time and disk.
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

# ---------------------------------------------------------------- helpers

T_START=$(date +%s)
TIMINGS=()

log() { printf '==> %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

# Sets CPU_NOW to the CPU seconds (user+sys) used so far by finished child processes.
# `times` must run in this shell (not in a $(...) subshell), so it goes through a file.
TIMES_FILE=$(mktemp)
trap 'rm -f "$TIMES_FILE"' EXIT
CPU_NOW=0
child_cpu() {
    times >"$TIMES_FILE"
    CPU_NOW=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t }' "$TIMES_FILE")
}

# run_step NAME CMD [ARGS...]: runs CMD (a command or a function) with errexit in a
# subshell, prints its wall and CPU time, and stops the whole script if it fails.
# (Wall time varies a lot on shared 2-core machines; CPU time is steadier.)
run_step() {
    local name=$1; shift
    local t0 c0 rc
    t0=$(date +%s)
    child_cpu
    c0=$CPU_NOW
    log "$name"
    set +e
    ( set -e; "$@" )
    rc=$?
    set -e
    child_cpu
    local dt=$(( $(date +%s) - t0 )) dc=$(( CPU_NOW - c0 ))
    if (( rc != 0 )); then
        printf '\nFAILED at step "%s" (exit %d, %ds): %s\n' "$name" "$rc" "$dt" "$*" >&2
        disk_report >&2
        exit "$rc"
    fi
    TIMINGS+=("$(printf '%-34s %5ds  (cpu %ds)' "$name" "$dt" "$dc")")
    printf '[time] %s: %ds (cpu %ds)\n' "$name" "$dt" "$dc"
}

# The build's disk use and what is left: a failed link is often a full disk, and the linker's
# own message can be cut from the log.
disk_report() {
    local target=${CARGO_TARGET_DIR:-target}
    printf '[disk] %s: %s; free on its filesystem: %s\n' "$target" \
        "$(du -sh "$target" 2>/dev/null | cut -f1)" \
        "$(df -h --output=avail "$target" 2>/dev/null | tail -1 | tr -d ' ')"
}

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n env DEBIAN_FRONTEND=noninteractive "$@"
    else
        die "need root to run: $* (run this script as root, or install the packages by hand)"
    fi
}

apt_get() { as_root apt-get -o DPkg::Lock::Timeout=300 "$@"; }

pkg_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }

# shellcheck disable=SC1091
os_codename() { (. /etc/os-release && echo "${VERSION_CODENAME:-}"); }

# The mirror URI and keyring of the system's main Debian source, to reuse for backports.
debian_mirror() {
    local f=/etc/apt/sources.list.d/debian.sources uri=""
    if [[ -f $f ]]; then
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$f")
    fi
    if [[ -z $uri && -f /etc/apt/sources.list ]]; then
        uri=$(awk '/^deb / && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' /etc/apt/sources.list)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

debian_keyring() {
    local f=/etc/apt/sources.list.d/debian.sources k=""
    [[ -f $f ]] && k=$(awk '/^Signed-By:/ { print $2; exit }' "$f")
    echo "${k:-/usr/share/keyrings/debian-archive-keyring.gpg}"
}

backports_configured() {
    grep -rqs -- "$1-backports" /etc/apt/sources.list /etc/apt/sources.list.d/
}

# ---------------------------------------------------------------- setup steps

# 1. Mesa's software drivers (lavapipe = Vulkan, llvmpipe = GL/EGL) and vulkaninfo.
#    On Debian 12 prefer Mesa 25 from bookworm-backports; fall back to the default Mesa.
setup_system_packages() {
    local missing=() p codename want_bpo=0 mesa_ver
    for p in "${APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    codename=$(os_codename)
    mesa_ver=$(pkg_version mesa-vulkan-drivers)

    if [[ $MESA_CHOICE != default && $codename == bookworm ]]; then
        if [[ -f $MESA_FALLBACK_MARKER ]]; then
            log "bookworm-backports was unavailable earlier; using the default Mesa (rm $MESA_FALLBACK_MARKER to retry)"
        else
            want_bpo=1
        fi
    fi

    local need_bpo_upgrade=0
    if (( want_bpo )) && ! dpkg --compare-versions "${mesa_ver:-0}" ge 25~; then
        need_bpo_upgrade=1
    fi

    if (( ${#missing[@]} == 0 && need_bpo_upgrade == 0 )); then
        log "system packages present (mesa-vulkan-drivers ${mesa_ver})"
        return 0
    fi
    if (( ${#missing[@]} )); then log "missing system packages: ${missing[*]}"; fi

    local added_bpo=0 bpo_ok=0
    if (( want_bpo )); then
        if ! backports_configured "$codename"; then
            log "adding ${codename}-backports ($(debian_mirror)) as $BPO_SOURCES"
            as_root tee "$BPO_SOURCES" >/dev/null <<EOF
Types: deb
URIs: $(debian_mirror)
Suites: ${codename}-backports
Components: main
Signed-By: $(debian_keyring)
EOF
            added_bpo=1
        fi
        apt_get update -q || warn "apt-get update reported errors"
        if apt-cache madison mesa-vulkan-drivers 2>/dev/null | grep -q -- "${codename}-backports" &&
            apt_get install -y -q -t "${codename}-backports" "${APT_PKGS[@]}"; then
            bpo_ok=1
        else
            warn "Mesa from ${codename}-backports could not be installed; falling back to the default Mesa"
            if (( added_bpo )); then as_root rm -f "$BPO_SOURCES"; fi
            as_root mkdir -p "$(dirname "$MESA_FALLBACK_MARKER")"
            as_root touch "$MESA_FALLBACK_MARKER"
        fi
    fi

    if (( ! bpo_ok )); then
        missing=()
        for p in "${APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
        if (( ${#missing[@]} )); then
            if (( ! want_bpo )); then apt_get update -q; fi
            apt_get install -y -q "${missing[@]}"
        fi
    fi
    log "installed: mesa-vulkan-drivers $(pkg_version mesa-vulkan-drivers), libgl1-mesa-dri $(pkg_version libgl1-mesa-dri), libegl-mesa0 $(pkg_version libegl-mesa0)"
}

# 2b. Data sets from Debian (see DATA_APT_PKGS): installed once, then only checked.
setup_data_packages() {
    local missing=() p
    for p in "${DATA_APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if (( ${#missing[@]} )); then
        log "installing ${missing[*]}"
        apt_get update -q
        apt_get install -y -q "${missing[@]}"
    fi
    log "data packages present: ${DATA_APT_PKGS[*]}"
}

# 2c. Multi-process meshes (feature `mpi`): Open MPI, and libclang for rsmpi's bindgen.
MPI_APT_PKGS=(openmpi-bin libopenmpi-dev libclang-dev)
setup_mpi_packages() {
    local missing=() p
    for p in "${MPI_APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if (( ${#missing[@]} )); then
        log "installing ${missing[*]}"
        apt_get update -q
        apt_get install -y -q "${missing[@]}"
    fi
    log "mpi packages present: ${MPI_APT_PKGS[*]}"
}

# tests/multiprocess.rs runs `mpirun -n 2` / `-n 4` on its own binary and on the examples.
mpi_test() {
    cargo build --features mpi --example multihost_training --example mpi_bench
    cargo test --features mpi --test multiprocess
}

# 3. Rust targets for the cross-target checks, and clippy/rustfmt.
setup_rust() {
    command -v rustup >/dev/null || die "rustup not found: the Rust toolchain is installed with rustup"
    local installed want=() t c
    installed=$(rustup target list --installed)
    for t in "${CROSS_TARGETS[@]}"; do grep -qx "$t" <<<"$installed" || want+=("$t"); done
    if (( ${#want[@]} )); then rustup target add "${want[@]}"; fi
    installed=$(rustup component list --installed)
    want=()
    for c in clippy rustfmt; do grep -q "^$c" <<<"$installed" || want+=("$c"); done
    if (( ${#want[@]} )); then rustup component add "${want[@]}"; fi
    log "$(rustc --version); $(cargo --version)"
}

# The oldest Rust brigade promises to build with: Cargo.toml's rust-version, installed with rustup
# (a minimal profile) and checked against the library, so the promise cannot rot.
msrv() { sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml | head -1; }

msrv_check() {
    local v
    v=$(msrv)
    [[ -n $v ]] || die "no rust-version in Cargo.toml"
    rustup toolchain list | grep -q "^$v" || rustup toolchain install "$v" --profile minimal
    # Its own target directory: a different compiler would rebuild (and evict) the main build.
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/msrv" cargo "+$v" check --lib -p brigade
}

# The crate as crates.io would receive it: every file it needs is packaged (the guide pages its
# docs include, the shaders), and the packaged crate builds on its own.
package_check() {
    cargo package -p brigade --allow-dirty
}

# 4. The adapters the tests run on: fail loudly if Vulkan lavapipe is not there.
verify_adapters() {
    local out
    out=$(vulkaninfo --summary 2>&1) || {
        printf '%s\n' "$out" >&2
        die "vulkaninfo --summary failed: no working Vulkan driver (need mesa-vulkan-drivers + libvulkan1)"
    }
    if ! grep -q llvmpipe <<<"$out"; then
        printf '%s\n' "$out" >&2
        die "vulkaninfo --summary lists no llvmpipe (Mesa lavapipe) device: the GPU tests cannot run"
    fi
    grep -E 'deviceName|driverInfo' <<<"$out" | sed 's/^[[:space:]]*/    /'
    log "Mesa in use: $(pkg_version mesa-vulkan-drivers)"
}

# ---------------------------------------------------------------- wasm + browser
# The demo page (web/) built from web/src/ and tested in headless Chromium on WebGPU
# (SwiftShader here). See shared/PLATFORM.md, "Browser" and "wasm build".
WASM_BINDGEN_VERSION=0.2.130 # must match the wasm-bindgen crate pinned in web/Cargo.toml
# Debian's Chromium (never a browser downloaded by a tool) and a CJK font, so that the
# screenshots show the page's Chinese (the page starts in Chinese).
WEB_APT_PKGS=(chromium fonts-wqy-microhei)

setup_web_tools() {
    local missing=() p
    for p in "${WEB_APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if (( ${#missing[@]} )); then
        log "installing ${missing[*]}"
        apt_get update -q
        apt_get install -y -q "${missing[@]}"
    fi
    # wasm-bindgen-cli, cached in ~/.cargo/bin. No --locked (the registry lacks one pinned dep);
    # no default features: they only add TLS for the test runner's downloads, which we never use.
    if ! wasm-bindgen --version 2>/dev/null | grep -q " ${WASM_BINDGEN_VERSION}\$"; then
        cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --no-default-features
    fi
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        log "installing Node.js and npm (Debian's)"
        apt_get update -q
        apt_get install -y -q nodejs npm
    fi
    command -v node >/dev/null || die "node not found: the browser test needs Node.js (>= 18) and npm"
    # playwright-core and jax-js (the bench page's peer), from web/package-lock.json; never a browser.
    if ! (cd web && npm ls >/dev/null 2>&1); then
        (cd web && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
    fi
    log "$(wasm-bindgen --version); node $(node --version); $(/usr/lib/chromium/chromium --version 2>/dev/null || chromium --version)"
}

web_build() {
    cargo build --lib --release --target wasm32-unknown-unknown -p brigade-web
    wasm-bindgen --target web --no-typescript --out-dir web/pkg --out-name brigade \
        "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/release/brigade_web.wasm"
}

# Serves web/ on 127.0.0.1, runs every mode of the page in headless Chromium with
# --enable-unsafe-webgpu, checks the page's machine-readable status (real kernels on WebGPU,
# results verified, the indivisible-batch error, the language toggle, the cpu fallback) and
# saves screenshots to web/screenshots/. No WebGPU adapter in the browser is a failure.
web_test() {
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 node web/test/browser.mjs
}

# The Topics tab (web/cards.js): every card's real kernels verified, both languages, screenshots.
web_cards_test() {
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 node web/test/cards.mjs
}

run_web_steps() {
    run_step "web: chromium, wasm-bindgen, npm" setup_web_tools
    run_step "web: wasm build (release)" web_build
    run_step "web: browser test" web_test
    run_step "web: topics tab test" web_cards_test
}

# ---------------------------------------------------------------- a real window
# examples/particles.rs in a winit window on an Xvfb display (Debian's xvfb; x11-apps for xwd;
# the X libraries winit loads at run time), on lavapipe Vulkan and llvmpipe GL, for a fixed
# number of frames: the example grabs the display with xwd, saves it to target/, and exits
# non-zero if the window shows nothing, the particles are not where the CPU reference puts
# them, or brigade moved bytes between step and draw.
WINDOW_APT_PKGS=(xvfb x11-apps libxkbcommon-x11-0 libxcursor1 libxi6 libxrandr2 libx11-xcb1)

setup_window_tools() {
    local missing=() p
    for p in "${WINDOW_APT_PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
    if (( ${#missing[@]} )); then
        log "installing ${missing[*]}"
        apt_get update -q
        apt_get install -y -q "${missing[@]}"
    fi
    command -v Xvfb >/dev/null || die "Xvfb not found after installing xvfb"
    command -v xwd >/dev/null || die "xwd not found after installing x11-apps"
}

window_test() {
    local d display="" pid rc=0 b
    for d in $(seq 90 140); do
        if [[ ! -e /tmp/.X11-unix/X$d && ! -e /tmp/.X$d-lock ]]; then display=":$d"; break; fi
    done
    [[ -n $display ]] || die "no free X display number in :90-:140"
    Xvfb "$display" -screen 0 800x600x24 -nolisten tcp >"${TMPDIR:-/tmp}/brigade-xvfb.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 50); do [[ -e /tmp/.X11-unix/X${display#:} ]] && break; sleep 0.2; done
    [[ -e /tmp/.X11-unix/X${display#:} ]] || { kill "$pid" 2>/dev/null; die "Xvfb $display did not start"; }
    mkdir -p target
    for b in vulkan gl; do
        DISPLAY=$display cargo run --example particles -- --window --backend "$b" \
            --n 512 --frames 30 --screenshot "target/particles-window-$b.png" || rc=$?
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return "$rc"
}

# ---------------------------------------------------------------- main

log "brigade test command ($( ((QUICK)) && echo quick || echo full ) run; CI=${CI:-})"

run_step "system packages (Mesa, Vulkan)" setup_system_packages
run_step "data packages (Fashion-MNIST)" setup_data_packages

# 2. EGL/GL (wgpu's GL backend) needs XDG_RUNTIME_DIR.
if [[ -z "${XDG_RUNTIME_DIR:-}" ]]; then
    XDG_RUNTIME_DIR="/tmp/xdg-runtime-$(id -u)"
    export XDG_RUNTIME_DIR
fi
if [[ ! -d $XDG_RUNTIME_DIR ]]; then
    mkdir -p "$(dirname "$XDG_RUNTIME_DIR")"
    mkdir -m700 "$XDG_RUNTIME_DIR"
fi

if (( ! QUICK )); then
    run_step "rust targets + clippy/rustfmt" setup_rust
fi
run_step "verify adapters (vulkaninfo)" verify_adapters

if (( ! QUICK )); then
    run_step "cargo fmt --check" cargo fmt --all -- --check
    run_step "cargo clippy" cargo clippy --all-targets "${TEST_FEATURES[@]}" -- -D warnings
    run_step "cargo doc (warnings are errors)" env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps
    run_step "rust-version: cargo +$(msrv) check" msrv_check
    run_step "cargo package (brigade)" package_check
fi
run_step "cargo test --all-targets" cargo test --all-targets "${TEST_FEATURES[@]}" "$@"
run_step "cargo test --doc" cargo test --doc "${TEST_FEATURES[@]}" "$@"
# Release wraps integer overflow silently where the test profile panics: the extreme-size
# checks must hold there too.
run_step "cargo test --release --test extreme_sizes" \
    cargo test --release "${TEST_FEATURES[@]}" --test extreme_sizes "$@"
run_step "mpi: Open MPI, libclang" setup_mpi_packages
if (( ! QUICK )); then
    run_step "mpi: cargo clippy --features mpi" cargo clippy --features mpi --lib \
        --example multihost_training --example mpi_bench --test multiprocess -- -D warnings
fi
run_step "mpi: multi-process tests (mpirun)" mpi_test
# The tour (the README's first command) on every adapter found; it exits non-zero if any
# result differs from the CPU reference. Debug build: the test step already compiled it.
run_step "tour (every scenario, verified)" cargo run --example tour
run_step "window: xvfb, x11-apps" setup_window_tools
run_step "window: particles under Xvfb (Vulkan, GL)" window_test

if (( ! QUICK )); then
    # Backends we cannot run here (Metal, DX12) and the browser build: type-checked and linted
    # (clippy is `cargo check` plus lints, at the same cost). The wasm build includes the page's
    # crate (`brigade-web`).
    for target in "${CROSS_TARGETS[@]}"; do
        packages=(-p brigade)
        [[ $target == wasm32-* ]] && packages=(-p brigade -p brigade-web)
        run_step "cargo clippy $target" cargo clippy --lib --target "$target" "${packages[@]}" \
            -- -D warnings
    done
    run_web_steps
fi

printf '\n==> timings\n'
printf '    %s\n' "${TIMINGS[@]}"
child_cpu
printf '    %-34s %5ds  (cpu %ds)\n' "total" "$(( $(date +%s) - T_START ))" "$CPU_NOW"
disk_report
log "all steps OK"
