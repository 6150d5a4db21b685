# Podium: `make demo` runs the smoke submission on the CPU; `make test` runs everything CI runs.
# Both set up a fresh machine: the virtualenv, every Python package, and the tiny model and data set.

VENV      ?= .venv
PYTHON    ?= python3
PY        := $(VENV)/bin/python
PODIUM    := $(VENV)/bin/podium
WORKSPACE ?= .podium
STAMP     := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: install smoke-assets demo test lint unit integration down clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[smoke,dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

smoke-assets: install
	$(PODIUM) dev smoke-assets --workspace $(WORKSPACE)

demo: smoke-assets
	$(PODIUM) run deployments/plans/smoke.yaml --workspace $(WORKSPACE)

lint: install
	$(VENV)/bin/ruff check .

unit: install
	$(PY) -m pytest -m "not integration"

integration: install
	$(PY) -m pytest -m integration

test: lint
	$(PY) -m pytest

down: install
	$(PODIUM) dev down --workspace $(WORKSPACE)

clean:
	rm -rf $(WORKSPACE) .pytest_cache .ruff_cache
