#!/usr/bin/env bash
# Runs every test, the way CI does: installs redis-server from Debian's
# packages when it is missing, starts it on a free loopback port, runs
# gofmt, go vet and `go test -race` over the library and the bench module
# with the server's address in LOADSHED_REDIS_ADDR, and stops the server.
#
#   ./scripts/test.sh                 # everything
#   ./scripts/test.sh ./ratelimit/... # only these packages (library module)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "test.sh: installing redis-server from Debian's packages" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

workdir=$(mktemp -d)
pidfile="$workdir/redis.pid"
cleanup() {
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT INT TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

started=""
for _ in $(seq 1 50); do
  port=$(( (RANDOM % 20000) + 30000 ))
  port_in_use "$port" && continue
  if redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --daemonize yes --pidfile "$pidfile" --dir "$workdir" \
      --logfile "$workdir/redis.log" >/dev/null 2>&1; then
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then started=$port; break; fi
      sleep 0.05
    done
    [ -n "$started" ] && break
  fi
done
if [ -z "$started" ]; then
  echo "test.sh: could not start redis-server on a loopback port" >&2
  cat "$workdir/redis.log" >&2 2>/dev/null || true
  exit 1
fi
export LOADSHED_REDIS_ADDR="127.0.0.1:$started"
export LOADSHED_REQUIRE_REDIS=1
echo "test.sh: redis-server $(redis-server --version | awk '{print $3}') on $LOADSHED_REDIS_ADDR" >&2

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
