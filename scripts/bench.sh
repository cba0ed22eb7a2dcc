#!/usr/bin/env bash
# Reproduces the tables of docs/benchmarks.md: starts a throw-away
# redis-server (scripts/redis.sh, as scripts/test.sh does), runs the bench
# module's benchmarks -count times with -benchmem, saves the raw output in
# bench/results/<UTC time>.raw (git-ignored) and prints benchstat summaries,
# one table per group with the peers side by side. About 5 minutes on
# 2 cores.
#
#   ./scripts/bench.sh                       # everything, -count 6
#   COUNT=3 ./scripts/bench.sh               # fewer repetitions
#   ./scripts/bench.sh RateMemory ChainHTTP  # only these groups
#
# Groups: Clock, RateMemory, RedisRate, RedisConcurrency, ConcurrencyLocal, WorkerCheck,
# WorkerAcquireRelease, FleetDecision, RedisFleetTrips,
# ConcurrencyHTTP, ChainHTTP, RouterHTTP. Set LOADSHED_REDIS_ADDR to use a running
# server instead of starting one.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(Clock RateMemory ConcurrencyLocal ConcurrencyHTTP ChainHTTP RouterHTTP WorkerCheck WorkerAcquireRelease FleetDecision RedisRate RedisConcurrency RedisFleetTrips)

if [ -z "${LOADSHED_REDIS_ADDR:-}" ]; then
  . scripts/redis.sh
  redis_start bench.sh
fi

. scripts/benchstat.sh
benchstat=$(benchstat_path)

mkdir -p bench/results
raw="bench/results/$(date -u +%Y%m%dT%H%M%SZ).raw"
{
  echo "machine-go: $(go version | awk '{print $3}')"
  echo "machine-nproc: $(nproc)"
  echo "machine-cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "machine-redis: $(redis-cli -u "redis://$LOADSHED_REDIS_ADDR" info server | awk -F: '/^redis_version/{print $2}' | tr -d '\r')"
  echo "machine-load-before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$raw"
cat "$raw" >&2

# -benchtime per group: in-memory rows are tens to hundreds of ns and
# settle in 100ms; Redis rows are round trips and need longer.
benchtime() {
  case $1 in
    Redis*) echo 500ms ;;
    *) echo 100ms ;;
  esac
}

for g in "${groups[@]}"; do
  echo "bench.sh: Benchmark$g, -count $COUNT, -benchtime $(benchtime "$g")" >&2
  (cd bench && go test -run '^$' -bench "^Benchmark$g\$" -benchtime "$(benchtime "$g")" \
    -count "$COUNT" -benchmem -timeout 60m .) | tee -a "$raw" | grep -E '^(FAIL|panic|---)' >&2 || true
done
echo "machine-load-after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw" >&2
echo "bench.sh: raw output in $raw" >&2

for g in "${groups[@]}"; do
  echo
  echo "=== $g ==="
  "$benchstat" -filter ".name:/^$g\$/" -col /peer "$raw" || true
done

echo
echo "=== Markdown (medians), as in docs/benchmarks.md ==="
(cd bench && go run ./cmd/benchtable "../$raw")
