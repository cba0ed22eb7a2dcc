#!/usr/bin/env bash
# Compares the bench module's rows at an older revision with the working
# tree, in one run: both test binaries are built first, then run in turns
# (old, new, old, new, ...) so that the machine's drift from minute to
# minute falls on both alike, and benchstat compares them. This is how a
# change shows that no row got slower.
#
#   ./scripts/bench-compare.sh 1d20b76                                  # RateMemory ConcurrencyLocal ChainHTTP
#   ./scripts/bench-compare.sh 1d20b76 ConcurrencyLocal                 # one group
#   COUNT=10 PIN=1 ./scripts/bench-compare.sh HEAD~3 ConcurrencyLocal   # on one core
#
# COUNT turns (default 6) of -benchtime BENCHTIME (default 100ms). PIN=1
# runs both binaries on CPU 1 only, with GOMAXPROCS 1 (taskset -c 1,
# -test.cpu 1): the serial rows then vary by about 2% instead of 10-40% on
# a shared 2-core VM. The parallel rows then run on one core too, which
# measures their locking but not their contention.
# Groups must exist at both revisions. The raw outputs stay in
# bench/results/compare-<UTC time>/ (git-ignored). In-memory groups only:
# nothing here starts Redis.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: $0 REV [GROUP ...]" >&2; exit 2; }
rev=$1
shift
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(RateMemory ConcurrencyLocal ChainHTTP)
COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-100ms}
git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || { echo "$0: unknown revision $rev" >&2; exit 2; }

run=() cpu=()
if [ "${PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { echo "$0: PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  run=(taskset -c 1) cpu=(-test.cpu 1)
fi
# Found (or installed) before the runs, so that a failure costs no
# minutes of benchmarking.
. scripts/benchstat.sh
benchstat=$(benchstat_path)

out="$PWD/bench/results/compare-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
tree=$(mktemp -d)
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git worktree add --quiet --detach "$tree" "$rev"
(cd "$tree/bench" && go test -c -o "$out/old.test" .)
(cd bench && go test -c -o "$out/new.test" .)

pattern="^Benchmark($(IFS='|'; echo "${groups[*]}"))\$"

echo "bench-compare: $rev against the working tree, ${groups[*]}, $COUNT turns" >&2
for i in $(seq "$COUNT"); do
  for side in old new; do
    (cd "$out" && "${run[@]}" "./$side.test" -test.run '^$' -test.bench "$pattern" \
      -test.benchtime "$BENCHTIME" -test.count 1 -test.benchmem "${cpu[@]}") >>"$out/$side.txt"
  done
done

echo "bench-compare: raw output in $out" >&2
(cd "$out" && "$benchstat" old.txt new.txt)
