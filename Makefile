# The two commands: `make demo` and `make test`. Both create the environment first.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip's configured extra indexes on these machines print one warning per package; keep the log readable.
QUIET_PIP := grep -v "^WARNING: Location" || true

PROMETHEUS_DIR := .cache/prometheus
PROMETHEUS_BIN := $(PROMETHEUS_DIR)/root/usr/bin/prometheus
PUSHGATEWAY_BIN := $(PROMETHEUS_DIR)/root/usr/bin/prometheus-pushgateway
ALERTMANAGER_BIN := $(PROMETHEUS_DIR)/root/usr/bin/prometheus-alertmanager

.PHONY: venv system-deps prometheus demo test lint typecheck docs unit integration bench stack-up stack-down clean compose-test soak

$(STAMP): requirements.lock pyproject.toml
	@echo "==> creating $(VENV) from requirements.lock (first time: ~2-4 minutes)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --upgrade "pip>=24" 2>&1 | $(QUIET_PIP)
	@$(BIN)/pip install -q -r requirements.lock 2>&1 | $(QUIET_PIP)
	@# pyspark-client 4.2 (pulled in by the Spark provider) overwrites pyspark 4.3's Python files, and
	@# Python UDFs then fail against the 4.3 JVM; put pyspark's own files back.
	@$(BIN)/pip install -q --no-deps --force-reinstall "$$(grep '^pyspark==' requirements.lock)" 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -c "import pyspark, sys; v = pyspark.__version__; sys.exit(0 if v.startswith('4.3') else f'pyspark {v} != 4.3')"
	@$(BIN)/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	@$(BIN)/python -c "import modelops, airflow, mlflow, great_expectations, pyspark, tritonclient.http" > /dev/null
	@touch $(STAMP)
	@echo "==> environment ready: $(BIN)/modelops"

venv: $(STAMP)

# Prometheus & co. (Debian's, unpacked) run with the demo stack: its canary reads PromQL.
demo: venv prometheus
	$(BIN)/modelops demo

# Debian's chromium opens the drift report in the integration tests (headless, as root in CI); Debian's
# PostgreSQL 15 server binaries run the MLflow backend test's private cluster (it must not skip on a fresh machine).
system-deps:
	@/sbin/ldconfig -p | grep -q 'libgomp.so.1 ' || { \
	  echo "==> installing Debian's libgomp1 (OpenMP runtime of the LightGBM wheel)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgomp1 >/dev/null; }
	@command -v chromium >/dev/null || { \
	  echo "==> installing Debian's chromium (headless browser for the report tests)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x /usr/lib/postgresql/15/bin/initdb || { \
	  echo "==> installing Debian's postgresql-15 (server binaries for the MLflow PostgreSQL backend test; its service is not started)"; \
	  created=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created=1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; rc=$$?; \
	  [ -z "$$created" ] || rm -f /usr/sbin/policy-rc.d; exit $$rc; }

# Debian 12's prometheus, downloaded and unpacked (never installed: its maintainer scripts would
# start a service on every interface); tests/integration/test_prometheus_source.py runs it on loopback.
$(PROMETHEUS_BIN):
	@echo "==> fetching Debian's prometheus package into $(PROMETHEUS_DIR) (unpacked, not installed)"
	@mkdir -p $(PROMETHEUS_DIR) && cd $(PROMETHEUS_DIR) && rm -f prometheus_*.deb && \
	  { apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb root/ && rm -f prometheus_*.deb
	@$(PROMETHEUS_BIN) --version | head -1

# Debian 12's Pushgateway (batch results) and Alertmanager (alerts to the apprise notifier), the same way.
$(PUSHGATEWAY_BIN) $(ALERTMANAGER_BIN) &:
	@echo "==> fetching Debian's prometheus-pushgateway and prometheus-alertmanager into $(PROMETHEUS_DIR) (unpacked)"
	@mkdir -p $(PROMETHEUS_DIR) && cd $(PROMETHEUS_DIR) && rm -f prometheus-*_*.deb && \
	  { apt-get download prometheus-pushgateway prometheus-alertmanager 2>/dev/null || \
	    { apt-get update -qq && apt-get download prometheus-pushgateway prometheus-alertmanager; }; } && \
	  for deb in prometheus-*_*.deb; do dpkg-deb -x "$$deb" root/; done && rm -f prometheus-*_*.deb
	@$(PUSHGATEWAY_BIN) --version 2>&1 | head -1 && $(ALERTMANAGER_BIN) --version 2>&1 | head -1

prometheus: $(PROMETHEUS_BIN) $(PUSHGATEWAY_BIN) $(ALERTMANAGER_BIN)

test: venv system-deps prometheus lint typecheck docs
	$(BIN)/pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

typecheck: venv
	$(BIN)/mypy plugins/modelops

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or a page missing from the nav.
# `$(BIN)/mkdocs serve` previews it at http://127.0.0.1:8000 while you edit.
docs: venv
	$(BIN)/mkdocs build --strict --site-dir .cache/site

unit: venv
	$(BIN)/pytest tests/unit

integration: venv prometheus
	$(BIN)/pytest -m integration

stack-up: venv
	$(BIN)/modelops stack up

stack-down: venv
	$(BIN)/modelops stack down

# The production topology for real: engine + base image when missing, the project image, up --wait with
# docker-compose.test.yml, the checks (pytest -m compose tests/compose), down -v always (docker/compose-test.sh).
compose-test: venv
	docker/compose-test.sh

# 30 minutes of generated traffic, a release every 5 minutes (good and 5 %-faulty alternating), gateway
# and Triton RSS / open files, spool size and p99 sampled each minute; not part of CI (bench/soak.py).
soak: venv
	$(BIN)/python bench/soak.py --minutes 30 --release-every-min 5

clean:
	-test -x $(BIN)/modelops && $(BIN)/modelops stack down
	rm -rf .modelops
