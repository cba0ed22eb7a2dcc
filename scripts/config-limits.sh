#!/usr/bin/env bash
# Measures the largest realistic envoyproxy/ratelimit file against the
# default limits of a configuration file, and what refusing each hostile
# file costs rls.Load (time and heap allocated), into
# docs/results/config-limits.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/results/config-limits.txt
LOADSHED_LIMITS_RESULTS="$PWD/$out" go test -count=1 -run '^TestRealisticFileWithinTheDefaultLimits$' ./rls
echo "wrote $out"
cat "$out"
