# Sourced by the benchmark scripts: benchstat_path prints the path of
# benchstat (golang.org/x/perf/cmd/benchstat), installing it into GOPATH/bin
# first when it is not there.
benchstat_path() {
  local bin
  bin=$(go env GOPATH)/bin/benchstat
  if ! [ -x "$bin" ]; then
    echo "installing benchstat" >&2
    (cd / && go install golang.org/x/perf/cmd/benchstat@latest) >&2
  fi
  echo "$bin"
}
