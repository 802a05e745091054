#!/usr/bin/env bash
# Build the demo page's wasm (the brigade-web crate in web/) into web/pkg, and optionally serve it.
#
#   web/build.sh            build web/pkg (release wasm + wasm-bindgen --target web)
#   web/build.sh serve      build, then serve web/ at http://127.0.0.1:${PORT:-8080}/
#
# Needs: rustup target wasm32-unknown-unknown, wasm-bindgen-cli 0.2.130 (the version of the
# wasm-bindgen crate pinned in web/Cargo.toml), node >= 20 to serve. Open the page in a browser with
# WebGPU (recent Chrome/Edge; headless Chromium needs --enable-unsafe-webgpu); without it the page
# explains how to enable it and runs on brigade's cpu devices.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
WASM_BINDGEN_VERSION=0.2.130
TARGET_DIR="${CARGO_TARGET_DIR:-target}"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown
fi
if ! wasm-bindgen --version 2>/dev/null | grep -q " ${WASM_BINDGEN_VERSION}\$"; then
    # No --locked: the registry lacks one of the CLI's pinned dependency versions.
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

cargo build --release --target wasm32-unknown-unknown -p brigade-web --lib
wasm-bindgen --target web --no-typescript --out-dir web/pkg --out-name brigade \
    "$TARGET_DIR/wasm32-unknown-unknown/release/brigade_web.wasm"
echo "built web/pkg ($(du -h web/pkg/brigade_bg.wasm | cut -f1) of wasm)"

if [[ "${1:-}" == serve ]]; then
    exec node web/serve.mjs "${PORT:-8080}"
fi
