#!/usr/bin/env bash
# Builds the first-party plugins as WebAssembly components (wasm32-wasip2).
# A cdylib built for wasm32-wasip2 already is a component; no post-processing.
#
# Output: target/wasm32-wasip2/release/{webapp,faulty}.wasm (or under
# $CARGO_TARGET_DIR). Extra arguments go to cargo.
#
# Size: the workspace release profile keeps line tables (debug =
# "line-tables-only"), which makes webapp.wasm ~11.8 MB. This script strips
# DWARF (strip = "debuginfo", ~1.4 MB) but keeps the wasm name section, so
# traps still show function names. KEEP_DEBUG=1 keeps the line tables.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Idempotent: a no-op when the target is already installed.
if ! rustup target add wasm32-wasip2 >/dev/null 2>&1; then
    echo "error: 'rustup target add wasm32-wasip2' failed; install rustup or the target by hand" >&2
    exit 1
fi

plugins=(webapp faulty)
args=()
for p in "${plugins[@]}"; do args+=(-p "$p"); done
if [[ "${KEEP_DEBUG:-0}" != 1 ]]; then
    args+=(--config 'profile.release.strip="debuginfo"')
fi

cargo build --release --target wasm32-wasip2 "${args[@]}" "$@"

target_dir="${CARGO_TARGET_DIR:-$root/target}"
for p in "${plugins[@]}"; do
    wasm="$target_dir/wasm32-wasip2/release/$p.wasm"
    if [[ ! -f "$wasm" ]]; then
        echo "error: $wasm was not produced" >&2
        exit 1
    fi
    printf '%s\t%s bytes\n' "$wasm" "$(stat -c %s "$wasm")"
done
