# shellcheck shell=bash
# Starts a throw-away Prometheus for scripts/test.sh, which sources this
# file. prometheus_start installs Debian's prometheus package when the
# binary is missing, starts it on a free loopback port with its data in a
# temporary folder, scraping every second the targets listed in a file (a
# test writes its own server's address there), exports
#
#   LOADSHED_PROMETHEUS_URL      http://127.0.0.1:<port>
#   LOADSHED_PROMETHEUS_TARGETS  the targets file (file_sd, JSON)
#
# and stops it (and removes its folder) when the calling script exits,
# after whatever that script's EXIT trap already did (scripts/redis.sh's).
#
#   . scripts/prometheus.sh
#   prometheus_start test.sh   # the argument prefixes the messages

prometheus_stop() {
  if [ -n "${PROMETHEUS_PID:-}" ]; then
    kill "$PROMETHEUS_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$PROMETHEUS_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PROMETHEUS_PID" 2>/dev/null || true
    PROMETHEUS_PID=""
  fi
  if [ -n "${PROMETHEUS_WORKDIR:-}" ]; then rm -rf "$PROMETHEUS_WORKDIR"; PROMETHEUS_WORKDIR=""; fi
}

prometheus_start() {
  local who=${1:-prometheus.sh}
  if ! command -v prometheus >/dev/null 2>&1; then
    echo "$who: installing prometheus from Debian's packages" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi

  PROMETHEUS_WORKDIR=$(mktemp -d)
  local previous
  previous=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  # shellcheck disable=SC2064 # expand the previous trap now
  trap "prometheus_stop; ${previous:-:}" EXIT INT TERM

  local targets="$PROMETHEUS_WORKDIR/targets.json"
  echo '[]' >"$targets"
  cat >"$PROMETHEUS_WORKDIR/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: loadshed
    file_sd_configs:
      - files: ['$targets']
        refresh_interval: 1s
YAML

  local started="" port
  for _ in $(seq 1 20); do
    port=$(( (RANDOM % 20000) + 30000 ))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue # in use
    prometheus --config.file="$PROMETHEUS_WORKDIR/prometheus.yml" \
      --storage.tsdb.path="$PROMETHEUS_WORKDIR/data" \
      --web.listen-address="127.0.0.1:$port" --log.level=warn \
      >"$PROMETHEUS_WORKDIR/prometheus.log" 2>&1 &
    PROMETHEUS_PID=$!
    for _ in $(seq 1 100); do
      if curl -fsS "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then started=$port; break; fi
      kill -0 "$PROMETHEUS_PID" 2>/dev/null || break
      sleep 0.1
    done
    [ -n "$started" ] && break
    kill "$PROMETHEUS_PID" 2>/dev/null || true
    PROMETHEUS_PID=""
  done
  if [ -z "$started" ]; then
    echo "$who: could not start prometheus on a loopback port" >&2
    cat "$PROMETHEUS_WORKDIR/prometheus.log" >&2 2>/dev/null || true
    exit 1
  fi
  export LOADSHED_PROMETHEUS_URL="http://127.0.0.1:$started"
  export LOADSHED_PROMETHEUS_TARGETS="$targets"
  echo "$who: prometheus $(prometheus --version 2>&1 | awk 'NR==1{print $3}') on $LOADSHED_PROMETHEUS_URL" >&2
}
