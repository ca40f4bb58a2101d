#!/usr/bin/env bash
# The slow-marked tests (a Ray cluster, a real job of several seconds): the README's command deselects them
# (pytest.ini: -m "not slow") to keep the everyday suite short; CI runs them here, in the README's venv (.venv,
# made by the README's command just before). Called from .ci/run; exits non-zero on failure. Extra arguments go
# to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
.venv/bin/python -m pytest -m slow "$@"
echo ".ci/slow.sh: passed in $(( $(date +%s) - start )) s"
