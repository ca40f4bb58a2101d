# Sourced by every stage: uv (from a small tool venv of its own) and the package cache all stages share.
#
# The cache lies outside the clone, ${XDG_CACHE_HOME:-$HOME/.cache}/lens-rl-ci/uv (LENS_RL_CI_CACHE moves it),
# and holds each wheel once, unpacked; a venv gets hard links into it (UV_LINK_MODE=hardlink), so a second run
# installs torch from disk in seconds and the stages' three torches take the room of one. Hard links need the
# cache and the venvs on one filesystem; where they are not, uv copies (and says so).
# uv reads no pip.conf: pip's find-links (PIP_FIND_LINKS, or pip's own config) are handed to it, so the two
# install the same packages, and every index is searched for the best match, as pip does.
# Defines UV, and new_venv DIR (a fresh venv of this machine's python3).
CI_CACHE="${LENS_RL_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lens-rl-ci}"
export UV_CACHE_DIR="$CI_CACHE/uv" UV_LINK_MODE=hardlink UV_INDEX_STRATEGY=unsafe-best-match UV_PYTHON_DOWNLOADS=never
# uv, unlike pip, compiles no bytecode at install, and where PYTHONDONTWRITEBYTECODE is set (as on this CI machine)
# every process the stages start then compiled torch, transformers and vLLM from source again: 28 s for
# `import vllm` against 12 s, a vLLM engine's three processes 75 s against 36 s. Python writes the bytecode of
# what is imported, once, into the venv (new files beside the links, never into the cache).
unset PYTHONDONTWRITEBYTECODE
UV="$CI_CACHE/tool/bin/uv"
if ! "$UV" --version >/dev/null 2>&1; then
    rm -rf "$CI_CACHE/tool"
    if ! { python3 -m venv "$CI_CACHE/tool" && "$CI_CACHE/tool/bin/pip" install -q 'uv>=0.5,<1'; }; then
        echo "!!!! .ci: could not install uv (python3 -m pip install uv) !!!!" >&2
        exit 1
    fi
fi
_links="${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
if [ -n "$_links" ] && [ -z "${UV_FIND_LINKS:-}" ]; then
    export UV_FIND_LINKS="${_links// /,}"
fi

new_venv() {  # a fresh venv at $1 (whatever was there goes: its packages are hard links into the cache)
    rm -rf "$1"
    "$UV" venv -q --python "$(python3 -c 'import sys; print(sys.executable)')" "$1"
}
