# Both targets create or update .venv themselves on a fresh machine (Python 3.11 + pip, Java 17).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-unit lint venv bench ui browser postgres

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m testbed.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The end-to-end UI test drives Debian's Chromium; installed here when missing (needs root, as in CI).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# The end-to-end test runs Dagster on Debian's PostgreSQL server, which the test starts on loopback.
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }

# Test files run in three worker processes (pytest-xdist), a file's tests together in one: most of
# the suite waits on JVMs, servers and Dagster's daemons, so three workers share two cores well.
test: lint browser postgres
	$(VENV)/bin/pytest -n 3 --dist loadfile --durations=25

# The quick loop: unit tests only, with no Java (JAVA_HOME points nowhere, so a test that starts a
# JVM fails instead of passing by luck).
test-unit: $(STAMP)
	JAVA_HOME=/nonexistent/no-java-in-the-unit-tier $(VENV)/bin/pytest -m unit -q -n 3 --dist loadfile

# The Dagster UI on the project's instance (dagster_home/dagster.yaml), with the runs `make demo` made.
ui: $(STAMP)
	CKPT_ROOTS='[{"name": "demo", "url": "$(CURDIR)/demo-output/checkpoints"}]' \
	DAGSTER_HOME=$(CURDIR)/dagster_home $(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1

bench: $(STAMP)
	$(PY) -m bench.gc_plan
	$(PY) -m bench.s3_requests
	$(PY) -m bench.scale
