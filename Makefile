# Redlock client: build, test, demo, benchmarks.
#
#   make test   vet + unit + integration tests (-race) against five real Redis
#               masters: Docker containers when an engine answers, else local
#               redis-server processes (REDLOCK_BACKEND=docker|process).
#   make demo   contending workers on five local nodes, one killed midway.
#   make bench  side-by-side benchmark vs go-redsync (bench/, docs/BENCHMARKS.md);
#               make bench-go: go test -bench of one lock+unlock cycle.
#   make experiments  clock-drift experiments (docs/EXPERIMENTS.md).
#   make torture  about ten minutes of randomized, seeded histories with
#               injected faults (integration/torture), then 20 s of them
#               on a Redis Cluster client's copies; prints histories,
#               operations, faults by kind and violations per oracle.
#               make test runs a short budget of the same.
#   make lint   gofmt + go vet, in every module.
#   make up / make down / make image   the docker-compose cluster (mk/docker.mk).
#
# Go modules: the library at the root; integration/ (the cluster harness,
# the checker, the integration tests and the demo, with testcontainers-go,
# toxiproxy and the Docker client); bench/; and one per adapter that pulls
# a heavy dependency (ADAPTERS). Each replaces the library with ../, so
# the library's go.mod needs none of their dependencies.

GO ?= go
GOTESTFLAGS ?=
# testcontainers-go must not try to pull its reaper image (no registry here).
export TESTCONTAINERS_RYUK_DISABLED = true

.DEFAULT_GOAL := test
include mk/docker.mk

.PHONY: test unit integration torture demo bench bench-go experiments lint deps

# deps installs what a fresh machine lacks: redis-server (apt, as root) and,
# when a Docker engine answers, the local Redis image.
deps:
	@bash scripts/ensure-redis.sh
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory image; \
	else echo "deps: no Docker engine answers; tests use local redis-server processes"; fi

# The root module's packages: the library and its command. Everything that
# runs Redis clusters of its own is in the integration module.
UNIT_PKGS = ./clock/... ./node/... ./quorum/... ./internal/... ./redlock/... ./cmd/...
INTEGRATION_DIR = integration
# Adapter modules: metrics for Prometheus and OpenTelemetry, the go-redis node.
ADAPTERS = redlockprom redlockotel goredis

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(INTEGRATION_DIR) && $(GO) vet ./...
	cd bench && $(GO) vet ./...
	for m in $(ADAPTERS); do (cd $$m && $(GO) vet ./...) || exit 1; done

# The integration packages run one at a time (-p 1): each starts and kills
# Redis containers, and on two cores one package's docker starts stall the
# other's nodes past their timeouts.
test: deps lint
	$(GO) test -race -count=1 -timeout 10m $(GOTESTFLAGS) $(UNIT_PKGS)
	for m in $(ADAPTERS); do (cd $$m && $(GO) test -race -count=1 -timeout 5m $(GOTESTFLAGS) ./...) || exit 1; done
	cd bench && $(GO) test -count=1 ./...
	cd $(INTEGRATION_DIR) && $(GO) test -race -count=1 -p 1 -timeout 25m $(GOTESTFLAGS) $$($(GO) list ./... | grep -v /torture)
	cd $(INTEGRATION_DIR) && HISTORY_BUDGET=$${HISTORY_BUDGET:-20s} HISTORY_FAULTS=delay,lost-reply,lost-command,restart \
		$(GO) test -race -count=1 -timeout 10m -v -run 'Catch|TestHistories$$' $(GOTESTFLAGS) ./torture
	cd $(INTEGRATION_DIR) && HISTORY_BUDGET=$${HISTORY_BUDGET:-30s} $(GO) test -count=1 -timeout 10m -v -run TestHistories $(GOTESTFLAGS) ./torture

# make test runs the histories twice: under the race detector without
# late commands, and without it with every fault kind. With late
# commands, -race reports, now and then, a node call's read of its Key
# against a write by the history runner's own goroutine at the same
# address (docs/TESTING.md, "Histories"), not yet explained.
# The randomized histories for TORTURE_BUDGET (default 10m), without the
# race detector so that thousands fit; HISTORY_* variables tune them
# (integration/torture/main_test.go). Known-failing oracles print their
# counts and seeds; HISTORY_FATAL lists those that fail the run. Six
# histories at a time: twelve saturate two cores, and the node timeouts
# that follow show up as release violations of the machine, not of the
# library (docs/TESTING.md). Ten minutes make about 4,000 histories here.
TORTURE_BUDGET ?= 10m
torture: deps
	cd $(INTEGRATION_DIR) && HISTORY_BUDGET=$(TORTURE_BUDGET) HISTORY_CONCURRENCY=$${HISTORY_CONCURRENCY:-6} \
		HISTORY_LOG=$${HISTORY_LOG:-20} $(GO) test -count=1 -timeout 60m -v -run TestHistories $(GOTESTFLAGS) ./torture

unit: lint
	$(GO) test -race -count=1 $(UNIT_PKGS)
	for m in $(ADAPTERS); do (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done

integration: deps
	cd $(INTEGRATION_DIR) && $(GO) test -race -count=1 -p 1 -timeout 25m -v $(GOTESTFLAGS) ./...

demo: deps
	cd $(INTEGRATION_DIR) && $(GO) run ./cmd/redlock-demo

# The side-by-side benchmark (bench/, its own module): this client, go-redsync
# and a raw redigo floor, interleaved; writes docs/BENCHMARKS.md.
bench: deps
	cd bench && $(GO) run . -out ../docs/BENCHMARKS.md

# The clock-drift experiments (bench/drift): docs/EXPERIMENTS-results.md and
# docs/drift.png; docs/EXPERIMENTS.md explains them.
experiments: deps
	cd bench && $(GO) run ./drift -out ../docs

# go test benchmarks of one lock+unlock cycle on five local nodes.
bench-go: deps
	cd $(INTEGRATION_DIR) && $(GO) test -run '^$$' -bench . -benchmem -count 5 .
