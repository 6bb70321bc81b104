#!/usr/bin/env bash
# Install Debian's chromium (the browser the e2e tests drive through Playwright) when missing.
# Idempotent: does nothing when /usr/bin/chromium already runs. Needs root (or sudo) for apt-get.
# Playwright's own browser download does not work here (no network beyond the package registries).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [[ -x "${CHROMIUM}" ]] && "${CHROMIUM}" --version >/dev/null 2>&1; then
    echo "install_chromium: $("${CHROMIUM}" --version 2>/dev/null) already installed" >&2
    exit 0
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || { echo "install_chromium: need root or sudo for apt-get" >&2; exit 1; }
    SUDO=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
"${CHROMIUM}" --version 2>/dev/null >&2
