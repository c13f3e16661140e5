# lmc — the targets CI and users call.  A virtualenv in .venv is created or reused;
# `demo` installs only what lmc needs, `test` adds the test extras (pytest, hypothesis, JAX as
# the gradient oracle), `bench` adds JAX and PyTorch (the peers).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: setup test test-slow test-grid demo lint bench docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(RUN_STAMP)

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $@ $(RUN_STAMP) $(TEST_STAMP)

setup: $(TEST_STAMP)  ## create .venv and install lmc with its test extras

test: $(TEST_STAMP)  ## the stage order (lint-imports), then the default suite (what CI runs)
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider

# the bench extra brings torch + torchvision: tests/test_published.py checks the reference nets
# against torchvision's models (it skips without them)
test-slow: $(BENCH_STAMP)  ## large-net compiles, long trainings, GPU cross-compiles, torchvision
	$(BIN)/python -m pytest -q -n 2 -m 'slow and not grid' -p no:cacheprovider

# the oracle's whole layer x loss x optimizer cross product and every loss on every @input_grad
# case: about 17,000 compiled steps, some 17 hours on 2 cores (a nightly job, not a session's)
test-grid: $(TEST_STAMP)  ## the exhaustive oracle grids
	$(BIN)/python -m pytest -q -n 2 -m grid -p no:cacheprovider tests/test_oracle.py tests/test_input_grad.py

demo: $(RUN_STAMP)  ## train the digits CNN on the embedded dataset (about 30 s on 2 CPU cores), plot it
	$(BIN)/lmc train specs/digits_cnn.yaml --out runs/digits_cnn --overwrite
	$(BIN)/lmc plot runs/digits_cnn --plot runs/digits_cnn/curves.png
	@echo
	@echo "made: runs/digits_cnn/ (the run directory), runs/digits_cnn/last.npz (the checkpoint),"
	@echo "      runs/digits_cnn/metrics.jsonl (the metrics), runs/digits_cnn/curves.png (the curves)"
	@echo "next (or first: . $(VENV)/bin/activate, then plain lmc):"
	@echo "  $(BIN)/lmc eval specs/digits_cnn.yaml --init runs/digits_cnn/last.npz"
	@echo "  $(BIN)/lmc attack specs/digits_cnn.yaml --init runs/digits_cnn/last.npz --eps 0,0.05,0.1 --limit 200"
	@echo "  $(BIN)/lmc bench specs/digits_cnn.yaml"

# the stage order (.importlinter: no stage imports a later one, no cycle) and unused names
lint: $(TEST_STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pyflakes lmc tests benchmarks

bench: $(BENCH_STAMP)  ## lmc vs JAX vs PyTorch on the four reference nets; writes benchmarks/RESULTS.md
	$(BIN)/python benchmarks/run.py --compile-only --dispatch-profile --results benchmarks/RESULTS.md

docs: $(RUN_STAMP)  ## rewrite the registry tables of docs/spec.md (layers, losses, optimizers, datasets)
	$(BIN)/python tools/gendocs.py

clean:
	rm -rf build runs .pytest_cache
