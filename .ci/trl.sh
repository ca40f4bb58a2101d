#!/usr/bin/env bash
# The TRL / transformers stage: a fresh venv of its own (uv, from the shared package cache: .ci/_uv.sh) with CPU
# torch, TRL and transformers, then the tests that need them: the rest of tests/frameworks runs in the README's
# suite already (stand-ins, `lens-rl run`), and runs there the same. Called from .ci/run; exits non-zero on
# failure. Extra arguments go to pytest.
set -euo pipefail
STAGE=trl
# shellcheck source=.ci/_torch_stage.sh
source "$(dirname "${BASH_SOURCE[0]}")/_torch_stage.sh"
install 'trl>=1.16,<1.17' 'transformers>=5,<6' 'datasets' 'accelerate' -e "$ROOT[test]"
echo "--- .ci/trl.sh: installed in $(( $(date +%s) - start )) s"

cd "$ROOT"
# TRL and transformers woven for real; torch.profiler windows in a loop and in a TRL job
"$PY" -m pytest tests/frameworks/test_trl.py tests/frameworks/test_profile_torch.py -q -p no:cacheprovider -m "slow or not slow" "$@"
echo ".ci/trl.sh: passed in $(( $(date +%s) - start )) s"
