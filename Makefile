# lockgate — `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
BENCH_VENV ?= .venv-bench
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# pytest-xdist workers for make test: the real-node modules run on one while the rest run on
# the other (tests/conftest.py groups them). 0 runs the suite in this process.
TEST_WORKERS ?= 2
IMAGE_REGISTRY ?= registry.example.com/lockgate
IMAGE_TAG ?= $(VERSION)
# Worker base image: a CUDA runtime by default; BASE_IMAGE=python:3.12-slim for CPU workers.
BASE_IMAGE ?= nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
CHART := charts/lockgate
# helm and kubectl, pinned, from `make tools` (hack/tools.sh).
TOOLS_BIN := $(or $(LOCKGATE_TOOLS_DIR),$(HOME)/.cache/lockgate-tools)/bin

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

test: setup lint ## Lint, then run the whole test suite (TEST_WORKERS=2 pytest-xdist workers; 0 runs it in one process)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

fuzz: setup ## The gateway's HTTP differential fuzzers at length (its server; the LB proxy's client against aiohttp's) (FUZZ_EXAMPLES cases per property, default 2000; a fresh seed each run)
	LOCKGATE_FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),2000) LOCKGATE_FUZZ_SEED=1 \
	  timeout 3600 $(PY) -m pytest -q -p no:cacheprovider --timeout 3300 tests/test_http_fuzz.py \
	  tests/test_lb_upstream.py

lint: setup ## ruff check and format check, then mypy --strict (make typecheck)
	$(VENV)/bin/ruff check operator tests examples bench
	$(VENV)/bin/ruff format --check operator tests examples bench
	$(PY) -m mypy

# In lint, so every `make lint` before a commit sees type errors: with its cache
# (.mypy_cache/) mypy takes under a second; the first run in a checkout takes about 15 s.
typecheck: setup ## mypy --strict on the packages pyproject.toml's [tool.mypy] lists
	$(PY) -m mypy

format: setup ## Format the code (ruff)
	$(VENV)/bin/ruff check --fix operator tests examples
	$(VENV)/bin/ruff format operator tests examples

bench: setup bench-venv ## Benchmarks: latency, throughput, purge, memory, auth+limits overhead, OpenAI route, one Redis vs a 3-master cluster, the replica-ack cost, beside Celery + Redis (with the side-by-side harness's verdict), the gateway's CPU per job, the LB proxy beside its worker; then the scaler simulation
	BENCH_VENV=$(BENCH_VENV) $(PY) -m bench.core; status=$$?; echo; $(PY) -m bench.scaler_sim && exit $$status

bench-venv: ## The bench's own venv for its Celery peer (BENCH_VENV, default .venv-bench): Celery never enters the project's venv
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c 'import celery, redis' 2>/dev/null || $(BENCH_VENV)/bin/pip install -q 'celery[redis]>=5.4' 'redis[hiredis]'

bench-celery: setup bench-venv ## Benchmark alone: beside Celery + Redis, and the side-by-side harness's verdict line (runsync_p50/celery_p50, completed/s vs celery, runsync_thr/floor)
	BENCH_VENV=$(BENCH_VENV) $(PY) -m bench.core --only celery

bench-status: setup ## Benchmark alone: /status req/s with auth and rate limits on vs off
	$(PY) -m bench.core --only status

bench-openai: setup ## Benchmark alone: OpenAI route stream overhead per chunk, chat completions/s vs /runsync
	$(PY) -m bench.core --only openai

bench-lb: setup ## Benchmark alone: the load-balancing proxy beside the worker it proxies to (GET p50/p95, GETs/s of 32 clients, CPU per GET, SSE first byte)
	$(PY) -m bench.lb_proxy

bench-batching: setup ## Benchmark alone: dynamic batching, an embedding-shaped handler's jobs/s and /runsync p50/p95 from 64 clients, unbatched vs max_size 8/32/64; the sequential /runsync p50/p95 while a batch of BATCH_REQUESTS (5000) runs on the batch pool
	$(PY) -m bench.core --only batching $(if $(BATCH_REQUESTS),--batch-requests $(BATCH_REQUESTS))

bench-sizing: setup ## The sizing figures: Redis commands, Redis CPU and gateway CPU per job transition, memory per queued job, the per-master split on a 3-master cluster
	$(PY) -m bench.sizing

