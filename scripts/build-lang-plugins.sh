#!/usr/bin/env bash
# Builds the Python, TypeScript and Go plugins (docs/languages.md) as
# WebAssembly components, next to the Rust ones:
#   plugins/webapp-py        -> target/wasm32-wasip2/release/webapp_py.wasm   (componentize-py)
#   plugins/webapp-ts        -> target/wasm32-wasip2/release/webapp_ts.wasm   (jco componentize)
#   plugins/webapp-go        -> target/wasm32-wasip2/release/webapp_go.wasm   (go build + jco new)
#   plugins/fixtures/py-faulty, ts-faulty, go-faulty
#                            -> py_faulty.wasm, ts_faulty.wasm, go_faulty.wasm (test fixtures)
# Each imports nothing but wasm-operator:plugin (componentize-py --stub-wasi;
# jco --disable all; for Go the WASI adapter sdk-go/wasi-stub.wat), so the
# host's sandbox is a type check at load time.
#
# Installs the pinned toolchains first (scripts/install-lang-tools.sh).
# A component is rebuilt only when one of its inputs (the WIT, its SDK, its
# sources, the toolchain stamp) is newer than it; a build takes 30-70 s on 2
# cores (Go: a few seconds with a warm build cache), so an up-to-date run
# costs nothing. The TypeScript sources are type checked with tsc first
# (sdk-ts/tsconfig.check.json), the Go ones with `go vet` (GOOS=wasip1 and
# native).
# Go >= 1.24 must be on PATH (it is not installed by install-lang-tools.sh);
# it uses its default build cache.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools="${WASM_OPERATOR_LANG_TOOLS:-$root/target/lang-tools}"
out="${CARGO_TARGET_DIR:-$root/target}/wasm32-wasip2/release"
mkdir -p "$out"

bash scripts/install-lang-tools.sh
log() { printf 'build-lang-plugins: %s\n' "$*"; }

# stale OUTPUT INPUT...: true when OUTPUT is missing or an input is newer.
stale() {
    local output="$1"
    shift
    [ ! -f "$output" ] && return 0
    [ -n "$(find "$@" -newer "$output" -type f -print -quit)" ]
}

# build_py DIR NAME: componentize-py the module `app` of DIR into NAME.wasm.
build_py() {
    local dir="$1" wasm="$out/$2.wasm"
    if ! stale "$wasm" wit sdk-py/wasm_operator "$dir" "$tools/py/pyvenv.cfg"; then
        log "$2.wasm up to date"
        return 0
    fi
    local started=$SECONDS
    "$tools/py/bin/componentize-py" -d wit -w reconciler-plugin componentize app \
        -p "$dir" -p sdk-py --stub-wasi -o "$wasm.tmp" >/dev/null
    mv "$wasm.tmp" "$wasm"
    log "$2.wasm built in $((SECONDS - started)) s"
}

# build_ts DIR NAME: jco componentize DIR/app.ts into NAME.wasm.
build_ts() {
    local dir="$1" wasm="$out/$2.wasm"
    if ! stale "$wasm" wit sdk-ts/src "$dir" "$tools/node-tools.stamp"; then
        log "$2.wasm up to date"
        return 0
    fi
    local started=$SECONDS
    # The bundler warns that the host imports (wasm-operator:plugin/...) are
    # unresolved: they are meant to be, the component imports them.
    "$tools/node_modules/.bin/jco" componentize "$dir/app.ts" -w wit/plugin.wit -n reconciler-plugin \
        --disable all -o "$wasm.tmp" 2>&1 | grep -v -E 'UNRESOLVED_IMPORT|│|╭|╰|─|^\s*$' || true
    [ -f "$wasm.tmp" ] || { log "error: jco componentize $dir/app.ts produced nothing (output above)" >&2; exit 1; }
    mv "$wasm.tmp" "$wasm"
    log "$2.wasm built in $((SECONDS - started)) s"
}

