# ServeScope task file. `make demo` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PORT   ?= 8501
# The default suite and the rest are complements: CI runs each test once (.ci/run).
FAST   := not postgres and not e2e and not llamacpp and not slow
REST   := postgres or e2e or llamacpp or slow
# `make test` runs in parallel (pytest-xdist), a whole file per worker (module fixtures built once);
# one worker more than the cores, as many tests wait on a subprocess or a socket.
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))

.PHONY: demo ui test test-rest test-all coverage lint format bench install clean

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
	$(BIN)/pytest -m "$(FAST)" -q -n $(WORKERS) --dist loadfile

## test-rest: only what `make test` leaves out (CI runs `make test`, `make lint`, then this: each
##            test once); provisions chromium, llama-server and the model as test-all does
test-rest: $(STAMP)
	bash tools/test_all.sh -m "$(REST)"

## test-all: lint, then everything (make test, then make test-rest): also PostgreSQL, Debian's
##           chromium and llama.cpp's server
test-all: $(STAMP) lint test test-rest

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

## coverage: statement coverage of `make test`, of the rest (after test-all's provisioning) and of
##           both together; data and report.txt in test-results/coverage/
COV := $(CURDIR)/test-results/coverage
coverage: $(STAMP)
	rm -rf $(COV) && mkdir -p $(COV)/make-test $(COV)/rest
	COVERAGE_FILE=$(COV)/make-test/.coverage $(BIN)/coverage run -m pytest -m "$(FAST)" -q \
		-n $(WORKERS) --dist loadfile
	COVERAGE_FILE=$(COV)/rest/.coverage SERVESCOPE_PYTEST="$(BIN)/coverage run -m pytest" \
		bash tools/test_all.sh -m "$(REST)"
	$(BIN)/coverage combine -q --keep --data-file=$(COV)/make-test.cov $(COV)/make-test/.coverage.*
	$(BIN)/coverage combine -q --keep --data-file=$(COV)/rest.cov $(COV)/rest/.coverage.*
	$(BIN)/coverage combine -q --keep --data-file=$(COV)/all.cov $(COV)/make-test.cov $(COV)/rest.cov
	$(BIN)/coverage report --data-file=$(COV)/all.cov > $(COV)/report.txt
	@echo "statement coverage: make test $$($(BIN)/coverage report --data-file=$(COV)/make-test.cov --format=total) %," \
		"the rest $$($(BIN)/coverage report --data-file=$(COV)/rest.cov --format=total) %," \
		"together $$($(BIN)/coverage report --data-file=$(COV)/all.cov --format=total) %"

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
