#!/usr/bin/env bash
# Build a local Docker image of Redis from the host's redis-server binary, so
# the integration stack needs no container registry.
#
#   scripts/redis-image.sh [--force]
#
# Environment:
#   REDIS_IMAGE   image reference (default quorumlock/redis:7-local).
#                 If it does not end in "-local" nothing is built: the image
#                 must already exist locally or be pullable with `docker pull`.
#
# The image is FROM scratch and holds /usr/bin/redis-server, redis-cli (if
# installed on the host), every shared library `ldd` lists for them, the
# dynamic loader, a minimal /etc (root + redis users), /tmp and /data.
# Redis runs as the unprivileged user redis (uid/gid 999) in /data.
#
# Exits 0 at once when the image already exists, unless --force is given.
set -euo pipefail

REDIS_IMAGE="${REDIS_IMAGE:-quorumlock/redis:7-local}"
REDIS_UID=999
REDIS_GID=999

log() { printf 'redis-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
}

force=0
for arg in "$@"; do
	case "$arg" in
	-f | --force) force=1 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument: $arg" ;;
	esac
done

command -v docker >/dev/null 2>&1 || die "docker CLI not found in PATH"
docker info >/dev/null 2>&1 || die "cannot talk to the Docker daemon (is it running, and may $(id -un) use it?)"

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# --- Not a local image: never build, only check / pull. ---------------------
if [[ "$REDIS_IMAGE" != *-local ]]; then
	if image_exists "$REDIS_IMAGE"; then
		log "using $REDIS_IMAGE: present locally (not built by this script)"
		exit 0
	fi
	log "$REDIS_IMAGE is not a *-local image and is not present locally; trying docker pull"
	pull=(docker pull "$REDIS_IMAGE")
	if command -v timeout >/dev/null 2>&1; then
		pull=(timeout 120 "${pull[@]}")
	fi
	if "${pull[@]}"; then
		log "pulled $REDIS_IMAGE"
		exit 0
	fi
	die "could not pull $REDIS_IMAGE (no registry reachable?). Unset REDIS_IMAGE, or set it to a name ending in -local, to build from the host redis-server instead"
fi

# --- Local image: quick exit if it is already there. ------------------------
if ((!force)) && image_exists "$REDIS_IMAGE"; then
	log "$REDIS_IMAGE already exists (use --force to rebuild)"
	# Cheap staleness hint: compare the recorded version with the host's.
	built="$(docker image inspect -f '{{index .Config.Labels "io.quorumlock.redis.version"}}' "$REDIS_IMAGE" 2>/dev/null || true)"
	host="$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([^ ]*\).*/\1/p' || true)"
	if [[ -n "$host" && -n "$built" && "$host" != "$built" ]]; then
		log "note: image has redis $built but the host has $host; rebuild with --force"
	fi
	exit 0
fi
old_id="$(docker image inspect -f '{{.Id}}' "$REDIS_IMAGE" 2>/dev/null || true)"

# --- Make sure the host has redis-server. -----------------------------------
find_redis_server() {
	local p
	p="$(command -v redis-server 2>/dev/null || true)"
	if [[ -z "$p" && -x /usr/bin/redis-server ]]; then
		p=/usr/bin/redis-server
	fi
	printf '%s' "$p"
}

server="$(find_redis_server)"
if [[ -z "$server" ]]; then
	if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
		log "redis-server not found; installing it with apt-get"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >&2
		apt-get install -y -q --no-install-recommends redis-server redis-tools >&2
		server="$(find_redis_server)"
		[[ -n "$server" ]] || die "redis-server still not found after apt-get install"
	else
		log "redis-server is not installed on this host. Install it first, e.g. on Debian/Ubuntu:"
		log "    sudo apt-get update && sudo apt-get install -y redis-server redis-tools"
		exit 1
	fi
fi
cli="$(command -v redis-cli 2>/dev/null || true)"

# Debian ships /usr/bin/redis-server as a symlink to redis-check-rdb; the
# binary picks its mode from argv[0], so it must be copied (dereferenced) under
# the name redis-server.
server_real="$(readlink -f "$server")"
# Ask via the redis-server name for the same reason (the real file would
# answer "redis-check-rdb 7.0.15").
server_version="$("$server" --version | head -n1)"
# "Redis server v=7.0.15 sha=... " -> 7.0.15
version_num="$(sed -n 's/.* v=\([^ ]*\).*/\1/p' <<<"$server_version")"
[[ -n "$version_num" ]] || version_num=unknown
log "building $REDIS_IMAGE from $server ($server_version)"

