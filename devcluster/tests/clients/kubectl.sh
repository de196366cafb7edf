#!/usr/bin/env bash
# kubectl client test: the real kubectl binary against a devcluster.
# Run by tests/clients/kubectl.rs with KUBECONFIG, WORKDIR (scratch dir) and CRD_FILE set.
# Each step prints what it checks; the first failing check exits non-zero with the evidence.
set -euo pipefail

: "${KUBECONFIG:?set KUBECONFIG to the devcluster kubeconfig}"
: "${WORKDIR:?set WORKDIR to a scratch directory}"
: "${CRD_FILE:?set CRD_FILE to webapp-crd.yaml}"
cd "${WORKDIR}"

CRD=webapps.demo.wasm-operator.dev
K="kubectl --request-timeout=30s"

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
# expect_contains HAYSTACK NEEDLE WHAT
expect_contains() {
    if ! grep -qF -- "$2" <<<"$1"; then
        printf '%s\n' "$1" >&2
        fail "$3: expected the output above to contain '$2'"
    fi
    echo "ok: $3"
}
# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
    [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
    echo "ok: $3 = '$2'"
}
# wait_until SECONDS WHAT COMMAND...: retry COMMAND once a second until it succeeds.
wait_until() {
    local seconds="$1" what="$2"
    shift 2
    local i
    for ((i = 0; i < seconds; i++)); do
        if "$@" >/dev/null 2>&1; then
            echo "ok: $what"
            return 0
        fi
        sleep 1
    done
    fail "$what: still false after ${seconds}s (command: $*)"
}
# expect_failure WHAT NEEDLE COMMAND...: COMMAND must fail and its stderr must contain NEEDLE.
expect_failure() {
    local what="$1" needle="$2"
    shift 2
    local err
    if "$@" >out.txt 2>err.txt; then
        cat out.txt >&2
        fail "$what: the command succeeded but the server should have refused it"
    fi
    err="$(cat err.txt)"
    echo "kubectl said: ${err}"
    expect_contains "${err}" "${needle}" "$what"
}

step "create the WebApp CRD from YAML"
$K create -f "${CRD_FILE}"

step "kubectl wait --for=condition=Established crd/${CRD}"
$K wait --for=condition=Established "crd/${CRD}" --timeout=30s

step "kubectl api-resources lists webapps (with its short name) in group demo.wasm-operator.dev"
out="$($K api-resources --api-group=demo.wasm-operator.dev)"
echo "${out}"
expect_contains "${out}" "webapps" "api-resources lists webapps"
expect_contains "${out}" "WebApp" "api-resources shows kind WebApp"
expect_contains "${out}" "wa" "api-resources shows short name wa"

step "create two WebApps from YAML"
cat >webapps.yaml <<'EOF'
apiVersion: demo.wasm-operator.dev/v1
kind: WebApp
metadata:
  name: alpha
  labels: {tier: frontend}
spec:
  image: nginx:1.25
  replicas: 2
---
apiVersion: demo.wasm-operator.dev/v1
kind: WebApp
metadata:
  name: beta
spec:
  image: httpd:2.4
EOF
out="$($K create -f webapps.yaml)"
echo "${out}"
expect_contains "${out}" "webapp.demo.wasm-operator.dev/alpha created" "alpha created"
expect_contains "${out}" "webapp.demo.wasm-operator.dev/beta created" "beta created"

step "the schema default fills spec.replicas of beta"
expect_eq "$($K get webapp beta -o jsonpath='{.spec.replicas}')" "1" "beta .spec.replicas (default)"

step "kubectl get webapps shows the printer columns"
out="$($K get webapps)"
echo "${out}"
header="$(head -n1 <<<"${out}")"
for column in NAME IMAGE REPLICAS READY AGE; do
    expect_contains "${header}" "${column}" "column ${column} in the header"
done
alpha_line="$(grep -E '^alpha[[:space:]]' <<<"${out}" || true)"
expect_contains "${alpha_line}" "nginx:1.25" "alpha row shows its image"
expect_contains "$($K get wa -l tier=frontend -o name)" "webapp.demo.wasm-operator.dev/alpha" "short name + label selector"

step "kubectl get -w (in the background) sees a change to alpha"
$K get webapps -w --output-watch-events >watch.out 2>watch.err &
watch_pid=$!
# The initial ADDED lines show the watch is established before we change anything.
wait_until 30 "the watch printed the initial list" grep -qE '^ADDED[[:space:]]+beta' watch.out
$K patch webapp alpha --type merge -p '{"spec":{"image":"nginx:1.25-watched"}}'
seen=no
for ((i = 0; i < 30; i++)); do
    if grep -qE '^MODIFIED[[:space:]]+alpha[[:space:]]' watch.out; then
        seen=yes
        break
    fi
    sleep 1
done
kill "${watch_pid}" 2>/dev/null || true
wait "${watch_pid}" 2>/dev/null || true
echo "--- kubectl get -w output:"
cat watch.out watch.err
[ "${seen}" = yes ] || fail "kubectl get -w never printed a MODIFIED line for alpha within 30s"
echo "ok: the watch printed alpha's MODIFIED event"
expect_contains "$(grep -E '^MODIFIED[[:space:]]+alpha[[:space:]]' watch.out)" "nginx:1.25-watched" \
    "the watched line shows the new image in the printer columns"

