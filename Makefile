# aisched: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PRESET ?= small
# Real nodes (kubelet + containerd, root only) beside the fake ones: make cluster-up REAL_NODES=2
REAL_NODES ?= 0
# Karpenter's KWOK provider beside it, growing the fleet from zero: make cluster-up PRESET=empty KARPENTER=1
KARPENTER ?= 0
# The job frameworks' controllers (training-operator, KubeRay) beside it: make cluster-up JOB_FRAMEWORKS=1
JOB_FRAMEWORKS ?= 0
# Seconds one test of each tier may take before it fails (pytest-timeout), so a hang names its
# test instead of eating CI's time; generous, since a loaded machine is slow, not stuck.
# Unit: a hang-catcher, not a speed check. No unit test waits on a clock; the slowest took 27 s on a
# 2-core machine at load 8 (`--durations=15`, 2026-12: test_extreme_jobs' scheduling property), and a
# busier one has been seen to run a CPU-bound test 6x slower than a quiet one: 300 s is ten times it.
UNIT_TEST_TIMEOUT ?= 300
TOOLS_TEST_TIMEOUT ?= 300
INTEGRATION_TEST_TIMEOUT ?= 900
E2E_TEST_TIMEOUT ?= 1200
# The integration tier's workers, each with a local cluster of its own, a test module at a time.
# Its tests mostly wait on clocks and the control plane (about half of two cores idle on one
# worker), so two finish it in a little over half the time; more starve the control planes.
INTEGRATION_WORKERS ?= 2
CRD_DIRS := crds helm/aisched/templates/crds
KARPENTER_LOG_DIR ?= $(HOME)/.cache/aisched
POD_TEMPLATE_SPEC := operator/aisched/api/pod_template_spec.json
# Kubernetes' own OpenAPI document of the pinned version: k8s-binaries puts its module in Go's module cache.
KUBERNETES_VERSION = $(shell sed -n 's/^KUBERNETES_VERSION=//p' hack/versions.env)
KUBERNETES_OPENAPI = $(shell go env GOMODCACHE)/k8s.io/kubernetes@$(KUBERNETES_VERSION)/api/openapi-spec/v3/api__v1_openapi.json
GENERATED := $(POD_TEMPLATE_SPEC) $(CRD_DIRS) helm/aisched/dashboards manifests/install.yaml manifests/prometheus-rules.yaml

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## create the virtualenv with the package and dev tools

# torch (PyPI's Linux wheel, with the CUDA libraries it loads: ~3 GB), Lightning, Transformers and
# Accelerate, for the tests that drive torch's own launcher parser, a gloo training and the two
# trainers' callbacks. Kept out of `venv` (make demo needs none of it); the tools tier installs it.
$(VENV)/.frameworks: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,frameworks]'
	touch $@

.PHONY: frameworks
frameworks: $(VENV)/.frameworks ## add torch, Lightning and Hugging Face to the virtualenv (their tests skip without)

.PHONY: tools
tools: ## install the system tools tests use for real (Prometheus, promtool) if missing
	hack/install-tools.sh

.PHONY: k8s-binaries
k8s-binaries: ## build (or reuse from ~/.cache/aisched) etcd, kube-*, kubelet, kube-proxy, kubectl, kwok, helm
	hack/build-k8s-binaries.sh base

.PHONY: karpenter
karpenter: ## build (or reuse) Karpenter's KWOK provider; waits for a build already under way
	hack/build-k8s-binaries.sh karpenter

.PHONY: framework-controllers
framework-controllers: ## build (or reuse) training-operator and KubeRay's operator; waits for a build already under way
	hack/build-k8s-binaries.sh frameworks

# Karpenter's, CoreDNS's and the framework controllers' builds (minutes of Go on a cold cache)
# overlap the tiers that need no cluster, which run on one core; `karpenter` and
# `framework-controllers` wait for theirs before the integration tier.
.PHONY: karpenter-background
karpenter-background:
	@mkdir -p $(KARPENTER_LOG_DIR)
	@nohup hack/build-k8s-binaries.sh karpenter coredns frameworks >$(KARPENTER_LOG_DIR)/karpenter-build.log 2>&1 &

.PHONY: node-packages
node-packages: ## install containerd, runc, CNI plugins, buildah, mmdebstrap, umoci, skopeo from Debian if missing
	hack/install-node-packages.sh

.PHONY: images
images: node-packages k8s-binaries ## build (or reuse) the pause, base, operator, training and model-server images, no Docker needed
	hack/build-images.sh all

.PHONY: release
release: node-packages k8s-binaries ## dist/: the chart package and the operator image (OCI archive), one version (root)
	hack/release.sh

