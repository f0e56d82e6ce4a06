#!/usr/bin/env bash
# Make sure redis-server is installed: the test harness and the demo start
# local redis-server processes, and the local Docker image is built from it.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 || [ -n "${REDIS_SERVER:-}" ]; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "ensure-redis: installing redis-server with apt-get" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq redis-server >/dev/null
	# Debian's package may start a system service; the tests start their own.
	exit 0
fi
echo "ensure-redis: redis-server is missing. Install it (Debian/Ubuntu: sudo apt-get install -y redis-server)," >&2
echo "or point REDIS_SERVER at a redis-server binary." >&2
exit 1
