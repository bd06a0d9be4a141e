# pinlater developer targets. Local services: see scripts/services.
SHELL   := /bin/bash
PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed

.PHONY: venv services test soak demo demo-core bench down lint

venv: $(STAMP)

# (Re)install when pyproject.toml is newer than the stamp, or the venv is gone.
$(STAMP): pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	@touch $(STAMP)

services:
	scripts/services up

# The trimming coprocessor's Java unit tests (Maven Surefire), then every Python test.
test: venv services
	scripts/hbase coprocessor test
	$(VPY) -m pytest -q

# The consistency model with many more examples than `make test` gives it
# (SOAK_EXAMPLES per backend, about 1 s each), and the scale tests at
# SCALE_FOLLOWERS followers of one account (`make test`: 20,000).
SOAK_EXAMPLES ?= 1000
SCALE_FOLLOWERS ?= 100000
soak: venv services
	PINLATER_CONSISTENCY_EXAMPLES=$(SOAK_EXAMPLES) PINLATER_CONSISTENCY_STEPS=60 \
		$(VPY) -m pytest -q -o timeout=0 tests/consistency
	PINLATER_SCALE_FOLLOWERS=$(SCALE_FOLLOWERS) \
		$(VPY) -m pytest -q -o timeout=0 -s tests/feeds/test_fanout_scale.py tests/typeahead/test_rename_scale.py

demo: venv services
	$(VPY) -m tasks.feeds.demo

demo-core: venv services
	$(VPY) -m pinlater.demo

bench: venv services
	$(VPY) bench/core.py

down:
	scripts/services down

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy pinlater dashboards workers tasks tests bench
