# Sourced by the stages whose framework runs on CPU torch (.ci/trl.sh, .ci/verl.sh), after they set STAGE:
# ROOT, the stage's fresh venv VENV (.ci-venvs/$STAGE; LENS_RL_CI_VENVS moves the folder), PY, start, install
# (uv from the shared cache, loud and fatal when a package cannot be had), and CPU torch 2.13.0 in the venv
# first (a plain `torch` would pull a CUDA build).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=.ci/_uv.sh
source "$ROOT/.ci/_uv.sh"
VENV="${LENS_RL_CI_VENVS:-$ROOT/.ci-venvs}/$STAGE"
PY="$VENV/bin/python"
start=$(date +%s)

install() {
    if ! "$UV" pip install -q --python "$PY" "$@"; then
        echo "!!!! .ci/$STAGE.sh: could not download or install: $* !!!!" >&2
        exit 1
    fi
}

new_venv "$VENV"
install 'torch==2.13.0'
echo "--- .ci/$STAGE.sh: torch installed in $(( $(date +%s) - start )) s"
