# lockgate — `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

##@ Getting started

help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

setup: $(STAMP) ## Create .venv and install lockgate with every extra

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

run: setup ## Start dev mode with the echo handler (Redis, gateway, workers in one process)
	$(VENV)/bin/lockgate dev examples/echo/handler.py

##@ Development

test: setup lint ## Lint, then run the whole test suite
	$(PY) -m pytest

lint: setup ## ruff check and format check
	$(VENV)/bin/ruff check operator tests examples
	$(VENV)/bin/ruff format --check operator tests examples

format: setup ## Format the code (ruff)
	$(VENV)/bin/ruff check --fix operator tests examples
	$(VENV)/bin/ruff format operator tests examples

bench: setup ## Benchmarks: latency, throughput, purge, memory (prints a table)
	$(PY) -m bench.core

##@ Kubernetes

crds: setup ## Regenerate crds/ and the chart's templates/crds/ from the models
	$(VENV)/bin/lockgate crds --out crds --chart charts/lockgate

verify-crds: setup ## Fail when crds/ or the chart's CRDs are stale
	$(PY) -m pytest -q tests/test_crds.py

envtest: ## Build kube-apiserver/etcd for operator tests (once, cached)
	bash hack/envtest.sh

e2e: setup ## Operator tests against a kind cluster (needs Docker and kind)
	bash hack/e2e-kind.sh

.PHONY: help setup run test lint format bench crds verify-crds envtest e2e
