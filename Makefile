# Two entry points: `make run` (set up, then run the example DAG on the embedded cluster)
# and `make test` (set up, then run the test suite). Both create .venv on first use.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The frameworks beyond TensorFlow (torch alone is several GB): installed for the tests, not for `make run`.
FRAMEWORKS := $(VENV)/.installed-frameworks
# MXNet 1.9.1, retired upstream, needs numpy < 1.24: it gets an environment of its own, which an
# MXNet job names as its python_venv (the test of a real MXNet job uses this one).
MXNET_VENV := .venv-mxnet
PYTEST_ARGS ?=
# The suite runs in 4 processes, a test module to each at a time (the longest first; see
# tests/conftest.py): most of a test's time is spent waiting on clusters and jobs, so on two cores
# four keep the CPU busy throughout (about 20 minutes, against an hour in one process).
# TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 4

.PHONY: run test test-fast setup frameworks mxnet browser kerberos clean

setup: $(STAMP)
frameworks: $(FRAMEWORKS)
mxnet: $(MXNET_VENV)/.installed

# Order-only: the Kerberos packages must be there first, but installing them is no reason to reinstall.
$(STAMP): setup.cfg pyproject.toml Makefile | kerberos
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[tensorflow,airflow,history,yarn,lineage,data,notebook,test]'
	touch $(STAMP)

$(FRAMEWORKS): $(STAMP)
	$(PY) -m pip install -q -e '.[tensorflow,airflow,history,yarn,lineage,data,notebook,test,pytorch,jax,examples]'
	touch $(FRAMEWORKS)

$(MXNET_VENV)/.installed:
	test -x $(MXNET_VENV)/bin/python || $(PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_VENV)/bin/python -m pip install -q 'mxnet==1.9.1' 'numpy<1.24'
	touch $@

# A throwaway Airflow home inside the repository (git-ignored), with a fresh SQLite metadata DB.
AIRFLOW_HOME_DIR := $(CURDIR)/airflow-home
AIRFLOW_ENV := AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False TONY_WORKFLOW_DATA=$(AIRFLOW_HOME_DIR)/data

run: $(STAMP)
	rm -rf $(AIRFLOW_HOME_DIR) && mkdir -p $(AIRFLOW_HOME_DIR)
	$(AIRFLOW_ENV) $(VENV)/bin/airflow db migrate > $(AIRFLOW_HOME_DIR)/db-migrate.log
	@echo "Running the tony_mnist DAG (full log: $(AIRFLOW_HOME_DIR)/dags-test.log)"
	$(AIRFLOW_ENV) $(VENV)/bin/airflow dags test tony_mnist 2>&1 | tee $(AIRFLOW_HOME_DIR)/dags-test.log | \
		grep --line-buffered -oE "Submitted application application_[0-9_]+|Tracking URL: [^ ]*|TensorBoard: [^ ]*|application_[0-9_]+ (RUNNING|SUCCEEDED|FAILED|KILLED) session=[0-9]+ [^[]*|evaluation: .*|DagRun Finished: dag_id=[^,]*"
	@grep -q "DagRun Finished.*state=success" $(AIRFLOW_HOME_DIR)/dags-test.log && echo "tony_mnist: success" || \
		{ echo "tony_mnist: failed (see $(AIRFLOW_HOME_DIR)/dags-test.log)"; exit 1; }

# Headless Chromium and its driver (Debian packages) for the Airflow UI test.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; }

# MIT Kerberos's client tools (kinit, klist) for the secure mini cluster's tests, and the headers
# and C compiler that Python's gssapi (under requests-gssapi, in the yarn extra) is built with.
# DEBIAN_FRONTEND goes through env so that sudo does not drop it: krb5-user would otherwise stop
# to ask for a default realm.
kerberos:
	@command -v kinit >/dev/null && command -v krb5-config >/dev/null && command -v cc >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq krb5-user libkrb5-dev gcc; }

# Lint and types first (seconds), then the tests.
test: $(STAMP) $(FRAMEWORKS) $(MXNET_VENV)/.installed browser kerberos
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

# The fast tier: lint, types and every test that starts no process of its own (under a minute).
FAST = not job and not tf and not frameworks and not yarn and not azkaban
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -n 2 -m "$(FAST)"

clean:
	rm -rf $(VENV) $(MXNET_VENV) *.egg-info .pytest_cache
