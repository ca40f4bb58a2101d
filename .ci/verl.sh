#!/usr/bin/env bash
# The veRL stage: a fresh venv of its own (uv, from the shared package cache: .ci/_uv.sh) with CPU torch and
# veRL 0.9.1 (no GPU extras), then lens_rl installed into it beside veRL's own OpenTelemetry and Ray, then the real-veRL tests (tests/frameworks/test_verl.py) and a
# `ray.init()` in that venv. Called from .ci/run; exits non-zero on failure.
set -euo pipefail
STAGE=verl
# shellcheck source=.ci/_torch_stage.sh
source "$(dirname "${BASH_SOURCE[0]}")/_torch_stage.sh"

otel_and_ray() {
    echo "--- .ci/verl.sh: OpenTelemetry and Ray $1 installing lens_rl:"
    "$UV" pip freeze -q --python "$PY" | grep -i -e opentelemetry -e '^ray' || true
}

# veRL without its GPU extras, and the three modules its trainer module imports that its base requirements leave out
install 'verl==0.9.1' cachetools uvicorn fastapi
# what veRL brought, before lens_rl is installed beside it
before="$("$UV" pip freeze -q --python "$PY" | grep -i -e opentelemetry -e '^ray' || true)"
echo "--- .ci/verl.sh: OpenTelemetry and Ray before installing lens_rl:"
echo "$before"
# lens_rl as a user installs it beside veRL (its base and the Ray and analysis extras): this must move nothing
install -e "$ROOT[ray,analysis]"
otel_and_ray after
after="$("$UV" pip freeze -q --python "$PY" | grep -i -e opentelemetry -e '^ray' || true)"
# every package veRL brought is still there at its version (lens_rl's own additions aside)
changed=0
moved="$(comm -23 <(echo "$before" | sort) <(echo "$after" | sort))"
if [ -n "$moved" ]; then
    changed=1
    echo "!!!! .ci/verl.sh: installing lens_rl changed veRL's OpenTelemetry or Ray:" >&2
    echo "$moved" | sed 's/^/  was: /' >&2
fi

# what the tests need (the test extra's pinned contrib pair would move veRL's OpenTelemetry: not a user's install)
install 'pytest>=8' 'pytest-timeout>=2.3'
echo "--- .ci/verl.sh: installed in $(( $(date +%s) - start )) s"

cd "$ROOT"
"$PY" -c 'import verl, verl.trainer.ppo.ray_trainer; print("veRL", verl.__version__)'
"$PY" -m pytest tests/frameworks/test_verl.py -q -p no:cacheprovider -m 'slow or not slow' "$@"
# veRL's Ray still starts with lens_rl installed beside it (a local cluster, then stopped). With lens_rl's exact
# OpenTelemetry pins it does not: the downgraded SDK lacks what Ray's Prometheus exporter imports.
timeout 300 "$PY" - <<'EOF'
import ray

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
ray.shutdown()
print("ray.init() works beside lens_rl:", ray.__version__)
EOF
if [ "$changed" = 1 ]; then
    echo "!!!! .ci/verl.sh: the tests ran, but lens_rl's install changed veRL's OpenTelemetry (see above) !!!!" >&2
    exit 1
fi
echo ".ci/verl.sh: passed in $(( $(date +%s) - start )) s"
