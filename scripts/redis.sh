# shellcheck shell=bash
# Starts a throw-away redis-server for scripts/test.sh and scripts/bench.sh,
# which source this file. redis_start installs redis-server from Debian's
# packages when it is missing, starts it on a free loopback port with no
# persistence, exports its address in LOADSHED_REDIS_ADDR, and stops it
# (and removes its folder) when the calling script exits.
#
#   . scripts/redis.sh
#   redis_start test.sh   # the argument prefixes the messages

redis_stop() {
  if [ -n "${REDIS_PIDFILE:-}" ] && [ -f "$REDIS_PIDFILE" ]; then
    local pid
    pid=$(cat "$REDIS_PIDFILE")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -n "${REDIS_WORKDIR:-}" ]; then rm -rf "$REDIS_WORKDIR"; fi
}

redis_start() {
  local who=${1:-redis.sh}
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "$who: installing redis-server from Debian's packages" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  fi

  REDIS_WORKDIR=$(mktemp -d)
  REDIS_PIDFILE="$REDIS_WORKDIR/redis.pid"
  trap redis_stop EXIT INT TERM

  local started="" port
  for _ in $(seq 1 50); do
    port=$(( (RANDOM % 20000) + 30000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    if redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize yes --pidfile "$REDIS_PIDFILE" --dir "$REDIS_WORKDIR" \
        --logfile "$REDIS_WORKDIR/redis.log" >/dev/null 2>&1; then
      for _ in $(seq 1 100); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then started=$port; break; fi
        sleep 0.05
      done
      [ -n "$started" ] && break
    fi
  done
  if [ -z "$started" ]; then
    echo "$who: could not start redis-server on a loopback port" >&2
    cat "$REDIS_WORKDIR/redis.log" >&2 2>/dev/null || true
    exit 1
  fi
  export LOADSHED_REDIS_ADDR="127.0.0.1:$started"
  echo "$who: redis-server $(redis-server --version | awk '{print $3}') on $LOADSHED_REDIS_ADDR" >&2
}
