# lmc — the targets CI and users call.  A virtualenv in .venv is created or reused.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-slow demo lint bench golden clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install lmc with its test extras

test: $(STAMP)  ## the default suite (what CI runs)
	$(BIN)/python -m pytest -q -n 2 -p no:cacheprovider

test-slow: $(STAMP)  ## large-net compiles, long trainings
	$(BIN)/python -m pytest -q -m slow -p no:cacheprovider

demo: $(STAMP)  ## train the digits CNN on the embedded dataset
	$(BIN)/lmc train specs/digits_cnn.yaml --out runs/digits_cnn

lint: $(STAMP)
	$(BIN)/python -m pyflakes lmc tests

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/run.py --results benchmarks/RESULTS.md

clean:
	rm -rf build runs .pytest_cache
