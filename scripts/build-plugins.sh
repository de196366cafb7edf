#!/usr/bin/env bash
# Builds the first-party plugins (plugins/*) and the test fixtures
# (plugins/fixtures/*) as WebAssembly components (wasm32-wasip2).
# A cdylib built for wasm32-wasip2 already is a component; no post-processing.
#
# Output: target/wasm32-wasip2/release/{webapp,faulty,...}.wasm (or under
# $CARGO_TARGET_DIR). Extra arguments go to cargo.
#
# Size: the workspace release profile strips DWARF (strip = "debuginfo"),
# which takes webapp.wasm from ~11.8 MB to ~1.4 MB but keeps the wasm name
# section, so traps still show function names. `wasm-operator dev` builds with
# the same profile, so the two never rebuild each other's dependencies.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Idempotent: a no-op when the target is already installed.
if ! rustup target add wasm32-wasip2 >/dev/null 2>&1; then
    echo "error: 'rustup target add wasm32-wasip2' failed; install rustup or the target by hand" >&2
    exit 1
fi

# Package names; each output is named after its package, wherever its crate is.
shipped=(webapp distributedkv)
fixtures=(faulty webapp-v2 webapp-v3 hostile hostile-liar hostile-core hostile-workloads webapp-next webapp-differ webapp-strict webapp-flaky webapp-loop distributedkv-lossy distributedkv-trap convert-only distributedkv-forger hostile-recorder hostile-grower backup-v1)
plugins=("${shipped[@]}" "${fixtures[@]}")
args=()
for p in "${plugins[@]}"; do args+=(-p "$p"); done

cargo build --release --target wasm32-wasip2 "${args[@]}" "$@"

target_dir="${CARGO_TARGET_DIR:-$root/target}"
for p in "${plugins[@]}"; do
    wasm="$target_dir/wasm32-wasip2/release/${p//-/_}.wasm"  # cargo writes webapp-v2 as webapp_v2.wasm
    if [[ ! -f "$wasm" ]]; then
        echo "error: $wasm was not produced" >&2
        exit 1
    fi
    printf '%s\t%s bytes\n' "$wasm" "$(stat -c %s "$wasm")"
done
