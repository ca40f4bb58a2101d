#!/usr/bin/env bash
# One lane of .ci/run: the stages named, one after another. Each stage's output goes to $CI_LOGS/<stage>.log;
# when it ends, its log, its verdict and the disk's room are written whole to $CI_LOGS/<stage>.out (and printed
# with --print), and a failed stage leaves $CI_LOGS/<stage>.failed. On CI (CI set) a stage's venvs go once it
# has run. Usage: .ci/_lane.sh [--print] STAGE...
set -uo pipefail
cd "$(dirname "$0")/.."
print=0
if [ "${1:-}" = --print ]; then print=1; shift; fi
logs="${CI_LOGS:?}"
free_space() { df -Pk . | awk 'NR == 2 {printf "%.1f GB free", $4 / 1048576}'; }
for name in "$@"; do
  t=$SECONDS
  if bash ".ci/$name.sh" >"$logs/$name.log" 2>&1; then
    verdict="ci: stage $name passed in $((SECONDS - t)) s"
  else
    verdict="ci: STAGE $name FAILED after $((SECONDS - t)) s"
    touch "$logs/$name.failed"
  fi
  if [ -n "${CI:-}" ]; then
    venvs="${LENS_RL_CI_VENVS:-$PWD/.ci-venvs}"
    case $name in otel-range) rm -rf "$venvs/otel-floor" "$venvs/otel-newest" ;; *) rm -rf "${venvs:?}/$name" ;; esac
  fi
  { echo "ci: ===== stage $name ====="; cat "$logs/$name.log"; echo "$verdict"; echo "ci: $(free_space) after stage $name"; } \
    >"$logs/$name.out"
  if ((print)); then cat "$logs/$name.out"; fi
done
