#!/usr/bin/env bash
# Runs every test, the way CI does: installs redis-server from Debian's
# packages when it is missing, starts it on a free loopback port and a
# Redis Cluster of 3 masters and 3 replicas beside it
# (LOADSHED_REDIS_CLUSTER_ADDRS, LOADSHED_REDIS_CLUSTER_DIR), runs
# gofmt, go vet and `go test -race` over the library and the bench module
# with the server's address in LOADSHED_REDIS_ADDR, and stops the server.
# The same for Prometheus (scripts/prometheus.sh), which the dashboards'
# test (./dashboards) needs; it is started only when that package runs.
# Debian's chromium is installed when missing (scripts/chromium.sh) and
# its path exported in LOADSHED_CHROMIUM, for the status page's tests in a
# headless browser, which must then run (LOADSHED_REQUIRE_CHROMIUM=1); only
# when that package (./statuspage) runs.
#
#   ./scripts/test.sh                 # everything
#   ./scripts/test.sh ./ratelimit/... # only these packages (library module)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/redis.sh
redis_start test.sh
redis_cluster_start test.sh
export LOADSHED_REQUIRE_REDIS=1

case " $* " in
  "  " | *dashboards* | *" ./... "*)
    . scripts/prometheus.sh
    prometheus_start test.sh
    export LOADSHED_REQUIRE_PROMETHEUS=1
    ;;
esac

case " $* " in
  "  " | *statuspage* | *" ./... "*)
    . scripts/chromium.sh
    chromium_ensure test.sh
    export LOADSHED_REQUIRE_CHROMIUM=1
    ;;
esac

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

if [ $# -gt 0 ]; then
  go test -race -shuffle=on "$@"
  exit
fi

go vet ./...
go test -race -shuffle=on ./...
if [ -f bench/go.mod ]; then
  (cd bench && go vet ./... && go test -race ./...)
fi
