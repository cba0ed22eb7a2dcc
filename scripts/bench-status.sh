#!/usr/bin/env bash
# Measures what the status page costs and writes docs/results/status.txt:
# one request through the HTTP middleware and a chain of four layers with
# no observer, with an observer that does nothing and with the page's
# recorder (statuspage's BenchmarkRequestPath: the three in one run,
# -count times), and one refresh of the page (BenchmarkRefresh: the JSON,
# the part the page's script fetches each second, the whole page), summed
# up by benchstat. About a minute on 2 cores.
#
#   ./scripts/bench-status.sh
#   COUNT=10 ./scripts/bench-status.sh
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
. scripts/benchstat.sh
benchstat=$(benchstat_path)

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
{
  echo "machine-go: $(go version | awk '{print $3}')"
  echo "machine-nproc: $(nproc)"
  echo "machine-cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "machine-load-before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$raw"
go test -run '^$' -bench '^(BenchmarkRequestPath|BenchmarkRefresh)$' -benchmem -count "$COUNT" ./statuspage >> "$raw"
echo "machine-load-after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"

mkdir -p docs/results
out=docs/results/status.txt
{
  echo "# Written by scripts/bench-status.sh on $(date -u +%Y-%m-%dT%H:%MZ); do not edit."
  echo "#"
  echo "# RequestPath: one request through shedhttp and four layers that admit"
  echo "# everything, on one goroutine (serial) and on every CPU (parallel):"
  echo "# observer=none has no observer, observer=nop"
  echo "# one that does nothing (what any observer costs: the chain times each"
  echo "# layer, the middleware finds the route), observer=page the status page's"
  echo "# recorder alone (it reads no latency, so the chain does not time the"
  echo "# layers). Refresh: one request to the page, with four layers, five"
  echo "# minutes of history, ten clients each and a full ring of rejections."
  echo
  "$benchstat" -filter '.name:/^RequestPath/' -col /observer -row /mode "$raw"
  echo
  "$benchstat" -filter '.name:/^Refresh/' "$raw"
} > "$out"
cat "$out"
