#!/usr/bin/env bash
# Builds the Python and TypeScript plugins (docs/languages.md) as WebAssembly
# components, next to the Rust ones:
#   plugins/webapp-py        -> target/wasm32-wasip2/release/webapp_py.wasm   (componentize-py)
#   plugins/webapp-ts        -> target/wasm32-wasip2/release/webapp_ts.wasm   (jco componentize)
#   plugins/fixtures/py-faulty, ts-faulty -> py_faulty.wasm, ts_faulty.wasm   (test fixtures)
# Each imports nothing but wasm-operator:plugin (componentize-py --stub-wasi;
# jco --disable all), so the host's sandbox is a type check at load time.
#
# Installs the pinned toolchains first (scripts/install-lang-tools.sh).
# A component is rebuilt only when one of its inputs (the WIT, its SDK, its
# sources, the toolchain stamp) is newer than it; a build takes 30-70 s on 2
# cores, so an up-to-date run costs nothing. The TypeScript sources are type
# checked with tsc first (sdk-ts/tsconfig.check.json).
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
        --disable all -o "$wasm.tmp" 2>&1 | grep -v -E 'UNRESOLVED_IMPORT|│|╭|╰|^\s*$' || true
    [ -f "$wasm.tmp" ] || { log "error: jco componentize $dir/app.ts produced nothing (output above)" >&2; exit 1; }
    mv "$wasm.tmp" "$wasm"
    log "$2.wasm built in $((SECONDS - started)) s"
}

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

for p in webapp_py webapp_ts py_faulty ts_faulty; do
    printf '%s\t%s bytes\n' "$out/$p.wasm" "$(stat -c %s "$out/$p.wasm")"
done
