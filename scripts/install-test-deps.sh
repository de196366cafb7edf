#!/usr/bin/env bash
# Installs what the test suites need on a fresh Debian machine.
# Idempotent: every step checks first and does nothing when already satisfied.
# To add a dependency, add one `ensure_*` line at the bottom.
set -euo pipefail

log() { printf 'install-test-deps: %s\n' "$*"; }

# ensure_pip MODULE PACKAGE: pip-install PACKAGE unless python3 can import MODULE.
ensure_pip() {
    local module="$1" package="$2"
    if python3 -c "import ${module}" >/dev/null 2>&1; then
        log "python module ${module} present"
        return 0
    fi
    log "installing python package ${package}"
    python3 -m pip install --quiet --disable-pip-version-check "${package}" \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "${package}"
}

# ensure_apt COMMAND PACKAGE: apt-get install PACKAGE unless COMMAND is on PATH.
ensure_apt() {
    local command="$1" package="$2"
    if command -v "${command}" >/dev/null 2>&1; then
        log "${command} present"
        return 0
    fi
    log "installing Debian package ${package}"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    if [ -z "${APT_UPDATED:-}" ]; then
        ${sudo} apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -qq "${package}" >/dev/null
}

# ensure_apt_package PACKAGE: apt-get install PACKAGE (callers check first).
ensure_apt_package() {
    log "installing Debian package $1"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    if [ -z "${APT_UPDATED:-}" ]; then
        ${sudo} apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive ${sudo} apt-get install -y -qq "$1" >/dev/null
}

ensure_apt python3 python3
ensure_apt pip3 python3-pip
ensure_pip kubernetes kubernetes
# kubectl ships with the machine image; it is not in Debian's archive, so only warn.
if ! command -v kubectl >/dev/null 2>&1; then
    log "WARNING: kubectl is not on PATH; the kubectl client test will be skipped"
fi
# OCI tests: a real registry (CNCF distribution), skopeo to check interop,
# htpasswd (apache2-utils) for the registry with basic auth.
ensure_apt docker-registry docker-registry
ensure_apt skopeo skopeo
ensure_apt htpasswd apache2-utils
# The container image (scripts/build-image.sh): umoci assembles the OCI
# layout; skopeo (above) pushes and inspects it.
ensure_apt umoci umoci
# Python and TypeScript plugins (scripts/build-lang-plugins.sh): Node.js and
# npm for jco, the venv module for componentize-py. The pinned toolchains
# themselves go into target/lang-tools (scripts/install-lang-tools.sh, which
# build-lang-plugins.sh runs; scripts/test.sh runs it in the background).
ensure_apt node nodejs
ensure_apt npm npm
if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
    ensure_apt_package python3-venv
fi
