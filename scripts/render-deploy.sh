#!/usr/bin/env bash
# Regenerates what is generated from the host's types and its Helm chart, so
# that they never drift (host/tests/cli/chart.rs and `--test wasmplugin crd`
# fail, naming this script, when they do):
#   - deploy/crds/wasmplugin.yaml and examples/wasmplugin/crd.yaml
#     (`wasm-operator crd print`), deploy/crds/backup.yaml
#     (`wasm-operator crd print backup`);
#   - the chart's copy, deploy/helm/wasm-operator/crds/wasmplugin.yaml
#     (the same CRD, annotated helm.sh/resource-policy: keep);
#   - deploy/wasm-operator.yaml: the chart rendered with its default values
#     (`helm template`, with the Helm linked into realcluster).
#
# Env: WASM_OPERATOR (the wasm-operator binary; default: cargo run),
#      REALCLUSTER (default: target/realcluster/realcluster, built by
#      scripts/build-realcluster.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
chart=deploy/helm/wasm-operator
realcluster="${REALCLUSTER:-$root/target/realcluster/realcluster}"
if [ ! -x "$realcluster" ]; then
    echo "render-deploy: $realcluster is missing: run bash scripts/build-realcluster.sh" >&2
    exit 1
fi
wasm_operator() {
    if [ -n "${WASM_OPERATOR:-}" ]; then "$WASM_OPERATOR" "$@"; else cargo run -q -p wasm-operator -- "$@"; fi
}

wasm_operator crd print >deploy/crds/wasmplugin.yaml
wasm_operator crd print backup >deploy/crds/backup.yaml
cp deploy/crds/wasmplugin.yaml examples/wasmplugin/crd.yaml
{
    cat <<'HEADER'
# The WasmPlugin CRD, generated from host/src/wasmplugin/spec/ (regenerate
# with scripts/render-deploy.sh; do not edit by hand). In crds/: Helm
# installs it before the templates, so the WasmPlugins of the value
# `plugins` can be created in the same `helm install`. Helm never upgrades
# or deletes crds/: before upgrading to a host version whose WasmPlugin
# has new fields, apply it (`kubectl apply --server-side -f
# deploy/crds/wasmplugin.yaml`, docs/operations.md). resource-policy keep
# says the same to anyone who moves it into templates/.
HEADER
    grep -v '^#' deploy/crds/wasmplugin.yaml |
        sed '/^metadata:$/a\  annotations:\n    helm.sh/resource-policy: keep'
} >"$chart/crds/wasmplugin.yaml"
{
    cat <<'HEADER'
# The Backup and Restore CRDs, generated from host/src/backup/resources.rs
# (regenerate with scripts/render-deploy.sh; do not edit by hand). In crds/
# like the WasmPlugin CRD, and kept on uninstall: Backups outlive the host
# that took them (their data is elsewhere, they say where).
HEADER
    grep -v '^#' deploy/crds/backup.yaml |
        sed '/^metadata:$/a\  annotations:\n    helm.sh/resource-policy: keep'
} >"$chart/crds/backup.yaml"

{
    cat <<'HEADER'
# wasm-operator, ready to `kubectl apply -f deploy/wasm-operator.yaml`.
# Generated from the Helm chart deploy/helm/wasm-operator with its default
# values by scripts/render-deploy.sh (the Namespace first, then
# `helm template --no-hooks`); do not edit by hand: change the chart and run
# the script. Without Helm there is no pre-delete hook: before deleting this,
# run `wasm-operator plugin unload` while the host still runs. Plugins: apply
# WasmPlugins (and grant their kinds to ClusterRole wasm-operator), or install
# the chart with values.
apiVersion: v1
kind: Namespace
metadata:
  name: wasm-operator-system
HEADER
    # --no-hooks: a plain manifest must not carry the uninstall hook's Job
    # (kubectl apply would run it at once). --include-crds: the CRD too.
    "$realcluster" helm template wasm-operator "$chart" --namespace wasm-operator-system --no-hooks --include-crds
} >deploy/wasm-operator.yaml
echo "render-deploy: wrote deploy/crds/wasmplugin.yaml, deploy/crds/backup.yaml, examples/wasmplugin/crd.yaml, $chart/crds/wasmplugin.yaml, $chart/crds/backup.yaml, deploy/wasm-operator.yaml"
