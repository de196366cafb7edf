#!/usr/bin/env bash
# Runs wasm-operator's main job on a fresh machine: the embedded devcluster, the
# example CRDs, the plugins under plugins/ (built to wasm32-wasip2) and the
# example objects, with hot reload of the plugins. Extra arguments go to
# `wasm-operator dev` (e.g. --write-kubeconfig dev.kubeconfig --port 6443
# --data dev.sqlite).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-plugins.sh
exec cargo run -p wasm-operator -- dev "$@"
