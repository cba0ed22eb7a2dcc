#!/usr/bin/env bash
# Runs every fuzz target of the library and of the bench module, one at a
# time, each for the given time, and prints one line per target: how long it
# ran and whether it found a failing input (go test then writes that input
# under the package's testdata/fuzz/<Target>/, where it becomes a seed that
# the ordinary `go test` runs from then on).
#
#   ./scripts/fuzz.sh 5m                  # every target, 5 minutes each
#   ./scripts/fuzz.sh 30s ./rls ./config  # only the targets of these packages
#
# FUZZ_PARALLEL sets the number of fuzzing workers per target (default 1, so
# that the run leaves the rest of the machine alone). The exit status is 1
# when any target failed.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  echo "usage: scripts/fuzz.sh DURATION [PACKAGE...]" >&2
  exit 2
fi
fuzztime=$1
shift
parallel=${FUZZ_PARALLEL:-1}

# targets prints "module-dir package-dir Target" for every fuzz target.
targets() {
  for mod in . bench; do
    (cd "$mod" && grep -rl --include='*_test.go' '^func Fuzz' . | sort) | while read -r file; do
      dir=$(dirname "$file")
      [ "$mod" = bench ] || case "$dir" in ./bench | ./bench/*) continue ;; esac
      grep -o '^func Fuzz[A-Za-z0-9_]*' "$mod/$file" | sed 's/^func //' | while read -r name; do
        echo "$mod $dir $name"
      done
    done
  done
}

wanted() {
  [ $# -eq 1 ] && return 0
  local pkg=$1
  shift
  for p in "$@"; do
    [ "${p%/}" = "$pkg" ] && return 0
  done
  return 1
}

failed=0
while read -r mod dir name; do
  pkg=$dir
  if [ "$mod" != . ]; then
    pkg="./$mod"
    [ "$dir" = . ] || pkg="./$mod/${dir#./}"
  fi
  wanted "$pkg" "$@" || continue
  start=$(date +%s)
  log=$(mktemp)
  (cd "$mod" && go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -parallel="$parallel" "$dir") >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | sed 's/execs: //')
  if [ $rc -eq 0 ]; then
    echo "ok    $pkg $name ${took}s ${execs:-?} execs"
  else
    failed=1
    echo "FAIL  $pkg $name ${took}s ${execs:-?} execs"
    sed 's/^/      /' "$log"
  fi
  rm -f "$log"
done < <(targets)
exit $failed
