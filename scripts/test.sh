#!/usr/bin/env bash
# Runs every test of the project on a fresh machine: installs what the tests
# need (the wasm32-wasip2 target, test tools from Debian/PyPI), builds the
# plugins to wasm once, runs the workspace's tests against the devcluster,
# then the host's end-to-end suites again against the real control plane
# (realcluster/: kube-apiserver + etcd + kube-controller-manager built from
# upstream by scripts/build-realcluster.sh, with `go vet`).
#
# The Go build runs in the background (nice 19) from the start: on a fresh
# machine it is the longest single step (~18-22 min on 2 cores), and the
# devcluster pass leaves CPU idle while its tests wait on the API server.
#
# The container image's tests (real pass) package the host binary the test
# build already made (WASM_OPERATOR_IMAGE_BINARY=target/debug/wasm-operator):
# the assembly, the registry push, the non-root rootfs and the chart are what
# they check, and a second, release compile of every dependency (wasmtime at
# opt-level 3) cost CI more than 30 min of its 2 cores. Release jobs run
# scripts/build-image.sh without that variable (the release-image profile);
# its code is linted without default features below.
#
# cosign (v2 and v3, for the signed-plugin tests of both passes) builds first
# in the same background Go chain (scripts/build-cosign.sh: realcluster's Go
# module, so the packages it shares with the control plane compile once and
# the chain never runs two Go builds at once); the tests wait for it and find
# it through WASM_OPERATOR_COSIGN2 / WASM_OPERATOR_COSIGN3.
#
# Env: SKIP_REAL=1 skips the real-backend pass (and the control plane's Go
#      build; cosign still builds).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> [%s, %d s in] %s\n' "$(date -u +%T)" "$SECONDS" "$*"; }

step "installing test dependencies"
bash scripts/install-test-deps.sh

mkdir -p target
# cosign first: the devcluster pass needs it, the real pass comes last. Its
# exit status goes to target/cosign-build.status (waited for below); the
# control plane builds whatever it says.
rm -f target/cosign-build.status
cosign_build='bash scripts/build-cosign.sh >target/cosign-build.log 2>&1; echo $? >target/cosign-build.status.tmp
    mv -f target/cosign-build.status.tmp target/cosign-build.status'
realcluster_pid=
if [ "${SKIP_REAL:-}" != 1 ]; then
    step "building cosign, then the real control plane, in the background (logs: target/cosign-build.log, target/realcluster-build.log)"
    # Its own process group, so that an early exit stops the whole build.
    # Then `go vet` of the controller-runtime benchmark peer (bench/scale): it
    # shares realcluster's k8s.io packages in Go's build cache (about a minute cold).
    setsid bash -c "$cosign_build; bash scripts/build-realcluster.sh && bash scripts/build-controller-runtime-peer.sh --vet" \
        >target/realcluster-build.log 2>&1 &
    realcluster_pid=$!
    go_pid=$realcluster_pid
else
    step "building cosign in the background (log: target/cosign-build.log)"
    setsid bash -c "$cosign_build" >/dev/null 2>&1 &
    go_pid=$!
fi
trap 'kill -- "-$go_pid" 2>/dev/null || true' EXIT

# The Python, TypeScript and Go plugins (toolchains from PyPI/npm, then
# componentize-py, jco and go: ~55 s of installs and ~3 min of builds on 2
# cores when cold, nothing when up to date) build in the background while
# the Rust plugins build and clippy runs; the tests wait for them below.
step "building the Python, TypeScript and Go plugins in the background (log: target/lang-plugins-build.log)"
mkdir -p target
setsid bash scripts/build-lang-plugins.sh >target/lang-plugins-build.log 2>&1 &
lang_pid=$!
trap 'kill -- "-$lang_pid" 2>/dev/null || true; kill -- "-$go_pid" 2>/dev/null || true' EXIT

step "building plugins to wasm32-wasip2"
bash scripts/build-plugins.sh

step "checking formatting"
cargo fmt --all -- --check

step "linting (clippy, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
# An operator image builds the host without the embedded devcluster.
cargo clippy -p wasm-operator --no-default-features -- -D warnings

step "waiting for the Python, TypeScript and Go plugins"
if ! wait "$lang_pid"; then
    cat target/lang-plugins-build.log
    echo "building the Python, TypeScript and Go plugins failed (log above)"
    exit 1
fi
tail -n 4 target/lang-plugins-build.log

step "waiting for cosign"
# Its status file, not `wait`: with the real pass it is the first step of the
# control plane's build job.
while [ ! -e target/cosign-build.status ] && kill -0 "$go_pid" 2>/dev/null; do sleep 2; done
if [ "$(cat target/cosign-build.status 2>/dev/null)" != 0 ]; then
    cat target/cosign-build.log
    echo "building cosign failed (log above)"
    exit 1
fi
tail -n 1 target/cosign-build.log
export WASM_OPERATOR_COSIGN2="$PWD/target/cosign/cosign2" WASM_OPERATOR_COSIGN3="$PWD/target/cosign/cosign3"

step "running the test suite"
# The image tests package this build's binary (see the header).
export WASM_OPERATOR_IMAGE_BINARY="$PWD/target/debug/wasm-operator"
# A failing test must not stop the script (set -e): the real pass and the
# summary still run, and the exit status says it failed.
set +e
cargo test --workspace --all-features --no-fail-fast -- --nocapture 2>&1 | tee target/test-output.log
status=${PIPESTATUS[0]}
set -e
logs=(target/test-output.log)

if [ -n "$realcluster_pid" ]; then
    step "waiting for the real control plane build"
    if wait "$realcluster_pid"; then
        tail -n 3 target/realcluster-build.log
        step "running the end-to-end suites on the real control plane"
        # The same build as above (same packages and features): nothing recompiles.
        # Each test binary starts one control plane and its tests take turns
        # on it (devcluster/src/testing); devcluster_only_ tests, and tests that
        # do not use its cluster (testing::once_per_run), print SKIPPED.
        set +e
        WASM_OPERATOR_TEST_BACKEND=real cargo test --workspace --all-features --no-fail-fast \
            --test e2e --test upgrade --test wasmplugin --test cli --test security --test canary --test lease \
            --test convert \
            -- --nocapture 2>&1 | tee target/test-output-real.log
        real_status=${PIPESTATUS[0]}
        set -e
        [ "$real_status" = 0 ] || status=$real_status
        logs+=(target/test-output-real.log)
        printf '\n%s tests skipped on the real control plane (devcluster only, or run once in the devcluster pass)\n' \
            "$(grep -c '^SKIPPED ' target/test-output-real.log || true)"
    else
        cat target/realcluster-build.log
        echo "building the real control plane failed (log above)"
        status=1
    fi
fi

step "summary"
passed=$(cat "${logs[@]}" | grep -E '^test result:' | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
failed=$(cat "${logs[@]}" | grep -E '^test result:' | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
printf '\n%s passed, %s failed\n' "$passed" "$failed"
# Name the failures last, where a CI log's tail shows them: each failing test
# and the first line of its panic, from every pass.
if [ "$failed" != 0 ]; then
    printf '\nfailed:\n'
    for log in "${logs[@]}"; do
        grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E "s|^test (.*) \.\.\. FAILED$|  \1 (${log#target/})|" || true
        grep -E -A 2 "^thread '.*' panicked at" "$log" | head -n 30 | sed 's/^/    /' || true
    done
fi
exit "$status"
