# The README's commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The slowest peers (about 100 jobs/s) on fewer jobs, so that a run fits in an hour.
BENCH_SIZES = --peer-n dbos=2000,procrastinate=3000 --backend-n 3000
STAMP := $(VENV)/.installed
# `make test`'s steps, in order (each a target below); `a+b` runs a and b at the same
# time (scripts/steps.sh): they mostly wait, on subprocesses, servers and sleeps.
# The chaos runs restart the database servers: they run alone, one after the other.
TEST_STEPS = test-main test-acceptance test-bench-smoke test-partitioned test-serializable-main \
	test-distributed-main test-chaos test-partitioned-chaos test-serializable-chaos \
	test-distributed-chaos

.PHONY: setup demo test unit $(subst +, ,$(TEST_STEPS)) test-serializable test-distributed test-partitions chaos lint docs dist bench services browser clean

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

browser:  ## Debian's Chromium for the dashboard's browser tests (no browser download)
	scripts/browser.sh

# `make test` runs each step of TEST_STEPS, every one even
# when an earlier one failed, then prints which passed and which failed
# (scripts/steps.sh), one step after the other: the unit and integration tests two
# at a time (each has databases of its own; a worker takes the next test as soon as
# it is free), the acceptance tests, the benchmark harness's quick runs, the
# partitioned layout's, the SERIALIZABLE database's and the distributed profile's own
# tests; then the short chaos runs (they restart the database servers). A step
# written `a+b` runs a and b at the same time; six at once loaded this 2-core
# machine past what the acceptance tests' leases allow (a worker killed with an 8 s
# lease, then three commands that must see its rows still held), so none is joined
# today. `test-partitions` runs the store's and the ledger's tests on the
# partitioned layout too, as CI does.
test: setup services browser  ## the whole default suite (unit, integration, acceptance)
	scripts/steps.sh $(MAKE) $(TEST_STEPS)

unit: setup  ## the unit tests only: no servers, under a minute
	$(BIN)/python -m pytest -q -n 2 tests/unit

test-main:
	$(BIN)/python -m pytest -q -n 2 --dist worksteal tests/unit tests/integration

test-acceptance:
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup tests/acceptance \
		--ignore=tests/acceptance/test_chaos.py --ignore=tests/acceptance/test_bench_smoke.py

# The benchmark harness's quick runs: the longest tests (minutes each, mostly waiting
# on their processes), a step of their own so that they start at once.
test-bench-smoke:
	$(BIN)/python -m pytest -q -n 2 tests/acceptance/test_bench_smoke.py

test-chaos:
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup tests/acceptance/test_chaos.py

test-partitioned:
	DENPYO_TEST_POSTGRES_PARTITIONS=daily $(BIN)/python -m pytest -q -n 2 \
		tests/integration/test_partitions.py

test-partitioned-chaos:
	DENPYO_TEST_POSTGRES_PARTITIONS=daily $(BIN)/python -m pytest -q \
		-k "test_chaos_short and postgresql" tests/acceptance/test_chaos.py

# The store's and the ledger's tests, the operator's, the double-send, fleet, action
# log, forget, async outbox and webhooks tests once more on PostgreSQL's partitioned layout
# (migrate --partitions daily).
test-partitions: setup services  ## the store's and the engine's tests again on the partitioned layout
	DENPYO_TEST_POSTGRES_PARTITIONS=daily $(BIN)/python -m pytest -q -n 2 -k postgresql \
		tests/integration/store tests/integration/ledger \
		tests/integration/test_operator.py tests/integration/test_double_send.py \
		tests/integration/test_rules_sql.py tests/integration/test_fleet.py \
		tests/integration/test_actions.py tests/integration/test_forget.py \
		tests/integration/test_async_outbox.py tests/integration/test_webhooks.py

# The store's and the ledger's tests, the worker's, the double-send, fleet, operator
# and action log tests and the conflicts' own once more on PostgreSQL databases whose
# default isolation is SERIALIZABLE (ALTER DATABASE ... SET
# default_transaction_isolation), as an application may set it; then the short chaos
# run on such a database.
test-serializable: test-serializable-main test-serializable-chaos  ## the store's and the worker's tests again on a SERIALIZABLE PostgreSQL

test-serializable-main: setup services
	DENPYO_TEST_POSTGRES_ISOLATION=serializable $(BIN)/python -m pytest -q -n 2 -k postgresql \
		tests/integration/store tests/integration/ledger \
		tests/integration/test_worker.py tests/integration/test_double_send.py \
		tests/integration/test_fleet.py tests/integration/test_operator.py \
		tests/integration/test_actions.py tests/integration/test_serializable.py

test-serializable-chaos:
	DENPYO_TEST_POSTGRES_ISOLATION=serializable $(BIN)/python -m pytest -q \
		-k "test_chaos_short and postgresql" tests/acceptance/test_chaos.py

# The store's, the ledger's and the worker's tests under the distributed SQL profile
# (store/distributed.py: `?denpyo_profile=distributed`) on PostgreSQL databases whose
# default isolation is SERIALIZABLE, every statement the stores ran kept in
# DIST_STATEMENTS; then the check that none of them uses what YugabyteDB or
# CockroachDB lack, and the short chaos run with injected 40001, 40003 and
# connection resets (no server restart). Set DENPYO_TEST_YUGABYTEDB_URL or
# DENPYO_TEST_COCKROACHDB_URL to run the profile's tests on a real engine too.
DIST_STATEMENTS = /tmp/denpyo-distributed-statements
DIST_ENV = DENPYO_TEST_POSTGRES_PROFILE=distributed DENPYO_TEST_POSTGRES_ISOLATION=serializable \
	DENPYO_TEST_STATEMENTS=$(DIST_STATEMENTS)
test-distributed: test-distributed-main test-distributed-chaos  ## the store's and the worker's tests under the distributed SQL profile

test-distributed-main: setup services
	rm -rf $(DIST_STATEMENTS)
	$(DIST_ENV) $(BIN)/python -m pytest -q -n 2 -k "postgresql or distributed" \
		tests/integration/store tests/integration/ledger tests/integration/test_worker.py \
		tests/integration/test_distributed_engines.py
	$(DIST_ENV) $(BIN)/python -m pytest -q -k "statement" \
		tests/integration/store/test_store_distributed.py

test-distributed-chaos:
	$(DIST_ENV) $(BIN)/python -m pytest -q -k "short" tests/acceptance/test_chaos_distributed.py

chaos: setup services  ## the long chaos run (100,000 submissions, many kills)
	$(BIN)/python -m pytest -q -m slow tests/acceptance

lint: setup  ## ruff, mypy and the import contracts (pyproject.toml), as CI would
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports

docs: setup  ## the documentation site (docs/, mkdocs.yml) into site/; warnings are errors
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The wheel needs no virtualenv: .venv's pip when it exists, else $(PYTHON)'s. A stale
# build/ could put files since removed into the wheel: it goes first.
dist:  ## the wheel, into dist/: pip install 'dist/denpyo-0.1.0-py3-none-any.whl[http]'
	rm -rf build dist
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m pip wheel --no-deps --wheel-dir dist .
	rm -rf build

bench: setup services  ## benchmarks against the peers; writes docs/benchmarks.md (~2 hours, the partitioned layout included)
	$(BIN)/python bench/run.py $(BENCH_SIZES)

clean:  ## remove the virtualenv, the tools' caches, site/ and any build output
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site build dist src/*.egg-info
