# pinlater developer targets. Local services: see scripts/services.
SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed

.PHONY: venv services services-core setup kombu-suite test test-core test-tiers soak demo demo-core run bench chaos down lint

venv: $(STAMP)

# (Re)install when pyproject.toml is newer than the stamp, or the venv is gone.
# Without pip's bytecode: the tests read theirs from .var/pycache (below), and
# compiling every installed package took a quarter of the install.
$(STAMP): pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --no-compile -e '.[dev]'
	@touch $(STAMP)

services:
	scripts/services up

# Redis and MariaDB only: what the job service itself runs on.
services-core:
	scripts/services up-core

# The venv and the services need nothing of each other: on a fresh machine
# each downloads for a minute or more, so they are set up side by side.
setup:
	@$(MAKE) --no-print-directory -j2 venv services

# Kombu's own transport tests, for the installed kombu (fetched once with pip).
kombu-suite: venv
	$(VPY) -m tests.workers.kombu_suite

# How the suite is spread over processes (pytest-xdist; a file's tests stay
# in one process, each with its own Redis dbs; the longest are handed out
# first, in the order tests/conftest.py sorts them): tests marked `serial_hbase`
# stop an HBase cluster or one of its Thrift servers, so they run apart from
# the other HBase tests, beside the core's (which use no HBase);
# tests marked `serial` need the machine to themselves, so they run alone,
# last.
# The apps' tests spend much of their time waiting on HBase and Celery
# workers, so they get more processes than cores; the core's, beside the
# HBase outages, get 4 (with 3 the machine sat partly idle near their end).
APP_PROCESSES ?= 5
CORE_PROCESSES ?= 4
CORE_TESTS := tests/unit tests/contract tests/integration tests/thrift tests/workers
# Folders of tests/ that hold no tests, only what the tests share.
TEST_SUPPORT := tests/support tests/__pycache__
# The apps' tier: every other folder of tests/, found, so a new one runs
# without being listed (tests/unit/test_test_tiers.py checks the tiers).
APP_TESTS := $(filter-out $(CORE_TESTS) $(TEST_SUPPORT),$(patsubst %/,%,$(sort $(wildcard tests/*/))))
# Core tests that mostly wait on the processes they start (CLI runs, server
# processes, the server benchmark's smoke) and time nothing tightly: `make
# test` runs them beside the apps' tests, so that the rest of the core's take
# about as long as the HBase outages they run beside.
CORE_WAITING := tests/integration/test_cli.py tests/integration/test_cli_errors.py \
	tests/integration/test_cli_regex.py tests/thrift/test_bench_smoke.py tests/thrift/test_server_processes.py
# Each run ends listing its slowest tests: CI's time limit is watched from
# its log, and a test that grew shows there first.
PYTEST := $(VPY) -m pytest -q --durations=15
SPREAD := -p xdist --dist loadgroup --no-loadscope-reorder -m "not serial and not serial_hbase"

# Bytecode is cached under .var, out of the source tree, even where the
# environment says not to write it (PYTHONDONTWRITEBYTECODE): otherwise each
# of the hundreds of Python processes a run starts (workers, CLIs, servers)
# compiles the project again, and pytest rewrites every test module again
# (collecting all the tests: 9.9 s without the cache, 3.7 s with it).
test test-core soak: export PYTHONPYCACHEPREFIX = $(CURDIR)/.var/pycache
test test-core soak: export PYTHONDONTWRITEBYTECODE =

# The job service: its backends, the Thrift server and the Celery transport,
# against Redis and MariaDB only (no JVM, no browser, no network).
test-core: venv services-core kombu-suite
	$(PYTEST) $(SPREAD) -n $(CORE_PROCESSES) $(CORE_TESTS)
	$(PYTEST) -p no:xdist -m serial $(CORE_TESTS)

# Everything, what CI runs: the trimming coprocessor's Java unit tests
# (Maven Surefire), then every Python test.
# The clusters run with C1 alone (PINLATER_HBASE_JIT, see scripts/hbase): on
# 2 cores, C2 compiling HBase took the CPU the tests wait for.
test: export PINLATER_HBASE_JIT = quick
test: setup kombu-suite
	scripts/hbase coprocessor test
	$(PYTEST) $(SPREAD) -n $(APP_PROCESSES) $(APP_TESTS) $(CORE_WAITING)
	scripts/concurrently "$(PYTEST) -p no:xdist -m serial_hbase $(APP_TESTS)" \
		'$(PYTEST) $(SPREAD) -n $(CORE_PROCESSES) $(CORE_TESTS) $(addprefix --ignore=,$(CORE_WAITING))'
	$(PYTEST) -p no:xdist -m "serial and not chaos"

# The consistency model with many more examples than `make test` gives it
# (SOAK_EXAMPLES per backend, about 1 s each), and the scale tests at
# SCALE_FOLLOWERS followers of one account (`make test`: 20,000).
SOAK_EXAMPLES ?= 1000
SCALE_FOLLOWERS ?= 100000
soak: export PINLATER_HBASE_JIT = quick
soak: venv services
	PINLATER_CONSISTENCY_EXAMPLES=$(SOAK_EXAMPLES) PINLATER_CONSISTENCY_STEPS=60 \
		$(VPY) -m pytest -q -o timeout=0 tests/consistency
	PINLATER_SCALE_FOLLOWERS=$(SCALE_FOLLOWERS) \
		$(VPY) -m pytest -q -o timeout=0 -s tests/feeds/test_fanout_scale.py tests/typeahead/test_rename_scale.py

test-tiers:
	@echo "core: $(CORE_TESTS)"
	@echo "app: $(APP_TESTS)"
	@echo "support: $(TEST_SUPPORT)"

demo: venv services
	$(VPY) -m tasks.demo

# Every Procfile process (honcho; Ctrl-C stops them), with the venv on PATH
# and on the demo's settings (.var/demo.env, which `make demo` writes too),
# so the dashboard shows the demo's jobs.
run: venv services .var/demo.env
	scripts/run

.var/demo.env: | venv
	$(VPY) -m tasks.demo --write-env

demo-core: venv services
	$(VPY) -m pinlater.demo

# Benchmarks measure the clusters as they would run (C1 then C2).
bench: export PINLATER_HBASE_JIT = full
bench: venv services
	$(VPY) bench/core.py
	$(VPY) bench/fairness.py

# The faults at full length, each judged by a ledger of acknowledged writes:
# network faults between hosts (tests/faults: a Redis shard black-holed, a
# Thrift server cut off from its client, MariaDB cut off from the workers,
# the primary HBase black-holed under feed reads, 30 s each; `make test`
# runs them for 6 s), then region servers SIGKILLed (with
# and without hbase:meta), crashed and paused under load on a distributed
# cluster of its own, with HBase's default recovery settings too
# (bench/recovery.py), and a fan-out through a region server's death
# (tests/faults/test_regionserver_fanout.py, marked chaos: `make test`
# leaves it to this run and smokes the recovery benchmark); both also on
# HDFS. Measured whole: 15 min 9 s (the faults 6 min 55 s, the benchmark
# about 8 min).
chaos: export PINLATER_FAULT_SECONDS = 30
chaos: export PINLATER_HBASE_JIT = quick
chaos: venv services
	$(PYTEST) -p no:xdist -s tests/faults
	$(VPY) bench/recovery.py

down:
	scripts/services down

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy pinlater dashboards workers tasks tests bench
