#!/usr/bin/env bash
# The scale benchmark of issues 11 and 12, with one command:
#
#   bash scripts/bench-scale.sh [--backend dev|real] [--sizes 1000,10000] [--rounds 2] \
#       [--operators wasm-operator,controller-runtime,native,kopf,floor]
#
# Builds what it runs (release host, devcluster, the native kube-rs controller
# and the floor, the webapp plugin; the controller-runtime peer with `go vet`
# and `go build` into target/bench-scale/bin; with --backend real the real
# control plane, scripts/build-realcluster.sh; a kopf virtualenv under
# target/bench-scale), then runs target/release/bench-scale with the arguments
# given (see `--help`): every operator against its own fresh API server,
# rounds interleaved. Prints Markdown tables and the ratios; JSON and
# operator logs go to target/bench-scale/.
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

# Which operators and backend the arguments ask for (the defaults: every operator, dev).
wants() {
    local name="$1"
    shift
    [[ " $* " != *" --operators "* && " $* " != *" --operators="* ]] || [[ " $* " == *"$name"* ]]
}
args=" $* "
if wants controller-runtime "$@"; then
    echo "building the controller-runtime peer (go vet + go build)..." >&2
    bash scripts/build-controller-runtime-peer.sh "$out/bin/controller-runtime-webapp"
fi
if [[ "$args" == *" --backend real "* || "$args" == *" --backend=real "* ]]; then
    echo "building the real control plane (scripts/build-realcluster.sh)..." >&2
    REALCLUSTER_BIN="$target_dir/realcluster/realcluster" bash scripts/build-realcluster.sh
fi

venv="$out/kopf-venv"
if wants kopf "$@" && [[ ! -x "$venv/bin/kopf" ]]; then
    echo "installing kopf into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet kopf kubernetes
fi

exec "$target_dir/release/bench-scale" \
    --bin-dir "$target_dir/release" \
    --wasm "$target_dir/wasm32-wasip2/release/webapp.wasm" \
    --kopf "$venv/bin/kopf" \
    --controller-runtime "$out/bin/controller-runtime-webapp" \
    --realcluster "$target_dir/realcluster/realcluster" \
    --out "$out" \
    "$@"
