#!/usr/bin/env bash
# CI stage: the suite's core at both ends of the supported OpenTelemetry range (setup.cfg: >=1.33,<2).
#
#   .ci-venvs/otel-floor   the newest 1.33.x of api, sdk and the OTLP exporters, and the contrib release pip
#                          pairs with it (each contrib release pins the semantic conventions its core pins)
#   .ci-venvs/otel-newest  the newest 1.x
#
# Each venv gets the checkout with its test extra, the OpenTelemetry core held by a pip constraints file, and
# runs record, export, lifecycle and store (a job into the file store, OTLP to a real receiver: in
# tests/export), and the OTLP reliability and fault tests (the send path that differs per release). When no contrib release pairs with the newest core yet (the aiohttp instrumentation lags the
# core by days), that venv is installed without the aiohttp contrib, loudly; its tests are not in the core.
# Exits non-zero on any failure, and when a package cannot be downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
CORE=(opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
  opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-common opentelemetry-proto)
CONTRIB=(opentelemetry-instrumentation-aiohttp-client opentelemetry-instrumentation opentelemetry-util-http)
# The core, plus the two files that drive OTLP's per-release send path (retry, split, drop) against a real receiver.
TESTS=(tests/record tests/export tests/lifecycle tests/store
  tests/integration/test_reliability.py tests/integration/test_faults.py)

loud() { printf '\n!!!!! otel-range: %s\n\n' "$*" >&2; }

# The newest released version of $1 whose number starts with $2 (pip lists newest first).
newest() {
  "$PY" -m pip index versions "$1" 2>/dev/null | sed -n 's/^Available versions: //p' | tr ',' '\n' | tr -d ' ' \
    | grep -E "^${2//./\\.}" | head -1
}

run_end() {  # name, core version
  local name=$1 version=$2 venv="$ROOT/.ci-venvs/$1" started=$SECONDS
  echo "=== otel-range: $name: OpenTelemetry $version"
  rm -rf "$venv"
  "$PY" -m venv "$venv"
  local constraints="$venv/constraints.txt"
  printf '%s\n' "${CORE[@]/%/==$version}" >"$constraints"
  "$venv/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
  if ! "$venv/bin/pip" install -q -c "$constraints" -e "$ROOT[test]" 2>"$venv/pip.err"; then
    grep -v '^WARNING: Location' "$venv/pip.err" | tail -20 >&2 || true
    if grep -qiE 'ResolutionImpossible|conflict' "$venv/pip.err"; then
      loud "$name: no contrib release pairs with OpenTelemetry $version yet; installing without ${CONTRIB[*]}"
      local reqs
      reqs=$("$PY" - "${CONTRIB[@]}" <<'EOF'
import configparser, re, sys
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
drop = set(sys.argv[1:])
for line in cfg["options.extras_require"]["test"].strip().splitlines():
    if re.split(r"[<>=!~; \[]", line.strip(), maxsplit=1)[0].lower() not in drop:
        print(line.strip())
EOF
)
      local lines=()
      mapfile -t lines <<<"$reqs"
      if ! "$venv/bin/pip" install -q -c "$constraints" -e "$ROOT" "${lines[@]}" 2>"$venv/pip.err"; then
        grep -v '^WARNING: Location' "$venv/pip.err" | tail -20 >&2 || true
        loud "$name: cannot install lens_rl with OpenTelemetry $version (a package could not be downloaded?)"
        return 1
      fi
    else
      loud "$name: cannot install lens_rl with OpenTelemetry $version (a package could not be downloaded?)"
      return 1
    fi
  fi
  echo "--- $name: pip freeze | grep -i opentelemetry"
  "$venv/bin/pip" freeze | grep -i opentelemetry
  local have
  have=$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("opentelemetry-sdk"))')
  if [ "$have" != "$version" ]; then
    loud "$name: opentelemetry-sdk is $have, not $version"
    return 1
  fi
  echo "--- $name: installed in $((SECONDS - started)) s; running ${TESTS[*]}"
  (cd "$ROOT" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}")
  echo "=== otel-range: $name: passed ($((SECONDS - started)) s)"
}

FLOOR=$(newest opentelemetry-sdk 1.33.) || true
NEWEST=$(newest opentelemetry-sdk 1.) || true
if [ -z "$FLOOR" ] || [ -z "$NEWEST" ]; then
  loud "cannot list opentelemetry-sdk's releases (is the package index reachable?)"
  exit 1
fi
mkdir -p .ci-venvs
run_end otel-floor "$FLOOR"
run_end otel-newest "$NEWEST"
echo "otel-range: passed at $FLOOR and $NEWEST in $SECONDS s"
