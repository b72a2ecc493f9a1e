# Two entry points: `make run` (set up, then run the example job on the embedded cluster)
# and `make test` (set up, then run the test suite). Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test setup clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[tensorflow,airflow,yarn,test]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/tony submit examples/mnist_mwms/mnist_mwms.yaml --wait

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