.PHONY: cluster-up
cluster-up: k8s-binaries $(if $(filter 1,$(KARPENTER)),karpenter) $(if $(filter 1,$(JOB_FRAMEWORKS)),framework-controllers) ## start the local GPU cluster (PRESET=small|large|empty, REAL_NODES=N real kubelets, KARPENTER=1, JOB_FRAMEWORKS=1)
	AISCHED_REAL_NODES=$(REAL_NODES) AISCHED_KARPENTER=$(KARPENTER) AISCHED_FRAMEWORKS=$(JOB_FRAMEWORKS) hack/cluster.sh up $(PRESET)

.PHONY: cluster-down
cluster-down: ## stop the demo operator and the local GPU cluster, and remove its state
	hack/demo.sh stop
	hack/cluster.sh down

.PHONY: cluster-status
cluster-status: ## tell what the local GPU cluster runs
	hack/cluster.sh status

.PHONY: demo
demo: venv k8s-binaries ## local GPU cluster + operator + sample jobs (REAL_NODES=2: and a real job on a real node)
	AISCHED_REAL_NODES=$(REAL_NODES) hack/demo.sh

.PHONY: generate
generate: venv k8s-binaries ## regenerate the pod template schema, CRDs (crds/ and the chart), dashboards, install bundle, rules
	$(BIN)/aisched pod-template-schema --openapi "$(KUBERNETES_OPENAPI)" --output $(POD_TEMPLATE_SPEC)
	$(BIN)/aisched crds $(foreach dir,$(CRD_DIRS),--output-dir $(dir))
	$(BIN)/aisched dashboards --output-dir helm/aisched/dashboards
	hack/render-install.sh manifests

.PHONY: lint
lint: venv ## ruff (lint + format check), shellcheck
	$(BIN)/ruff check operator tests benchmarks manifests/examples
	$(BIN)/ruff format --check operator tests benchmarks manifests/examples
	$(BIN)/shellcheck -x hack/*.sh

.PHONY: typecheck
typecheck: venv ## mypy --strict on the package, tests and benchmarks; import-linter layer contracts
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: verify
verify: generate lint typecheck ## regenerate everything and fail on drift; lint; type-check; one version
	@app_version=$$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' helm/aisched/Chart.yaml); \
	version=$$($(PY) -c 'import aisched; print(aisched.__version__)'); \
	if [ "$$app_version" != "$$version" ]; then \
		echo "helm/aisched/Chart.yaml appVersion $$app_version differs from aisched.__version__ $$version"; exit 1; fi
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		git status --porcelain -- $(GENERATED); git diff -- $(GENERATED) | head -50; \
		echo "generated files differ from the models: run 'make generate' and commit"; exit 1; fi

.PHONY: test-unit
test-unit: venv frameworks ## unit tests: no cluster, no network, no clock, no tools beyond the virtualenv
	$(BIN)/pytest tests/unit -q --timeout=$(UNIT_TEST_TIMEOUT) --durations=5; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

.PHONY: test-tools
test-tools: venv frameworks tools k8s-binaries ## tests that drive real helm and promtool (chart, rules, exposition), no cluster
	$(BIN)/pytest tests/tools -q --timeout=$(TOOLS_TEST_TIMEOUT) --durations=5; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

.PHONY: test-integration
test-integration: venv tools k8s-binaries karpenter framework-controllers ## integration tests against the local GPU cluster (small preset)
	$(BIN)/pytest tests/integration -q -n $(INTEGRATION_WORKERS) --dist loadfile --no-loadscope-reorder \
		--timeout=$(INTEGRATION_TEST_TIMEOUT) --durations=15; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

.PHONY: test-e2e
test-e2e: venv tools node-packages images framework-controllers ## e2e tests: two real nodes, the chart in-cluster, real training jobs (root)
	$(BIN)/pytest tests/e2e -q --timeout=$(E2E_TEST_TIMEOUT) --durations=10; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

.PHONY: test
test: karpenter-background verify test-unit test-tools test-integration ## everything CI runs: verify, unit, tools, integration, and e2e when root
	@if [ "$$(id -u)" -eq 0 ]; then $(MAKE) --no-print-directory test-e2e; \
	else echo "e2e tier skipped: real nodes need root (network namespaces, mounts, cgroups); run 'sudo make test-e2e'"; fi

.PHONY: bench
bench: venv k8s-binaries ## benchmarks; figures in benchmarks/results/ (BENCH_ONLY="placement trace": just those)
	$(PY) -m benchmarks.run_all --update-results
