#!/usr/bin/env bash
# Builds sigstore's cosign for the tests of signed plugins: one binary with
# both major versions (realcluster/cmd/cosign: cosign v3, which signs with
# Sigstore bundles attached through the OCI referrers API or its tag-schema
# fallback, and cosign v2, which signs with tag-based `sha256-<hex>.sig`
# manifests), and two wrappers the tests run:
#
#   target/cosign/cosign3   (cosign v3)
#   target/cosign/cosign2   (cosign v2)
#
# Tests look for them in $WASM_OPERATOR_COSIGN3 / $WASM_OPERATOR_COSIGN2, else
# at those paths. The package is in realcluster's Go module (one go.mod, the
# k8s.io/grpc/protobuf packages cosign shares with the control plane compile
# once into Go's build cache, ~/.cache/go-build); scripts/test.sh runs this
# script in its background Go build chain, before scripts/build-realcluster.sh.
#
# Skips everything when the binary is newer than realcluster's go.mod/go.sum,
# every .go file of realcluster/cmd/cosign and this script (pass --force to
# rebuild anyway).
#
# Env: GO (the go command; default: go on PATH, else /usr/local/go/bin/go),
#      COSIGN_DIR (output directory; default target/cosign).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/realcluster"
pkg="$mod/cmd/cosign"
dir="${COSIGN_DIR:-$root/target/cosign}"
out="$dir/cosign"

if [ -z "${GO:-}" ]; then
    if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi

# The wrappers pick the major version by their first argument (see
# realcluster/cmd/cosign/main.go); they are rewritten every run (cheap) so a
# moved checkout still finds the binary next to them.
write_wrappers() {
    local v
    for v in 2 3; do
        printf '#!/bin/sh\n# cosign v%s (built by scripts/build-cosign.sh)\nexec "$(dirname "$0")/cosign" v%s "$@"\n' \
            "$v" "$v" >"$dir/cosign$v.tmp"
        chmod +x "$dir/cosign$v.tmp"
        mv -f "$dir/cosign$v.tmp" "$dir/cosign$v"
    done
}

if [ "${1:-}" != "--force" ] && [ -x "$out" ] &&
    [ -z "$(find "$pkg" "$mod/go.mod" "$mod/go.sum" "$root/scripts/build-cosign.sh" \
        \( -name '*.go' -o -name go.mod -o -name go.sum -o -name build-cosign.sh \) -newer "$out" -print -quit)" ]; then
    write_wrappers
    echo "cosign: $out is up to date ($("$out" module-versions | tr '\n' ' '))"
    exit 0
fi

mkdir -p "$dir"
cd "$mod"
echo "cosign: building $out with $("$GO" version)"
start=$SECONDS
# As scripts/build-realcluster.sh: nice (the machine is shared with Rust
# builds), no VCS stamping, no symbol table/DWARF.
nice -n 19 "$GO" build -buildvcs=false -ldflags='-s -w' -o "$out.tmp" ./cmd/cosign
mv -f "$out.tmp" "$out"
write_wrappers
echo "cosign: built in $((SECONDS - start))s ($(du -h "$out" | cut -f1)): $("$out" module-versions | tr '\n' ' ')"
