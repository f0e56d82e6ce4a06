# mk/docker.mk -- local Redis cluster for the Redlock integration tests.
#
# Included by the top-level Makefile; also usable on its own:
#   make -f mk/docker.mk image|up|down
#
#   image  build the registry-free Redis image from the host redis-server
#          (scripts/redis-image.sh; quick no-op when it already exists;
#          `make image REDIS_IMAGE_ARGS=--force` rebuilds)
#   up     start five independent masters on 127.0.0.1:7001-7005 and wait
#          (at most REDIS_WAIT seconds, default 30) until all answer PING
#   down   stop them and remove their containers, network and volumes

# Remember where this fragment lives so it works from any include site.
DOCKER_MK_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
# Do not let these targets become the default goal of the including Makefile.
_docker_mk_default_goal := $(.DEFAULT_GOAL)

REDIS_IMAGE ?= quorumlock/redis:7-local
export REDIS_IMAGE
REDIS_IMAGE_ARGS ?=
REDIS_PORTS ?= 7001 7002 7003 7004 7005
REDIS_WAIT ?= 30
REDIS_COMPOSE_FILE ?= $(DOCKER_MK_ROOT)/docker-compose.yml

# Compose command, detected once: docker-compose (v1) or docker compose (v2).
ifndef COMPOSE
COMPOSE := $(shell if command -v docker-compose >/dev/null 2>&1; then echo docker-compose; \
        elif docker compose version >/dev/null 2>&1; then echo "docker compose"; fi)
endif

.PHONY: image up down

image:
	bash "$(DOCKER_MK_ROOT)/scripts/redis-image.sh" $(REDIS_IMAGE_ARGS)

up: image
	@test -n "$(COMPOSE)" || { echo "docker.mk: neither docker-compose nor docker compose is available" >&2; exit 1; }
	$(COMPOSE) -f "$(REDIS_COMPOSE_FILE)" up -d
	@echo "waiting up to $(REDIS_WAIT)s for redis on ports $(REDIS_PORTS) ..."; \
	deadline=$$(( $$(date +%s) + $(REDIS_WAIT) )); \
	i=0; \
	for port in $(REDIS_PORTS); do \
		i=$$((i + 1)); \
		while :; do \
			if command -v redis-cli >/dev/null 2>&1; then \
				reply=$$(redis-cli -h 127.0.0.1 -p $$port ping 2>/dev/null); \
			else \
				reply=$$($(COMPOSE) -f "$(REDIS_COMPOSE_FILE)" exec -T redis$$i redis-cli ping 2>/dev/null); \
			fi; \
			[ "$$reply" = PONG ] && break; \
			if [ $$(date +%s) -ge $$deadline ]; then \
				echo "docker.mk: redis on port $$port did not answer PING within $(REDIS_WAIT)s" >&2; \
				$(COMPOSE) -f "$(REDIS_COMPOSE_FILE)" ps >&2; \
				$(COMPOSE) -f "$(REDIS_COMPOSE_FILE)" logs --no-color --tail=20 >&2; \
				exit 1; \
			fi; \
			sleep 0.2; \
		done; \
	done; \
	echo "redis up: $(REDIS_PORTS)"

down:
	@test -n "$(COMPOSE)" || { echo "docker.mk: neither docker-compose nor docker compose is available" >&2; exit 1; }
	$(COMPOSE) -f "$(REDIS_COMPOSE_FILE)" down -v --remove-orphans

.DEFAULT_GOAL := $(_docker_mk_default_goal)