step "server-side apply creates gamma (field manager kubectl)"
cat >gamma.yaml <<'EOF'
apiVersion: demo.wasm-operator.dev/v1
kind: WebApp
metadata:
  name: gamma
spec:
  image: nginx:1.25
  replicas: 1
EOF
$K apply --server-side -f gamma.yaml
expect_eq "$($K get webapp gamma -o jsonpath='{.spec.image}')" "nginx:1.25" "gamma .spec.image"
out="$($K get webapp gamma -o jsonpath='{.metadata.managedFields[*].manager}')"
expect_contains "${out}" "kubectl" "gamma managedFields names the kubectl manager"

step "a second field manager applying a different image conflicts"
sed 's/nginx:1.25/nginx:1.27/' gamma.yaml >gamma-other.yaml
expect_failure "conflicting apply by field manager 'other'" "conflict" \
    $K apply --server-side --field-manager=other -f gamma-other.yaml
expect_eq "$($K get webapp gamma -o jsonpath='{.spec.image}')" "nginx:1.25" "gamma unchanged after the refused apply"

step "--force-conflicts lets the second manager take the field"
$K apply --server-side --field-manager=other --force-conflicts -f gamma-other.yaml
expect_eq "$($K get webapp gamma -o jsonpath='{.spec.image}')" "nginx:1.27" "gamma .spec.image after the forced apply"
out="$($K get webapp gamma -o jsonpath='{.metadata.managedFields[*].manager}')"
expect_contains "${out}" "other" "gamma managedFields names the 'other' manager"

step "kubectl patch --type merge"
$K patch webapp alpha --type merge -p '{"spec":{"replicas":3}}'
expect_eq "$($K get webapp alpha -o jsonpath='{.spec.replicas}')" "3" "alpha .spec.replicas"

step "kubectl patch --type json"
$K patch webapp alpha --type json -p '[{"op":"replace","path":"/spec/image","value":"nginx:1.26"}]'
expect_eq "$($K get webapp alpha -o jsonpath='{.spec.image}')" "nginx:1.26" "alpha .spec.image"

step "kubectl patch --subresource status sets Ready without bumping generation"
generation_before="$($K get webapp alpha -o jsonpath='{.metadata.generation}')"
$K patch webapp alpha --subresource status --type merge \
    -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"all replicas ready"}]}}'
expect_eq "$($K get webapp alpha -o jsonpath='{.metadata.generation}')" "${generation_before}" "generation after a status patch"
expect_eq "$($K get webapp alpha -o jsonpath='{.spec.image}')" "nginx:1.26" "spec untouched by the status patch"

step "kubectl wait --for=condition=Ready webapp/alpha"
$K wait --for=condition=Ready webapp/alpha --timeout=30s
out="$($K get webapps)"
echo "${out}"
alpha_line="$(grep -E '^alpha[[:space:]]' <<<"${out}" || true)"
expect_contains "${alpha_line}" "True" "the READY column of alpha"

step "kubectl describe webapp alpha"
out="$($K describe webapp alpha)"
echo "${out}"
expect_contains "${out}" "alpha" "describe names the object"
expect_contains "${out}" "nginx:1.26" "describe shows the spec"
expect_contains "${out}" "Ready" "describe shows the status condition"

step "client-side kubectl apply twice (create, then a strategic-merge patch) + kubectl label"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {mode: one}\n' >applied.yaml
expect_contains "$($K apply -f applied.yaml)" "created" "the first apply creates"
sed -i 's/mode: one/mode: two/' applied.yaml
expect_contains "$($K apply -f applied.yaml)" "configured" "the second apply patches"
expect_eq "$($K get configmap applied -o jsonpath='{.data.mode}')" "two" "applied .data.mode"
$K label configmap applied stage=test
expect_contains "$($K get configmaps -l stage=test -o name)" "configmap/applied" "label + selector"

step "kubectl create configmap + read it back"
$K create configmap app-config --from-literal=greeting=hello --from-literal=mode=dev
expect_eq "$($K get configmap app-config -o jsonpath='{.data.greeting}')" "hello" "app-config .data.greeting"
expect_contains "$($K get configmaps)" "app-config" "kubectl get configmaps lists app-config"

step "namespaces, secrets, paged lists, field selectors, delete by label"
$K create namespace team-a
$K create configmap in-team-a --from-literal=k=v -n team-a
expect_eq "$($K get configmap in-team-a -n team-a -o jsonpath='{.metadata.namespace}')" "team-a" "configmap namespace"
expect_failure "the team-a configmap is not visible in default" "NotFound" $K get configmap in-team-a
$K create secret generic creds --from-literal=password=s3cret
expect_eq "$($K get secret creds -o jsonpath='{.data.password}' | base64 -d)" "s3cret" "secret round-trip (base64)"
for i in 1 2 3 4 5; do
    $K create configmap "paged-${i}" --from-literal=i="${i}" >/dev/null
