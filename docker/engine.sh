#!/usr/bin/env bash
# The container engine and base image for `make compose-test` on a machine without a registry.
#   docker/engine.sh start   install Debian's docker.io if missing, start dockerd if none answers
#                            (its PID goes to $ENGINE_STATE/dockerd.pid: we stop only what we started)
#   docker/engine.sh base    make debian:bookworm-slim with debootstrap + docker import when missing
#                            (mirror read from this machine's apt sources at run time)
#   docker/engine.sh stop    stop the dockerd this script started, by PID
set -euo pipefail
DOCKER=${DOCKER:-/usr/bin/docker}
ENGINE_STATE=${ENGINE_STATE:-${TMPDIR:-/tmp}/modelops-engine}
BASE_IMAGE=${BASE_IMAGE:-debian:bookworm-slim}
mkdir -p "$ENGINE_STATE"

log() { echo "==> $*" >&2; }

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

engine_up() { "$DOCKER" info >/dev/null 2>&1; }

start() {
  if [ ! -x "$DOCKER" ] || ! command -v dockerd >/dev/null; then
    log "installing Debian's docker.io"
    apt_install docker.io
  fi
  if engine_up; then log "docker engine already running"; return 0; fi
  log "starting dockerd (log: $ENGINE_STATE/dockerd.log)"
  dockerd >"$ENGINE_STATE/dockerd.log" 2>&1 &
  echo $! >"$ENGINE_STATE/dockerd.pid"
  for _ in $(seq 1 120); do
    engine_up && { log "dockerd ready (pid $(cat "$ENGINE_STATE/dockerd.pid"))"; return 0; }
    kill -0 "$(cat "$ENGINE_STATE/dockerd.pid")" 2>/dev/null || { tail -20 "$ENGINE_STATE/dockerd.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "dockerd did not answer within 60 s; see $ENGINE_STATE/dockerd.log" >&2
  exit 1
}

mirror() {
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "no Debian mirror in this machine's apt sources" >&2; exit 1; }
  echo "$uri"
}

base() {
  if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then log "$BASE_IMAGE present"; return 0; fi
  command -v debootstrap >/dev/null || { log "installing debootstrap"; apt_install debootstrap; }
  local rootfs
  rootfs=$(mktemp -d "$ENGINE_STATE/rootfs.XXXXXX")
  log "debootstrap bookworm (minbase) from $(mirror)"
  debootstrap --variant=minbase bookworm "$rootfs" "$(mirror)" >"$ENGINE_STATE/debootstrap.log" 2>&1 \
    || { tail -20 "$ENGINE_STATE/debootstrap.log" >&2; rm -rf "$rootfs"; exit 1; }
  # What the slim image also drops: the apt lists and caches.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  tar -C "$rootfs" -c . | "$DOCKER" import -c 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  log "$BASE_IMAGE imported"
}

stop() {
  local pidfile="$ENGINE_STATE/dockerd.pid"
  [ -f "$pidfile" ] || { log "no dockerd started by this script"; return 0; }
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping dockerd (pid $pid)"
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  base) base ;;
  stop) stop ;;
  *) echo "usage: $0 start|base|stop" >&2; exit 2 ;;
esac
