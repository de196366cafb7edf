#!/usr/bin/env bash
# Runs every test of the project on a fresh machine: installs what the tests
# need (the wasm32-wasip2 target, test tools from Debian/PyPI), builds the
# plugins to wasm once, then runs the workspace's tests against the devcluster.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> %s\n' "$*"; }

step "installing test dependencies"
bash scripts/install-test-deps.sh

step "building plugins to wasm32-wasip2"
bash scripts/build-plugins.sh

step "checking formatting"
cargo fmt --all -- --check

step "linting (clippy, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings
# An operator image builds the host without the embedded devcluster.
cargo clippy -p wasm-operator --no-default-features -- -D warnings

step "running the test suite"
cargo test --workspace --all-features --no-fail-fast -- --nocapture 2>&1 | tee target/test-output.log
status=${PIPESTATUS[0]}

passed=$(grep -E '^test result:' target/test-output.log | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
failed=$(grep -E '^test result:' target/test-output.log | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
printf '\n%s passed, %s failed\n' "$passed" "$failed"
exit "$status"
