#!/usr/bin/env bash
# The scale benchmark of issue 11, with one command:
#
#   bash scripts/bench-scale.sh [--sizes 1000,3000,10000] [--rounds 2] [--operators wasm-operator,native,kopf,floor]
#
# Builds what it runs (release host, devcluster, the native controller and the
# floor, the webapp plugin; a kopf virtualenv under target/bench-scale), then
# runs target/release/bench-scale with the arguments given (see `--help`):
# every operator against its own fresh devcluster, rounds interleaved.
# Prints a Markdown table; JSON and operator logs go to target/bench-scale/.
#
# Not part of scripts/test.sh: it takes minutes and measures, it asserts nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="$target_dir/bench-scale"
mkdir -p "$out"

echo "building release binaries (a cold build takes 10+ minutes)..." >&2
cargo build --release -p wasm-operator -p wasm-operator-devcluster -p bench-scale
if ! rustup target add wasm32-wasip2 >/dev/null 2>&1; then
    echo "error: 'rustup target add wasm32-wasip2' failed; install rustup or the target by hand" >&2
    exit 1
fi
cargo build --release --target wasm32-wasip2 -p webapp

venv="$out/kopf-venv"
if [[ " $* " != *" --operators "* || " $* " == *kopf* ]] && [[ ! -x "$venv/bin/kopf" ]]; then
    echo "installing kopf into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet kopf kubernetes
fi

exec "$target_dir/release/bench-scale" \
    --bin-dir "$target_dir/release" \
    --wasm "$target_dir/wasm32-wasip2/release/webapp.wasm" \
    --kopf "$venv/bin/kopf" \
    --out "$out" \
    "$@"