# build_go DIR NAME: the Go main package in DIR (module with a replace to
# sdk-go) into NAME.wasm: a wasip1 reactor (c-shared, //go:wasmexport), the
# world embedded, then made a component whose WASI adapter is
# sdk-go/wasi-stub.wat (a wasi_snapshot_preview1 with no outside world, so
# the component imports nothing but wasm-operator:plugin).
go_work="${CARGO_TARGET_DIR:-$root/target}/lang-build/go"
build_go() {
    local dir="$1" wasm="$out/$2.wasm" work="$go_work/$2"
    if ! stale "$wasm" wit sdk-go "$dir" "$go_work/go.stamp" "$tools/node-tools.stamp"; then
        log "$2.wasm up to date"
        return 0
    fi
    local started=$SECONDS bin="$tools/node_modules/.bin"
    mkdir -p "$work"
    (cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o "$work/core.wasm" .)
    # `jco embed -n` does not reach wasm-tools (jco 1.35 passes `worldName`,
    # the API reads `world`), so it gets a WIT whose one world is
    # reconciler-plugin: wit/plugin.wit without `world plugin`.
    sed '/^world plugin {/,/^}/d' wit/plugin.wit >"$go_work/reconciler-plugin.wit"
    "$bin/jco" embed --wit "$go_work/reconciler-plugin.wit" "$work/core.wasm" -o "$work/core.embedded.wasm"
    "$bin/jco" new "$work/core.embedded.wasm" --adapt "wasi_snapshot_preview1=$go_work/wasi-stub.embedded.wasm" \
        -o "$wasm.tmp"
    mv "$wasm.tmp" "$wasm"
    log "$2.wasm built in $((SECONDS - started)) s"
}

# The Go toolchain, the stub adapter (binaryen's wasm-as, from jco's
# dependencies) and `go vet` of the SDK and the plugins.
go_dirs=(sdk-go plugins/webapp-go plugins/fixtures/go-faulty)
if ! command -v go >/dev/null 2>&1; then
    log "error: go is not on PATH; install Go 1.24 or later (https://go.dev/dl)" >&2
    exit 1
fi
case "$(go env GOVERSION)" in
    go1.1[0-9]* | go1.2[0-3] | go1.2[0-3].* | go1.[0-9] | go1.[0-9].*)
        log "error: $(go env GOVERSION) is too old: Go plugins need Go 1.24 or later (//go:wasmexport)" >&2
        exit 1
        ;;
esac
mkdir -p "$go_work"
# The toolchain stamp: rewritten (so newer than the components) when the Go
# version changes.
if [ "$(cat "$go_work/go.stamp" 2>/dev/null || true)" != "$(go env GOVERSION)" ]; then
    go env GOVERSION >"$go_work/go.stamp"
fi
if stale "$go_work/wasi-stub.embedded.wasm" sdk-go/wasi-stub.wat "$tools/node-tools.stamp"; then
    "$tools/node_modules/.bin/wasm-as" sdk-go/wasi-stub.wat -o "$go_work/wasi-stub.wasm"
    printf 'package wasm-operator:wasi-stub;\nworld stub {}\n' >"$go_work/stub.wit"
    "$tools/node_modules/.bin/jco" embed --wit "$go_work/stub.wit" "$go_work/wasi-stub.wasm" \
        -o "$go_work/wasi-stub.embedded.wasm"
fi
# Vetted for both targets: the SDK builds natively too (go test of a
# plugin's logic), with stand-ins for the host's imports.
for d in "${go_dirs[@]}"; do
    (cd "$d" && GOOS=wasip1 GOARCH=wasm go vet ./... && go vet ./...)
done

# The TypeScript SDK's WIT types, regenerated so that a WIT change shows in
# `git diff sdk-ts/types`, then a type check of the SDK and the plugins.
if stale sdk-ts/types/reconciler-plugin.d.ts wit "$tools/node-tools.stamp"; then
    "$tools/node_modules/.bin/jco" types wit/plugin.wit -n reconciler-plugin -o sdk-ts/types -q
fi
(cd sdk-ts && "$tools/node_modules/.bin/tsc" -p tsconfig.check.json)

build_py plugins/webapp-py webapp_py
build_py plugins/fixtures/py-faulty py_faulty
build_ts plugins/webapp-ts webapp_ts
build_ts plugins/fixtures/ts-faulty ts_faulty
build_go plugins/webapp-go webapp_go
build_go plugins/fixtures/go-faulty go_faulty

for p in webapp_py webapp_ts webapp_go py_faulty ts_faulty go_faulty; do
    printf '%s\t%s bytes\n' "$out/$p.wasm" "$(stat -c %s "$out/$p.wasm")"
done
