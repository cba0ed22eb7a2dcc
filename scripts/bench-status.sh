#!/usr/bin/env bash
# Measures what the status page costs and writes docs/results/status.txt:
# one request through the HTTP middleware and a chain of four layers with
# no observer, with an observer that does nothing and with the page's
# recorder (statuspage's BenchmarkRequestPath: the three in one run,
# -count times), the recorder alone (shedstatus' BenchmarkObserve), and
# one refresh of the page (BenchmarkRefresh: the JSON, the part the page's
# script fetches each second, the whole page), summed up by benchstat.
# About three minutes on 2 cores with COUNT=10.
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
go test -run '^$' -bench '^(BenchmarkRequestPath|BenchmarkRefresh|BenchmarkObserve)$' -benchmem -count "$COUNT" ./statuspage ./shed/shedstatus >> "$raw"
echo "machine-load-after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$raw"

mkdir -p docs/results
out=docs/results/status.txt
{
  echo "# Written by scripts/bench-status.sh on $(date -u +%Y-%m-%dT%H:%MZ); do not edit."
  echo "#"
  echo "# RequestPath: one request through shedhttp and four layers that admit"
  echo "# everything, on one goroutine (serial) and on every CPU (parallel):"
  echo "# observer=none has no observer, observer=nop one that does nothing"
  echo "# (what any observer costs: the chain times each layer, the"
  echo "# middleware finds the route), observer=page the status page's"
  echo "# recorder alone (it reads no latency, so the chain does not time the"
  echo "# layers). Observe: the recorder alone, the four admissions and four"
  echo "# releases of one request through four layers, on every CPU at once."
  echo "# Refresh: one request to the page, with four layers, five minutes of"
  echo "# history, ten clients each and a full ring of rejections."
  echo
  "$benchstat" -filter '.name:/^RequestPath/' -col /observer -row /mode "$raw"
  echo
  "$benchstat" -filter '.name:/^(Observe|Refresh)/' "$raw"
} > "$out"
cat "$out"
