# Sourced by the stages whose framework runs on CPU torch (.ci/trl.sh, .ci/verl.sh), after they set STAGE:
# ROOT, the stage's venv (.ci-venvs/$STAGE, made if missing), PY, start, install (pip, loud and fatal when a
# package cannot be had), and CPU torch 2.13.0 in the venv first (a plain `torch` would pull a CUDA build).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.ci-venvs/$STAGE"
PY="$VENV/bin/python"
start=$(date +%s)

install() {
    if ! "$PY" -m pip install -q "$@"; then
        echo "!!!! .ci/$STAGE.sh: could not download or install: $* !!!!" >&2
        exit 1
    fi
}

if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
fi
"$PY" -c 'import torch' 2>/dev/null || install 'torch==2.13.0'
