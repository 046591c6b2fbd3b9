# The README's commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all chaos lint bench services clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with denpyo and its test tools

demo: setup  ## the seed's story on SQLite, no services needed
	$(BIN)/denpyo demo

services:  ## start PostgreSQL, MariaDB, RabbitMQ and NATS if they are not running
	scripts/services.sh

test: setup services  ## the whole default suite (unit, integration, acceptance)
	$(BIN)/python -m pytest -q

chaos: setup services  ## the long chaos run (100,000 submissions, many kills)
	$(BIN)/python -m pytest -q -m slow tests/acceptance

lint: setup  ## ruff and mypy, as CI would
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

bench: setup services  ## benchmarks against the peers; writes docs/benchmarks.md
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
