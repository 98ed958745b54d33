#!/bin/sh
# venv.sh — the Python packages from PyPI that the tests use as real
# clients, in .venv of this checkout (git-ignored), on Debian's python3 with
# its packages visible (python3-websockets): the official `openai` and
# `anthropic` SDKs, pinned. Skipped when .venv already has it; without pip or a network it
# says so in one line and exits 0 (those tests then SKIP). Called by
# scripts/setup.sh.
set -u
OPENAI=3.57.0
ANTHROPIC=2.17.0

here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "import openai, anthropic, sys; sys.exit(openai.__version__ != '$OPENAI' or anthropic.__version__ != '$ANTHROPIC')" 2>/dev/null; then
    echo "setup: .venv has openai $OPENAI and anthropic $ANTHROPIC"
    exit 0
fi
if [ -z "$py" ] || ! "$py" -m venv --help >/dev/null 2>&1; then
    echo "setup: no python3 venv module here: the openai SDK tests will skip"
    exit 0
fi
if [ ! -x "$venv/bin/python3" ] && ! "$py" -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
    echo "setup: could not make $venv: the openai SDK tests will skip"
    exit 0
fi
if ! log=$("$venv/bin/python3" -m pip install -q --disable-pip-version-check "openai==$OPENAI" "anthropic==$ANTHROPIC" 2>&1); then
    echo "setup: could not install openai==$OPENAI and anthropic==$ANTHROPIC with pip ($(printf '%s' "$log" | tail -n 1)); the SDK tests will skip"
    exit 0
fi
echo "setup: .venv has openai $OPENAI and anthropic $ANTHROPIC"
