#!/usr/bin/env bash
# loadshed serve against envoyproxy/ratelimit, the service it replaces: both
# on one throw-away redis-server, serving the same files (bench/rls/config,
# envoyproxy/ratelimit's format), asked the same ShouldRateLimit requests
# by one gRPC client (bench/cmd/rlscompare). Prints the agreement check,
# request by request, and a load table (decisions/s, p50, p99, the Redis
# server's CPU per decision) for envoyproxy/ratelimit, loadshed serve in
# exact mode and in batched mode, and loadshed serve in memory: the gRPC
# path's own cost on this machine, the bound of any Redis-backed row. docs/benchmarks.md explains the results.
#
#   bench/rls-compare.sh              # 10 s of load per service, 64 in flight
#   LOAD=30s CONC=128 bench/rls-compare.sh
#   LOAD=0 RESULTS= bench/rls-compare.sh      # the agreement checks alone
#   NOTE="machine shared with other work" bench/rls-compare.sh  # NOTE goes into the results
#
# envoyproxy/ratelimit is built from the Go module proxy into a cache folder
# (its module never enters a go.mod of ours); ENVOY_RATELIMIT_VERSION picks
# the version: by default the newest the proxy serves (the pseudo-versions
# of later commits are refused there). rls's package doc says where that
# version answers otherwise than envoyproxy/ratelimit's current source,
# and the agreement check counts those answers apart.
#
# ENVOY_RATELIMIT_BIN names a service_cmd binary to run instead (one built
# elsewhere, from a commit the proxy does not serve; nothing is built
# then), and ENVOY_RATELIMIT_LABEL says in the results' heading what it
# is (by default the binary's path):
#
#   LOAD=0 ENVOY_RATELIMIT_BIN=/tmp/service_cmd \
#     ENVOY_RATELIMIT_LABEL="at commit <sha>" bench/rls-compare.sh
#
# CURRENT_RULES=1 (the default with ENVOY_RATELIMIT_BIN) also serves
# bench/rls/current, rules in a domain of their own that versions before
# April 2026 refuse or read otherwise (metadata, '*' inside a value), and
# sends a quarter of the agreement checks' requests there.
#
# A second pair of services runs with dynamic metadata on
# (RESPONSE_DYNAMIC_METADATA, -response-dynamic-metadata), for the
# dynamic_metadata check. The output is also written to RESULTS
# (docs/results/rls-compare.md by default; RESULTS= writes none).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS-docs/results/rls-compare.md}

ENVOY_RATELIMIT_VERSION=${ENVOY_RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then CURRENT_RULES=${CURRENT_RULES:-1}; else CURRENT_RULES=${CURRENT_RULES:-0}; fi
LOAD=${LOAD:-10s}
# 64 in flight: at 32, the closed loop left the server's CPU idle a fifth
# of the time in the memory row, so that row measured the loop, not the
# service.
CONC=${CONC:-64}
# loadshed's stores decide from their local share when a round trip takes
# longer than this (50ms by default); on a loaded machine that would turn
# exact rows into local ones, so the comparison waits as envoyproxy/ratelimit
# does. The script counts the fallbacks at the end: a fair run has none.
REDIS_TIMEOUT=${REDIS_TIMEOUT:-1s}
# Pinning: the service under test and redis-server share SERVER_CPU, the
# load generator has LOAD_CPU to itself, each Go process with GOMAXPROCS=1,
# so that no process steals another's CPU and a row's bound is plain: one
# CPU divided by the service's and Redis's CPU per decision. PIN=0 turns
# it off (and it is off on a machine of one CPU).
PIN=${PIN:-1}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
ON_SERVER=() ON_LOAD=()
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ]; then
  ON_SERVER=(taskset -c "$SERVER_CPU" env GOMAXPROCS=1)
  ON_LOAD=(taskset -c "$LOAD_CPU" env GOMAXPROCS=1)
fi
BIN=${XDG_CACHE_HOME:-$HOME/.cache}/loadshed-bench/bin
mkdir -p "$BIN"

