# ServeScope task file. `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PORT   ?= 8501

.PHONY: demo ui test test-all lint format bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

## demo: fill the embedded store with the demo (sim engines × load levels), open the dashboard
demo: $(STAMP)
	$(BIN)/servescope demo --port $(PORT)

## ui: open the dashboard on http://127.0.0.1:$(PORT) over the current store
ui: $(STAMP)
	$(BIN)/servescope ui --port $(PORT)

## test: the self-contained suite (DuckDB, the sim, AppTest): no PostgreSQL, browser, llama.cpp
##       or the 2-minute soak test
test: $(STAMP)
	$(BIN)/pytest -m "not postgres and not e2e and not llamacpp and not slow" -q

## test-all: lint, then everything: also PostgreSQL, Debian's chromium and llama.cpp's server
test-all: $(STAMP) lint
	bash tools/test_all.sh

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## bench: the benchmark scripts (they print figures; see bench/README.md)
bench: $(STAMP)
	$(BIN)/python bench/store_ingest.py
	$(BIN)/python bench/loadgen_capacity.py
	$(BIN)/python bench/measurement_error.py
	$(BIN)/python bench/sim_calibration.py
	$(BIN)/python bench/metrics_parse.py
	$(BIN)/python bench/watch_overhead.py
	$(BIN)/python bench/import_vllm_100k.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
