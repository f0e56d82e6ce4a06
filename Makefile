# Redlock client: build, test, demo, benchmarks.
#
#   make test   vet + unit + integration tests (-race) against five real Redis
#               masters: Docker containers when an engine answers, else local
#               redis-server processes (REDLOCK_BACKEND=docker|process).
#   make demo   contending workers on five local nodes, one killed midway.
#   make bench  lock+unlock benchmarks on five local nodes.
#   make lint   gofmt + go vet.
#   make up / make down / make image   the docker-compose cluster (mk/docker.mk).

GO ?= go
GOTESTFLAGS ?=
# testcontainers-go must not try to pull its reaper image (no registry here).
export TESTCONTAINERS_RYUK_DISABLED = true

.DEFAULT_GOAL := test
include mk/docker.mk

.PHONY: test unit integration demo bench lint deps docker-image

# deps installs what a fresh machine lacks: redis-server (apt, as root) and,
# when a Docker engine answers, the local Redis image.
deps:
	@bash scripts/ensure-redis.sh
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory image; \
	else echo "deps: no Docker engine answers; tests use local redis-server processes"; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: deps lint
	$(GO) test -race -count=1 -timeout 25m $(GOTESTFLAGS) ./...

unit: lint
	$(GO) test -race -count=1 ./clock/... ./node/... ./quorum/... ./redlock/...

integration: deps
	$(GO) test -race -count=1 -timeout 25m -v $(GOTESTFLAGS) ./integration/...

demo: deps
	$(GO) run ./cmd/redlock demo

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./integration/...
