#!/usr/bin/env bash
# The controller-runtime WebApp controller of the scale benchmark
# (bench/scale/controller-runtime, issue 12): `go vet`, then `go build` into
# the path given.
#
#   scripts/build-controller-runtime-peer.sh OUTPUT   # vet and build
#   scripts/build-controller-runtime-peer.sh --vet    # vet only (scripts/test.sh)
#
# Its k8s.io modules are realcluster's versions (v0.37.2), so after
# scripts/build-realcluster.sh most packages come from Go's build cache:
# a cold vet compiles controller-runtime and its few own dependencies (~50 s
# on 2 loaded cores), a warm one takes about a second.
#
# Env: GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${GO:-}" ]; then
    if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTPUT | --vet" >&2
    exit 2
fi
out="$1"
if [ "$out" != --vet ]; then
    mkdir -p "$(dirname "$out")"
    out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
fi
cd "$root/bench/scale/controller-runtime"
nice -n 19 "$GO" vet -buildvcs=false ./...
echo "controller-runtime peer: go vet ok"
if [ "$out" != --vet ]; then
    nice -n 19 "$GO" build -buildvcs=false -o "$out" .
    echo "controller-runtime peer: built $out"
fi
