#!/usr/bin/env bash
# The TRL / transformers stage: a fresh venv of its own (uv, from the shared package cache: .ci/_uv.sh) with CPU
# torch, TRL and transformers, then the real-framework tests (tests/frameworks). Called from .ci/run; exits
# non-zero on failure.
set -euo pipefail
STAGE=trl
# shellcheck source=.ci/_torch_stage.sh
source "$(dirname "${BASH_SOURCE[0]}")/_torch_stage.sh"
install 'trl>=1.16,<1.17' 'transformers>=5,<6' 'datasets' 'accelerate' -e "$ROOT[test]"
echo "--- .ci/trl.sh: installed in $(( $(date +%s) - start )) s"

cd "$ROOT"
"$PY" -m pytest tests/frameworks -q -p no:cacheprovider "$@"
echo ".ci/trl.sh: passed in $(( $(date +%s) - start )) s"
