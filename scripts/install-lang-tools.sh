#!/usr/bin/env bash
# Installs the toolchains that build plugins in other languages than Rust
# (docs/languages.md), pinned, into target/lang-tools (never system-wide):
#   - componentize-py (PyPI) in a venv:          target/lang-tools/py/bin/componentize-py
#   - jco + componentize-js + typescript (npm):  target/lang-tools/node_modules/.bin/{jco,tsc}
# Idempotent: each tool is skipped when the pinned version is already there.
# Output directory: $WASM_OPERATOR_LANG_TOOLS (default target/lang-tools).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${WASM_OPERATOR_LANG_TOOLS:-$root/target/lang-tools}"
componentize_py_version=0.25.1
jco_version=1.35.0
componentize_js_version=0.23.0
typescript_version=5.9.3
# jco 1.35.0 reads WIT files through @bytecodealliance/preview2-shim, whose
# 0.26.1 dropped the default "/" preopen: `jco types` and `jco componentize`
# then fail with "failed to read path for WIT ... (os error 44)". 0.26.0
# still has it; pinned with an npm override.
preview2_shim_version=0.26.0

log() { printf 'install-lang-tools: %s\n' "$*"; }
mkdir -p "$tools"

if [ "$("$tools/py/bin/componentize-py" --version 2>/dev/null || true)" = "componentize-py $componentize_py_version" ]; then
    log "componentize-py $componentize_py_version present"
else
    log "installing componentize-py $componentize_py_version into $tools/py"
    python3 -m venv "$tools/py"
    "$tools/py/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$componentize_py_version"
fi

# The npm tools share one package.json so `npm ci`-like reuse is possible;
# the versions are pinned exactly (no ^ ranges).
stamp="jco@$jco_version componentize-js@$componentize_js_version typescript@$typescript_version preview2-shim@$preview2_shim_version"
if [ -x "$tools/node_modules/.bin/jco" ] && [ "$(cat "$tools/node-tools.stamp" 2>/dev/null || true)" = "$stamp" ]; then
    log "jco $jco_version, componentize-js $componentize_js_version, typescript $typescript_version present"
else
    if ! command -v npm >/dev/null 2>&1; then
        log "error: npm is not on PATH; install Node.js 20 or later (Debian: apt-get install nodejs npm)" >&2
        exit 1
    fi
    log "installing jco $jco_version, componentize-js $componentize_js_version, typescript $typescript_version into $tools/node_modules"
    printf '{"private": true, "overrides": {"@bytecodealliance/preview2-shim": "%s"}}\n' \
        "$preview2_shim_version" >"$tools/package.json"
    (cd "$tools" && npm install --silent --no-audit --no-fund --save-exact \
        "@bytecodealliance/jco@$jco_version" \
        "@bytecodealliance/componentize-js@$componentize_js_version" \
        "typescript@$typescript_version")
    echo "$stamp" >"$tools/node-tools.stamp"
fi
