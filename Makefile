# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
SF ?= 1
BIN := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[tpch,bench,test]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/gpujoin tpch --sf $(SF)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -m "not gpu"

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
