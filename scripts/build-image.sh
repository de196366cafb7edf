#!/usr/bin/env bash
# Builds the wasm-operator container image without a Docker daemon:
#
#   target/image/oci     an OCI image layout, tagged with the crate version
#   target/image/rootfs  the same image unpacked (what a container sees)
#
# Usage: scripts/build-image.sh [--push HOST:PORT/REPO[:TAG]] [--insecure]
#
# What is inside (deploy/image/README.md says more): the host binary built
# with the `release-image` profile and `--no-default-features` (no embedded
# API server) at /usr/local/bin/wasm-operator; the glibc libraries `ldd`
# lists for it and the loader, copied from this Debian machine; Debian's CA
# bundle; /etc/passwd and /etc/group with the user `nonroot` (65532); a
# world-writable /tmp (sticky). No shell, no package manager, nothing else.
#
# The layer is one tar written by GNU tar (sorted, numeric owners, every
# mtime = SOURCE_DATE_EPOCH, default: the HEAD commit's time), added with
# `umoci raw add-layer`; `umoci config` sets the entrypoint, user and labels
# with the same timestamp, so the same binary gives the same image digest.
# Tools: umoci and skopeo from Debian (scripts/install-test-deps.sh).
#
# --push copies the image to the registry with skopeo and checks what the
# registry serves with `skopeo inspect` (os/architecture, user, entrypoint,
# version and source labels); a mismatch fails the script. --insecure: the
# registry speaks plain HTTP / has no trusted certificate (loopback tests).
#
# Idempotent: cargo skips the build when the binary is up to date; the
# layout is assembled afresh (a few seconds) and swapped in. Concurrent runs
# (several test processes) take turns on target/image.lock.
#
# Env: IMAGE_SOURCE (the source label; default below), SOURCE_DATE_EPOCH,
#      CARGO_TARGET_DIR, WASM_OPERATOR_IMAGE_BINARY (package this binary
#      instead of building one: a binary built elsewhere, e.g. by a release
#      job, or a quick check of the assembly with a debug build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

die() { printf 'build-image: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'build-image: %s\n' "$*"; }

push=
tls_verify=true
while [ $# -gt 0 ]; do
    case "$1" in
        --push) [ $# -ge 2 ] || die "--push needs HOST:PORT/REPO[:TAG]"; push="$2"; shift 2 ;;
        --insecure) tls_verify=false; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d'; exit 0 ;;
        *) die "unknown argument '$1' (usage: scripts/build-image.sh [--push HOST:PORT/REPO[:TAG]] [--insecure])" ;;
    esac
done

for tool in umoci skopeo tar ldd flock; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool is not installed: run scripts/install-test-deps.sh (umoci and skopeo are Debian packages)"
done

target="${CARGO_TARGET_DIR:-$root/target}"
out="$target/image"
mkdir -p "$out"
# One build at a time: test processes may run this script concurrently.
exec 9>"$target/image.lock"
flock 9

source_url="${IMAGE_SOURCE:-https://github.com/wasm-operator/wasm-operator}"
license="$(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
revision="$(git rev-parse HEAD 2>/dev/null || true)"
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

start=$SECONDS
if [ -n "${WASM_OPERATOR_IMAGE_BINARY:-}" ]; then
    binary="$WASM_OPERATOR_IMAGE_BINARY"
    [ -x "$binary" ] || die "WASM_OPERATOR_IMAGE_BINARY=$binary is not an executable file"
    log "packaging the given binary $binary (WASM_OPERATOR_IMAGE_BINARY; no build)"
else
    log "building the binary (cargo build --profile release-image --no-default-features)"
    cargo build --quiet -p wasm-operator --profile release-image --no-default-features --bin wasm-operator
    binary="$target/release-image/wasm-operator"
    [ -x "$binary" ] || die "cargo did not produce $binary"
fi
version="$("$binary" --version | awk '{print $2}')"
[ -n "$version" ] || die "$binary --version printed no version"
log "binary: $binary ($version, $(du -h "$binary" | cut -f1), build step $((SECONDS - start))s)"

work="$(mktemp -d "$out/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT
staging="$work/rootfs"
mkdir -p "$staging"/{usr/local/bin,etc/ssl/certs,tmp,home/nonroot}

install -m 0755 "$binary" "$staging/usr/local/bin/wasm-operator"
# The libraries the dynamic binary needs and the loader (its ELF
# interpreter), at the paths ldd resolves them to, as regular files.
libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
[ -n "$libs" ] || die "ldd lists no libraries for $binary (a static binary needs no copy: adjust this script)"
for lib in $libs; do
    mkdir -p "$staging$(dirname "$lib")"
    cp -L "$lib" "$staging$lib"
    chmod 0755 "$staging$lib"