done
$K label configmaps paged-1 paged-2 paged-3 paged-4 paged-5 batch=paged >/dev/null
out="$($K get configmaps -l batch=paged --chunk-size=2 -o name)"
expect_eq "$(wc -l <<<"${out}" | tr -d ' ')" "5" "configmaps listed in chunks of 2"
expect_eq "$($K get configmaps --field-selector metadata.name=paged-3 -o name)" "configmap/paged-3" "field selector"
$K delete configmaps -l batch=paged
expect_eq "$($K get configmaps -l batch=paged -o name)" "" "configmaps left after delete -l"
$K delete namespace team-a --wait=false
wait_until 30 "namespace team-a and its configmap are gone" \
    bash -c "! $K get namespace team-a && ! $K get configmap in-team-a -n team-a"

step "kubectl get -o yaml and -o json"
out="$($K get webapp alpha -o yaml)"
expect_contains "${out}" "kind: WebApp" "-o yaml has the kind"
expect_contains "${out}" "image: nginx:1.26" "-o yaml has the spec"
$K get webapp alpha -o json >alpha.json
python3 - alpha.json <<'EOF'
import json, sys
obj = json.load(open(sys.argv[1]))
assert obj["kind"] == "WebApp", obj["kind"]
assert obj["apiVersion"] == "demo.wasm-operator.dev/v1", obj["apiVersion"]
assert obj["metadata"]["name"] == "alpha"
assert obj["metadata"]["uid"] and obj["metadata"]["resourceVersion"]
print("ok: -o json parses with kind, apiVersion, uid, resourceVersion")
EOF
$K get webapps -o json >list.json
python3 - list.json <<'EOF'
import json, sys
lst = json.load(open(sys.argv[1]))
names = sorted(item["metadata"]["name"] for item in lst["items"])
assert names == ["alpha", "beta", "gamma"], names
print("ok: the -o json list holds alpha, beta, gamma")
EOF

step "kubectl delete --cascade=foreground keeps the owner until its dependent is gone"
uid="$($K get webapp alpha -o jsonpath='{.metadata.uid}')"
# The dependent carries its own finalizer so the in-between state can be observed.
cat >child.yaml <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: alpha-child
  finalizers: ["test.wasm-operator.dev/hold"]
  ownerReferences:
    - apiVersion: demo.wasm-operator.dev/v1
      kind: WebApp
      name: alpha
      uid: ${uid}
      controller: true
      blockOwnerDeletion: true
data:
  owner: alpha
EOF
$K create -f child.yaml
$K delete webapp alpha --cascade=foreground --wait=false
expect_contains "$($K get webapp alpha -o jsonpath='{.metadata.finalizers}')" "foregroundDeletion" \
    "the owner carries the foregroundDeletion finalizer"
[ -n "$($K get webapp alpha -o jsonpath='{.metadata.deletionTimestamp}')" ] \
    || fail "the owner alpha has no deletionTimestamp after a foreground delete"
echo "ok: the owner alpha is terminating but still present"
wait_until 30 "the garbage collector marks the dependent alpha-child for deletion" \
    bash -c "[ -n \"\$($K get configmap alpha-child -o jsonpath='{.metadata.deletionTimestamp}')\" ]"
$K get webapp alpha >/dev/null || fail "the owner alpha vanished while its blocking dependent still exists"
echo "ok: the owner waits for its blocking dependent"
$K patch configmap alpha-child --type json -p '[{"op":"remove","path":"/metadata/finalizers"}]'
wait_until 30 "the dependent configmap alpha-child is gone" \
    bash -c "! $K get configmap alpha-child"
wait_until 30 "the owner webapp alpha is gone" bash -c "! $K get webapp alpha"

step "kubectl delete webapp beta"
out="$($K delete webapp beta)"
expect_contains "${out}" "deleted" "delete reports the deletion"
expect_failure "get of the deleted webapp beta" "NotFound" $K get webapp beta

step "an invalid object is rejected with the schema message"
cat >bad.yaml <<'EOF'
apiVersion: demo.wasm-operator.dev/v1
kind: WebApp
metadata:
  name: bad
spec:
  image: nginx:1.25
  replicas: 50
EOF
expect_failure "create with replicas above the schema maximum" "spec.replicas" $K create -f bad.yaml
expect_contains "$(cat err.txt)" "less than or equal to 10" "the message names the maximum"
cat >bad2.yaml <<'EOF'
apiVersion: demo.wasm-operator.dev/v1
kind: WebApp
metadata:
  name: bad2
spec:
  replicas: 1
EOF
expect_failure "create without the required spec.image" "spec.image" $K create -f bad2.yaml
expect_contains "$(cat err.txt)" "Required value" "the message says the field is required"

step "kubectl explain reads the CRD schema from the published OpenAPI v3"
out="$($K explain webapp.spec)"
echo "${out}"
expect_contains "${out}" "replicas" "explain lists spec.replicas"
expect_contains "${out}" "image" "explain lists spec.image"

printf '\nALL KUBECTL CHECKS PASSED\n'
