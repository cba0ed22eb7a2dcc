#!/usr/bin/env bash
# Writes docs/results/benchmarks.md (explained in docs/benchmarks.md): starts a throw-away
# redis-server (scripts/redis.sh, as scripts/test.sh does), runs the bench
# module's benchmarks -count times with -benchmem, saves the raw output in
# bench/results/<UTC time>.raw (git-ignored) and prints benchstat summaries,
# one table per group with the peers side by side, and writes the
# Markdown tables (medians) with the date, the machine and the commit to
# docs/results/benchmarks.md. A run of some groups only prints its tables,
# unless RESULTS names a file to write. About 5 minutes on 2 cores.
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
all=0
[ ${#groups[@]} -gt 0 ] || all=1
RESULTS=${RESULTS:-}
[ "$all" = 0 ] || RESULTS=${RESULTS:-docs/results/benchmarks.md}
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
echo "=== Markdown (medians), as in docs/results/benchmarks.md ==="
(cd bench && go run ./cmd/benchtable "../$raw")
if [ -n "$RESULTS" ]; then
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- . ':!docs/results' || commit="$commit, with uncommitted changes"
  command="COUNT=$COUNT ./scripts/bench.sh${*:+ $*}"
  (cd bench && go run ./cmd/benchtable -command "$command" -commit "$commit" -raw-name "$raw" "../$raw") > "$RESULTS.tmp"
  mv "$RESULTS.tmp" "$RESULTS"
  echo "bench.sh: wrote $RESULTS" >&2
fi