done
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$staging/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$staging/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$staging/etc/group"
# /etc/hosts first (Kubernetes writes the pod's), then DNS.
printf 'hosts: files dns\n' >"$staging/etc/nsswitch.conf"
chmod 0644 "$staging"/etc/{passwd,group,nsswitch.conf}
chmod 1777 "$staging/tmp"
chmod 0700 "$staging/home/nonroot"

# The layer: reproducible tar (sorted, fixed owners and mtimes). Everything
# belongs to root except the user's home.
tar_flags=(--sort=name --numeric-owner --mtime="@$epoch" --format=posix
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -C "$staging")
entries=$(cd "$staging" && find . -mindepth 1 ! -path ./home/nonroot | sed 's|^\./||' | LC_ALL=C sort)
# shellcheck disable=SC2086 # one entry per line, no spaces in these paths
tar --create --file "$work/layer.tar" --owner=0 --group=0 --no-recursion "${tar_flags[@]}" $entries
tar --append --file "$work/layer.tar" --owner=65532 --group=65532 --no-recursion "${tar_flags[@]}" home/nonroot

layout="$work/oci"
image="$layout:$version"
umoci init --layout "$layout"
umoci new --image "$image"
umoci raw add-layer --image "$image" --history.created "$created" \
    --history.created_by "scripts/build-image.sh" "$work/layer.tar"
umoci config --image "$image" --no-history --created "$created" \
    --architecture amd64 --os linux \
    --config.user 65532:65532 \
    --config.entrypoint /usr/local/bin/wasm-operator --config.cmd run \
    --config.env PATH=/usr/local/bin \
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --config.env WASM_OPERATOR_CACHE_DIR=/tmp/wasm-operator \
    --config.label "org.opencontainers.image.title=wasm-operator" \
    --config.label "org.opencontainers.image.description=A Kubernetes operator host whose application logic runs in sandboxed WebAssembly components." \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.source=$source_url" \
    ${revision:+--config.label "org.opencontainers.image.revision=$revision"} \
    ${license:+--config.label "org.opencontainers.image.licenses=$license"}
umoci gc --layout "$layout"
# The unpacked image, as a container runtime would see it.
umoci unpack --rootless --image "$image" "$work/bundle" >/dev/null

rm -rf "$out/oci" "$out/rootfs" "$out/bundle"
mv "$layout" "$out/oci"
mv "$work/bundle" "$out/bundle"
ln -s bundle/rootfs "$out/rootfs"

# Sizes: what a pull transfers (compressed layers) and what it unpacks to.
manifest="$(skopeo inspect --raw "oci:$out/oci:$version")"
manifest_digest="$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)"
compressed="$(printf '%s' "$manifest" |
    python3 -c 'import json, sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')"
unpacked="$(du -sb "$out/bundle/rootfs" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
log "image: $out/oci:$version (manifest sha256:$manifest_digest)"
log "size: $(mib "$compressed") compressed layers, $(mib "$unpacked") unpacked ($out/rootfs)"

if [ -z "$push" ]; then
    exit 0
fi

log "pushing to $push"
skopeo copy --quiet --dest-tls-verify="$tls_verify" "oci:$out/oci:$version" "docker://$push"
inspect="$(skopeo inspect --tls-verify="$tls_verify" --config "docker://$push")"
field() {
    printf '%s' "$inspect" | python3 -c '
import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("/"):
    value = (value or {}).get(key)
print(json.dumps(value) if not isinstance(value, str) else value)
' "$1"
}
expect() {
    local what="$1" key="$2" want="$3" got
    got="$(field "$key")"
    [ "$got" = "$want" ] ||
        die "$push: $what is '$got', expected '$want' (skopeo inspect --config docker://$push)"
}
expect "the architecture" architecture amd64
expect "the OS" os linux
expect "the user" config/User 65532:65532
expect "the entrypoint" config/Entrypoint '["/usr/local/bin/wasm-operator"]'
expect "the cmd" config/Cmd '["run"]'
expect "the version label" config/Labels/org.opencontainers.image.version "$version"
expect "the source label" config/Labels/org.opencontainers.image.source "$source_url"
log "pushed and checked $push (amd64/linux, user 65532:65532, entrypoint /usr/local/bin/wasm-operator, version $version)"
