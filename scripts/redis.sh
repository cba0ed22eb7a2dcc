# shellcheck shell=bash
# Starts a throw-away redis-server for scripts/test.sh and scripts/bench.sh,
# which source this file. redis_start installs redis-server from Debian's
# packages when it is missing, starts it on a free loopback port with no
# persistence, exports its address in LOADSHED_REDIS_ADDR, and stops it
# (and removes its folder) when the calling script exits. redis_cluster_start
# does the same for a Redis Cluster (see below).
#
#   . scripts/redis.sh
#   redis_start test.sh           # the argument prefixes the messages
#   redis_cluster_start test.sh

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

# redis_cluster_start starts a Redis Cluster of 3 masters and 3 replicas
# (cluster-node-timeout 1000) on free loopback ports, waits for
# cluster_state:ok, and exports:
#
#   LOADSHED_REDIS_CLUSTER_ADDRS  the six nodes, comma-separated
#   LOADSHED_REDIS_CLUSTER_DIR    its folder: <port>/redis.conf and
#                                 <port>/redis.pid per node, so that tests
#                                 can kill a node (SIGKILL) and start it again
#
# It is removed with the single server when the calling script exits.
redis_cluster_stop() {
  if [ -n "${REDIS_CLUSTER_DIR:-}" ] && [ -d "$REDIS_CLUSTER_DIR" ]; then
    local f pid
    for f in "$REDIS_CLUSTER_DIR"/*/redis.pid; do
      [ -f "$f" ] || continue
      pid=$(cat "$f"); kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$REDIS_CLUSTER_DIR"
  fi
}

redis_cluster_start() {
  local who=${1:-redis.sh}
  REDIS_CLUSTER_DIR=$(mktemp -d)
  trap 'redis_stop; redis_cluster_stop' EXIT INT TERM
  local ports=() port addrs=()
  while [ ${#ports[@]} -lt 6 ]; do
    port=$(( (RANDOM % 20000) + 30000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    (exec 3<>"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null && continue # its bus port
    case " ${ports[*]} " in *" $port "* | *" $((port + 10000)) "* | *" $((port - 10000)) "*) continue ;; esac
    mkdir -p "$REDIS_CLUSTER_DIR/$port"
    cat >"$REDIS_CLUSTER_DIR/$port/redis.conf" <<CONF
port $port
bind 127.0.0.1
daemonize yes
pidfile $REDIS_CLUSTER_DIR/$port/redis.pid
dir $REDIS_CLUSTER_DIR/$port
logfile $REDIS_CLUSTER_DIR/$port/redis.log
save ""
appendonly no
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 1000
CONF
    redis-server "$REDIS_CLUSTER_DIR/$port/redis.conf" >/dev/null 2>&1 || continue
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
        ports+=("$port"); addrs+=("127.0.0.1:$port"); break
      fi
      sleep 0.05
    done
  done
  if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$REDIS_CLUSTER_DIR/create.log" 2>&1; then
    echo "$who: redis-cli --cluster create failed:" >&2; cat "$REDIS_CLUSTER_DIR/create.log" >&2
    exit 1
  fi
  local ok=""
  for _ in $(seq 1 200); do
    ok=1
    for port in "${ports[@]}"; do
      redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || { ok=""; break; }
    done
    [ -n "$ok" ] && break
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "$who: the Redis Cluster did not reach cluster_state:ok" >&2
    exit 1
  fi
  export LOADSHED_REDIS_CLUSTER_ADDRS
  LOADSHED_REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
  export LOADSHED_REDIS_CLUSTER_DIR="$REDIS_CLUSTER_DIR"
  echo "$who: Redis Cluster (3 masters, 3 replicas) on $LOADSHED_REDIS_CLUSTER_ADDRS" >&2
}