# --- Assemble the root filesystem. ------------------------------------------
tmp="$(mktemp -d "${TMPDIR:-/tmp}/redis-image.XXXXXX")"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rootfs="$tmp/rootfs"
ctx="$tmp/context"
mkdir -p "$rootfs" "$ctx"

# copy_file SRC DEST_IN_ROOTFS: copy SRC's content (following symlinks).
copy_file() {
	local src="$1" dest="$rootfs$2"
	mkdir -p "$(dirname "$dest")"
	cp -L "$src" "$dest"
}

# shared_libs BINARY: print the absolute paths of the libraries and loader
# ldd reports. Fails if any library is "not found".
shared_libs() {
	local out
	if ! out="$(ldd "$1" 2>&1)"; then
		# Static binaries make ldd exit 1 with "not a dynamic executable".
		if grep -q 'not a dynamic executable' <<<"$out"; then
			return 0
		fi
		die "ldd $1 failed: $out"
	fi
	if grep -q 'not found' <<<"$out"; then
		die "ldd $1 reports missing libraries:"$'\n'"$out"
	fi
	awk '
		$2 == "=>" && $3 ~ /^\// { print $3; next }
		$1 ~ /^\// { print $1 }
	' <<<"$out"
}

command -v ldd >/dev/null 2>&1 || die "ldd not found (install libc-bin)"

bins=("$server_real:/usr/bin/redis-server")
if [[ -n "$cli" ]]; then
	bins+=("$(readlink -f "$cli"):/usr/bin/redis-cli")
else
	log "redis-cli not found on the host; the image will have no redis-cli (compose healthchecks will report unhealthy)"
fi

declare -A seen=()
for pair in "${bins[@]}"; do
	src="${pair%%:*}"
	dest="${pair#*:}"
	copy_file "$src" "$dest"
	chmod 0755 "$rootfs$dest"
	libs="$(shared_libs "$src")" # a failure here aborts the script (set -e)
	while IFS= read -r lib; do
		[[ -n "$lib" && -z "${seen[$lib]:-}" ]] || continue
		seen[$lib]=1
		copy_file "$lib" "$lib"
	done <<<"$libs"
done

mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/data"
chmod 1777 "$rootfs/tmp"
chmod 0755 "$rootfs/data"
cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
redis:x:$REDIS_UID:$REDIS_GID:redis:/data:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
redis:x:$REDIS_GID:
nogroup:x:65534:
EOF
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd: files
group:  files
hosts:  files dns
EOF
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"

# Everything is owned by root except /data, which belongs to redis. Appending
# /data with an explicit owner works without root privileges on the host.
tar --numeric-owner --owner=0 --group=0 --exclude=./data \
	-C "$rootfs" -cf "$ctx/rootfs.tar" .
tar --numeric-owner --owner="$REDIS_UID" --group="$REDIS_GID" \
	-C "$rootfs" -rf "$ctx/rootfs.tar" ./data

cat >"$ctx/Dockerfile" <<EOF
FROM scratch
ADD rootfs.tar /
LABEL org.opencontainers.image.title="redis (host build)" \\
      org.opencontainers.image.version="$version_num" \\
      io.quorumlock.redis.version="$version_num" \\
      io.quorumlock.redis.server-version="$server_version" \\
      io.quorumlock.redis.source="host:$server ($server_real)"
USER $REDIS_UID:$REDIS_GID
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
CMD ["--protected-mode","no","--save","","--appendonly","no"]
EOF

docker build -t "$REDIS_IMAGE" "$ctx" >&2

# After --force, drop the previous build if nothing else uses it any more.
new_id="$(docker image inspect -f '{{.Id}}' "$REDIS_IMAGE")"
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	docker image rm "$old_id" >/dev/null 2>&1 || log "previous image $old_id kept (still in use)"
fi

size="$(docker image inspect -f '{{.Size}}' "$REDIS_IMAGE")"
log "built $REDIS_IMAGE (redis $version_num, $((size / 1024 / 1024)) MiB)"