. scripts/redis.sh
redis_start rls-compare.sh
if [ ${#ON_SERVER[@]} -gt 0 ]; then taskset -a -cp "$SERVER_CPU" "$(cat "$REDIS_PIDFILE")" >/dev/null; fi

if [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
  if [ ! -x "$ENVOY_RATELIMIT_BIN" ]; then
    echo "rls-compare.sh: ENVOY_RATELIMIT_BIN=$ENVOY_RATELIMIT_BIN is not an executable file" >&2; exit 1
  fi
  ENVOY_SERVICE=$ENVOY_RATELIMIT_BIN
  ENVOY_RATELIMIT_LABEL=${ENVOY_RATELIMIT_LABEL:-$ENVOY_RATELIMIT_BIN}
else
  ENVOY_SERVICE=$BIN/service_cmd-$ENVOY_RATELIMIT_VERSION
  ENVOY_RATELIMIT_LABEL=${ENVOY_RATELIMIT_LABEL:-$ENVOY_RATELIMIT_VERSION}
  if [ ! -x "$ENVOY_SERVICE" ]; then
    echo "rls-compare.sh: building envoyproxy/ratelimit $ENVOY_RATELIMIT_VERSION from the module proxy" >&2
    (cd /tmp && GOBIN="$BIN" GOFLAGS=-mod=mod go install "github.com/envoyproxy/ratelimit/src/service_cmd@$ENVOY_RATELIMIT_VERSION")
    mv "$BIN/service_cmd" "$ENVOY_SERVICE"
  fi
fi
go build -o "$BIN/loadshed" ./cmd/loadshed
(cd bench && go build -o "$BIN/rlscompare" ./cmd/rlscompare)

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
  redis_stop
}
trap cleanup EXIT INT TERM

# free_port picks a port nothing listens on, below Linux's ephemeral range
# (32768 and up), where the load's own client connections cannot hold it.
free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$(( (RANDOM % 12000) + 20000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
  echo "rls-compare.sh: no free port" >&2; exit 1
}

wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    sleep 0.1
  done
  echo "rls-compare.sh: nothing listens on $1 ($2)" >&2; cat "$WORK"/*.log >&2; exit 1
}

# envoyproxy/ratelimit reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
# loadshed serve reads the same folder.
RULES=$WORK/runtime/ratelimit/config
mkdir -p "$RULES"
cp bench/rls/config/*.yaml "$RULES/"
CURRENT_FLAG=()
if [ "$CURRENT_RULES" = 1 ]; then
  cp bench/rls/current/*.yaml "$RULES/"
  CURRENT_FLAG=(-current current)
fi

E_GRPC=$(free_port); E_HTTP=$(free_port); E_DEBUG=$(free_port)
env USE_STATSD=false LOG_LEVEL=error BACKEND_TYPE=redis \
  REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_URL="$LOADSHED_REDIS_ADDR" \
  LOCAL_CACHE_SIZE_IN_BYTES=1048576 \
  RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=true \
  HOST=127.0.0.1 PORT="$E_HTTP" GRPC_HOST=127.0.0.1 GRPC_PORT="$E_GRPC" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$E_DEBUG" \
  "${ON_SERVER[@]}" "$ENVOY_SERVICE" >"$WORK/envoy.log" 2>&1 &
E_PID=$!; PIDS+=($!)

EM_GRPC=$(free_port); EM_HTTP=$(free_port); EM_DEBUG=$(free_port)
env USE_STATSD=false LOG_LEVEL=error BACKEND_TYPE=redis \
  REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_URL="$LOADSHED_REDIS_ADDR" \
  LOCAL_CACHE_SIZE_IN_BYTES=1048576 RESPONSE_DYNAMIC_METADATA=true \
  RUNTIME_ROOT="$WORK/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=true \
  HOST=127.0.0.1 PORT="$EM_HTTP" GRPC_HOST=127.0.0.1 GRPC_PORT="$EM_GRPC" \
  DEBUG_HOST=127.0.0.1 DEBUG_PORT="$EM_DEBUG" \
  "${ON_SERVER[@]}" "$ENVOY_SERVICE" >"$WORK/envoy-metadata.log" 2>&1 &
PIDS+=($!)

# start_loadshed X NAME FLAGS...: loadshed serve with FLAGS on free ports,
# which it leaves in X_GRPC and X_HTTP, its process id in X_PID.
start_loadshed() {
  local x=$1 name=$2 grpc http
  shift 2
  grpc=$(free_port); http=$(free_port)
  "${ON_SERVER[@]}" "$BIN/loadshed" serve -config "$RULES" -watch=false "$@" \
    -grpc-addr "127.0.0.1:$grpc" -http-addr "127.0.0.1:$http" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  printf -v "${x}_PID" %s $!
  printf -v "${x}_GRPC" %s "$grpc"
  printf -v "${x}_HTTP" %s "$http"
}
ON_REDIS=(-redis "$LOADSHED_REDIS_ADDR" -redis-timeout "$REDIS_TIMEOUT")
start_loadshed L exact "${ON_REDIS[@]}"
start_loadshed U unpipelined "${ON_REDIS[@]}" -pipeline 0
start_loadshed B batched "${ON_REDIS[@]}" -batch 0.1
start_loadshed C batched2 "${ON_REDIS[@]}" -batch 0.1
start_loadshed M memory
start_loadshed D metadata "${ON_REDIS[@]}" -response-dynamic-metadata

wait_port "$E_GRPC" envoyproxy/ratelimit
wait_port "$L_GRPC" "loadshed serve"
wait_port "$U_GRPC" "loadshed serve -pipeline 0"
wait_port "$B_GRPC" "loadshed serve -batch"
wait_port "$C_GRPC" "loadshed serve -batch, a second instance"
wait_port "$M_GRPC" "loadshed serve (memory)"
wait_port "$EM_GRPC" "envoyproxy/ratelimit with dynamic metadata"
wait_port "$D_GRPC" "loadshed serve -response-dynamic-metadata"

# report prints the results: what a run writes to RESULTS.
report() {
  echo "# loadshed serve against envoyproxy/ratelimit $ENVOY_RATELIMIT_LABEL"
  echo
  echo "Written by \`bench/rls-compare.sh\` (do not edit by hand); how the services are set up and"
  echo "how to read the rows: [../benchmarks.md](../benchmarks.md#the-rate-limit-service-against-envoyproxyratelimit)."
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $(go version | awk '{print $3}'), redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), loadshed $(git rev-parse --short HEAD), LOAD=$LOAD CONC=$CONC PIN=$PIN CURRENT_RULES=$CURRENT_RULES${NOTE:+; $NOTE}"
  echo
  "${ON_LOAD[@]}" "$BIN/rlscompare" -envoy "127.0.0.1:$E_GRPC" -loadshed "127.0.0.1:$L_GRPC" \
    -envoy-metadata "127.0.0.1:$EM_GRPC" -loadshed-metadata "127.0.0.1:$D_GRPC" -unpipelined "127.0.0.1:$U_GRPC" -batched "127.0.0.1:$B_GRPC" -batched2 "127.0.0.1:$C_GRPC" -memory "127.0.0.1:$M_GRPC" \
    -redis "$LOADSHED_REDIS_ADDR" "${CURRENT_FLAG[@]}" -load "$LOAD" -c "$CONC" -pids "$E_PID,$L_PID,$U_PID,$B_PID,$M_PID" "$@"

  # Decisions taken from the local share because Redis did not answer within
  # the store's timeout: they are not exact, and a fair row has none.
  echo
  for s in "exact $L_HTTP" "exact,-pipeline-0 $U_HTTP" "batched $B_HTTP"; do
    set -- $s
    n=$(curl -s "127.0.0.1:$2/metrics" | awk '/^loadshed_requests_total\{.*fallback="true"/ {s += $2} END {print s + 0}')
    echo "- loadshed serve ($1): $n decisions from the local fallback share"
  done
}
if [ -n "$RESULTS" ]; then
  report "$@" | tee "$WORK/results.md"
  cp "$WORK/results.md" "$RESULTS"
  echo "rls-compare.sh: wrote $RESULTS" >&2
else
  report "$@"
fi
