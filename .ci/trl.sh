#!/usr/bin/env bash
# The TRL / transformers stage: a venv of its own with CPU torch, TRL and transformers, then the real-framework
# tests (tests/frameworks/test_trl.py). Called from .ci/run; exits non-zero on failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.ci-venvs/trl"
PY="$VENV/bin/python"
start=$(date +%s)

install() {
    if ! "$PY" -m pip install -q "$@"; then
        echo "!!!! .ci/trl.sh: could not download or install: $* !!!!" >&2
        exit 1
    fi
}

if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
fi
# torch first, the CPU wheel (a plain `torch` would pull a multi-GB CUDA build)
"$PY" -c 'import torch' 2>/dev/null || install 'torch==2.13.0'
"$PY" -c 'import trl' 2>/dev/null || install 'trl>=1.16,<1.17' 'transformers>=5,<6' 'datasets' 'accelerate'
install -e "$ROOT[test]"

cd "$ROOT"
"$PY" -m pytest tests/frameworks -q -p no:cacheprovider "$@"
echo ".ci/trl.sh: passed in $(( $(date +%s) - start )) s"
