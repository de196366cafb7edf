#!/usr/bin/env bash
# Builds the real Kubernetes control plane used by tests (realcluster/: embedded
# etcd + kube-apiserver + kube-controller-manager from pinned upstream releases)
# into target/realcluster/realcluster, and runs `go vet` on the module.
#
# Skips everything when the binary is newer than every .go, go.mod and go.sum
# file of realcluster/ and every stage it embeds (stages/*.yaml) (pass --force
# to rebuild anyway). Go's build cache
# (~/.cache/go-build) makes a rebuild after a small change fast; the first build
# on a machine compiles all of Kubernetes (see realcluster/README.md for times).
#
# Env: GO (the go command; default: go on PATH, else /usr/local/go/bin/go),
#      REALCLUSTER_BIN (output path).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/realcluster"
out="${REALCLUSTER_BIN:-$root/target/realcluster/realcluster}"

if [ -z "${GO:-}" ]; then
    if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi

if [ "${1:-}" != "--force" ] && [ -x "$out" ] &&
    [ -z "$(find "$src" \( -name '*.go' -o -name go.mod -o -name go.sum -o -path "$src/stages/*.yaml" \) -newer "$out" -print -quit)" ]; then
    echo "realcluster: $out is up to date"
    exit 0
fi

mkdir -p "$(dirname "$out")"
cd "$src"
echo "realcluster: building $out with $("$GO" version)"
start=$SECONDS
# nice: the machine is shared with Rust builds. -buildvcs=false: no VCS stamping
# (works in git worktrees and tarballs alike). -s -w: no symbol table/DWARF
# (about a third smaller; panics still have file:line).
nice -n 19 "$GO" build -buildvcs=false -ldflags='-s -w' -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "realcluster: built in $((SECONDS - start))s ($(du -h "$out" | cut -f1))"
nice -n 19 "$GO" vet -buildvcs=false ./...
echo "realcluster: go vet ok"