bench-scale: setup envtest ## The operator at N Endpoints on envtest, issue 32's table (N="100 300 1000"; CODE="<checkout> ..." side by side; WINDOW=60)
	$(PY) -m bench.scale --n $(or $(N),100 300 1000) $(if $(WINDOW),--window $(WINDOW)) $(foreach c,$(CODE),--code $(c))

bench-cluster: setup envtest tools cluster-images ## On a real node (root): applied -> first pod -> first job, from zero, warm, burst, idle -> zero
	$(PY) -m bench.cluster

##@ Kubernetes

crds: setup ## Regenerate crds/ and the chart's templates/crds/ from the models
	$(VENV)/bin/lockgate crds --out crds --chart charts/lockgate

verify-crds: setup ## Fail when crds/ or the chart's CRDs are stale
	$(PY) -m pytest -q tests/test_crds.py tests/test_chart.py -k crd

envtest: ## Build Kubernetes 1.20 (control plane and node) for the operator and node tests (once, cached); install the node's containerd, runc, CNI plugins and test registry (docker-registry, htpasswd, skopeo)
	bash hack/envtest.sh

cluster-images: ## Build the test cluster's images without Docker (buildah, mmdebstrap; cached archives for ctr import)
	bash hack/images.sh

e2e: setup ## Operator tests against a kind cluster (needs Docker and kind)
	bash hack/e2e-kind.sh

browser: ## Install Chromium (Debian's package) for the console's browser tests (once)
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }

redis: ## Install Debian's redis-server, redis-sentinel and redis-cli for the Cluster and Sentinel tests (once)
	@command -v redis-sentinel >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server redis-sentinel redis-tools; }
	@# The packages start system services where systemd runs: the tests start their own servers.
	@-systemctl disable --now redis-server redis-sentinel >/dev/null 2>&1 || true

tools: ## Install helm 3.17 and kubectl 1.31 into ~/.cache/lockgate-tools/bin (once, cached)
	bash hack/tools.sh

mcp: ## Install RunPod's MCP server 4.0.0 (npm, pinned by hack/mcp-server/package-lock.json) into ~/.cache/lockgate-tools/mcp-server (once, cached; node >= 20)
	bash hack/mcp-server.sh

##@ Packaging

chart-lint: setup tools ## Chart: schema, docs, CRDs; helm lint --strict; helm template checked against Kubernetes 1.27-1.31 schemas
	LOCKGATE_REQUIRE_CLUSTER=1 $(PY) -m pytest -q tests/test_chart.py

chart-scan: setup tools ## Chart: checkov (pinned, own venv: hack/checkov.sh) on every values file's rendering; fails on a finding docs/security.md does not explain
	bash hack/checkov.sh
	LOCKGATE_REQUIRE_CLUSTER=1 $(PY) -m pytest -q tests/test_chart_scan.py

chart-template: ## Print the chart's objects (helm template; VALUES=file to add values)
	@bash hack/tools.sh >&2
	@$(TOOLS_BIN)/helm template lockgate $(CHART) --namespace lockgate $(if $(VALUES),--values $(VALUES))

images: ## Build the control-plane and worker images (needs Docker; IMAGE_REGISTRY, IMAGE_TAG, BASE_IMAGE)
	@if ! docker info >/dev/null 2>&1; then \
	  echo "images: no Docker daemon here (docker info failed): nothing built"; exit 1; \
	fi
	docker build -f images/control-plane.Dockerfile -t $(IMAGE_REGISTRY)/control-plane:$(IMAGE_TAG) .
	docker build -f images/worker.Dockerfile --build-arg BASE_IMAGE=$(BASE_IMAGE) \
	  -t $(IMAGE_REGISTRY)/worker:$(IMAGE_TAG) .
	@echo "images: built $(IMAGE_REGISTRY)/control-plane:$(IMAGE_TAG) and $(IMAGE_REGISTRY)/worker:$(IMAGE_TAG)"

.PHONY: help setup run test fuzz lint typecheck format bench bench-venv bench-celery bench-status bench-openai bench-lb bench-batching bench-sizing bench-scale bench-cluster crds verify-crds envtest cluster-images e2e tools mcp browser redis chart-lint chart-scan chart-template images
