#!/usr/bin/env bash
# The chaos harness of issue 32, with one command:
#
#   bash scripts/chaos.sh [--backend dev|real] [--objects 5000] [--storm 10m] \
#       [--seed N] [--churn 20] [--faults all|none|kill,term,...] [--out DIR]
#
# Builds what it runs (release host, devcluster and harness; the webapp and
# webapp-next plugins; with --backend real the real control plane,
# scripts/build-realcluster.sh), then runs target/release/chaos with the
# arguments given (see `--help`): N WebApps, 3 replicas with
# --leader-elect --shards 6 behind per-replica proxies, a steady stream of
# changes and a seeded fault schedule; then checks convergence, stale
# writes, lost/doubled/orphaned objects and load. The report goes to
# <out>/report.md and <out>/report.json (default target/chaos).
# Exit status: 0 every invariant held, 1 one did not, 2 the harness failed.
#
# A one-hour soak at 10,000 objects (memory flat):
#   bash scripts/chaos.sh --objects 10000 --storm 60m --faults none --churn 10
#
# A two-minute configuration runs in scripts/test.sh (bench/scale/tests/chaos.rs).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"

echo "building release binaries (a cold build takes 10+ minutes)..." >&2
cargo build --release -p wasm-operator -p wasm-operator-devcluster -p bench-scale --bin wasm-operator --bin devcluster --bin chaos
if ! rustup target add wasm32-wasip2 >/dev/null 2>&1; then
    echo "error: 'rustup target add wasm32-wasip2' failed; install rustup or the target by hand" >&2
    exit 1
fi
cargo build --release --target wasm32-wasip2 -p webapp -p webapp-next
args=" $* "
if [[ "$args" == *" --backend real "* || "$args" == *" --backend=real "* ]]; then
    echo "building the real control plane (scripts/build-realcluster.sh)..." >&2
    REALCLUSTER_BIN="$target_dir/realcluster/realcluster" bash scripts/build-realcluster.sh
fi

exec "$target_dir/release/chaos" \
    --bin-dir "$target_dir/release" \
    --plugins-dir "$target_dir/wasm32-wasip2/release" \
    --realcluster "$target_dir/realcluster/realcluster" \
    --repo "$root" \
    "$@"
