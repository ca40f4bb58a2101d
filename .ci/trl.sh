#!/usr/bin/env bash
# The TRL / transformers stage: a venv of its own with CPU torch, TRL and transformers, then the real-framework
# tests (tests/frameworks/test_trl.py). Called from .ci/run; exits non-zero on failure.
set -euo pipefail
STAGE=trl
# shellcheck source=.ci/_torch_stage.sh
source "$(dirname "${BASH_SOURCE[0]}")/_torch_stage.sh"
"$PY" -c 'import trl' 2>/dev/null || install 'trl>=1.16,<1.17' 'transformers>=5,<6' 'datasets' 'accelerate'
install -e "$ROOT[test]"

cd "$ROOT"
"$PY" -m pytest tests/frameworks -q -p no:cacheprovider "$@"
echo ".ci/trl.sh: passed in $(( $(date +%s) - start )) s"
