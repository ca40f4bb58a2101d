#!/usr/bin/env bash
# CI stage: the suite's core at both ends of the supported OpenTelemetry range (setup.cfg: >=1.33,<2).
#
#   .ci-venvs/otel-floor   the oldest releases setup.cfg's ranges allow, as the resolver picks them
#                          (uv pip install --resolution lowest-direct on the ranges), and the contrib release
#                          that pairs with them (each contrib release pins the semantic conventions its core pins)
#   .ci-venvs/otel-newest  the newest 1.x, as the resolver picks it (--resolution highest on the same ranges)
#
# Each venv (uv, from the shared package cache: .ci/_uv.sh; LENS_RL_CI_VENVS moves the folder) gets the
# OpenTelemetry core so resolved, then the checkout with its test extra with that core held by a constraints
# file, and runs record, export, lifecycle and store (a job into the file store, OTLP to a real receiver: in
# tests/export), and the OTLP reliability and fault tests (the send path that differs per release). The SDK's
# version is printed and checked (the floor's must be the ranges' lower bound). When no contrib release pairs
# with the newest core yet (the aiohttp instrumentation lags the core by days), that venv is installed without
# the aiohttp contrib, loudly; its tests are not in the core. Exits non-zero on any failure, and when a
# package cannot be downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=.ci/_uv.sh
source .ci/_uv.sh
VENVS="${LENS_RL_CI_VENVS:-$ROOT/.ci-venvs}"
CORE=(opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
  opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-common opentelemetry-proto)
CONTRIB=(opentelemetry-instrumentation-aiohttp-client opentelemetry-instrumentation opentelemetry-util-http)
# The core, plus the two files that drive OTLP's per-release send path (retry, split, drop) against a real receiver.
TESTS=(tests/record tests/export tests/lifecycle tests/store
  tests/integration/test_reliability.py tests/integration/test_faults.py)

loud() { printf '\n!!!!! otel-range: %s\n\n' "$*" >&2; }

# setup.cfg's requirements (base, then extras) named by the arguments, or all but them with --not (first seen).
requirements() {
  python3 - "$@" <<'PY'
import configparser, re, sys
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
args = sys.argv[1:]
keep = args[0] != "--not"
names = {a.lower() for a in (args if keep else args[1:])}
blocks = [cfg["options"]["install_requires"]] + [cfg["options.extras_require"][e] for e in ("grpc", "test")]
seen = set()
for block in blocks:
    for line in block.strip().splitlines():
        line = line.strip()
        name = re.split(r"[<>=!~; \[]", line, maxsplit=1)[0].lower()
        if not line or line.startswith("#") or name in seen or (name in names) != keep:
            continue
        seen.add(name)
        print(line)
PY
}

run_end() {  # name, the resolver's resolution for the core's ranges (lowest-direct, highest)
  local name=$1 resolution=$2 venv="$VENVS/$1" started=$SECONDS
  local python="$venv/bin/python" ranges=() version floor
  mapfile -t ranges < <(requirements "${CORE[@]}")
  echo "=== otel-range: $name: OpenTelemetry ${ranges[*]}, --resolution $resolution"
  new_venv "$venv"
  if ! "$UV" pip install -q --python "$python" --resolution "$resolution" "${ranges[@]}" 2>"$venv/install.err"; then
    tail -20 "$venv/install.err" >&2
    loud "$name: cannot install OpenTelemetry's core (${ranges[*]}): a package could not be downloaded?"
    return 1
  fi
  local constraints="$venv/constraints.txt"
  "$UV" pip freeze -q --python "$python" | grep -E "^($(IFS='|'; echo "${CORE[*]}"))==" >"$constraints"
  version=$(sed -n 's/^opentelemetry-sdk==//p' "$constraints")
  echo "--- $name: the resolver picked opentelemetry-sdk $version"
  if ! "$UV" pip install -q --python "$python" -c "$constraints" -e "$ROOT[test]" 2>"$venv/install.err"; then
    tail -20 "$venv/install.err" >&2
    if grep -qiE 'no solution found|unsatisfiable|conflict' "$venv/install.err"; then
      loud "$name: no contrib release pairs with OpenTelemetry $version yet; installing without ${CONTRIB[*]}"
      local lines=()
      mapfile -t lines < <(requirements --not "${CONTRIB[@]}")
      if ! "$UV" pip install -q --python "$python" -c "$constraints" -e "$ROOT" "${lines[@]}" 2>"$venv/install.err"
      then
        tail -20 "$venv/install.err" >&2
        loud "$name: cannot install lens_rl with OpenTelemetry $version (a package could not be downloaded?)"
        return 1
      fi
    else
      loud "$name: cannot install lens_rl with OpenTelemetry $version (a package could not be downloaded?)"
      return 1
    fi
  fi
  echo "--- $name: uv pip freeze | grep -i opentelemetry"
  "$UV" pip freeze -q --python "$python" | grep -i opentelemetry
  local have
  have=$("$python" -c 'from importlib.metadata import version; print(version("opentelemetry-sdk"))')
  echo "--- $name: opentelemetry-sdk $have installed"
  if [ "$have" != "$version" ]; then
    loud "$name: opentelemetry-sdk is $have, not $version"
    return 1
  fi
  if [ "$resolution" = lowest-direct ]; then  # the floor is the ranges' lower bound, not a later release
    floor=$(printf '%s\n' "${ranges[@]}" | sed -n 's/^opentelemetry-sdk *>= *\([0-9.]*\).*/\1/p')
    case "$have" in
      "$floor" | "$floor".*) ;;
      *) loud "$name: opentelemetry-sdk is $have, not the ranges' floor $floor"; return 1 ;;
    esac
  fi
  echo "--- $name: installed in $((SECONDS - started)) s; running ${TESTS[*]}"
  (cd "$ROOT" && "$python" -m pytest -q -p no:cacheprovider -m "slow or not slow" "${TESTS[@]}")
  echo "=== otel-range: $name: passed at OpenTelemetry $have ($((SECONDS - started)) s)"
  echo "$have" >"$venv/otel-version"
}

mkdir -p "$VENVS"
run_end otel-floor lowest-direct
run_end otel-newest highest
echo "otel-range: passed at $(cat "$VENVS/otel-floor/otel-version") and $(cat "$VENVS/otel-newest/otel-version") in $SECONDS s"
