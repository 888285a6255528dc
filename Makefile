# Every target creates .venv on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/strided inspect examples/tiny-llama.safetensors --group
	$(BIN)/python examples/tour.py

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	# PyTorch adds reference columns when it installs; the benchmarks run without it.
	-$(BIN)/python -m pip install --quiet torch==2.13.0
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy src

clean:
	rm -rf $(VENV)
