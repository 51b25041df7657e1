#!/usr/bin/env bash
# Set up (once per version of setup.cfg) and run the test suite.
# The virtualenv lives outside the clone, keyed by a hash of setup.cfg, so it is reused while the
# declared dependencies stay the same and rebuilt from setup.cfg as soon as they change.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
key="$(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16)"
venv="${HEADSEARCH_VENV_CACHE:-$HOME/.cache/headsearch}/venv-$key"
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet -e '.[test]'
    touch "$venv/.complete"
fi
# Point the cached environment at this checkout (cheap; no dependency changes).
log="$(mktemp)"
"$venv/bin/pip" install --quiet --no-deps -e . >"$log" 2>&1 || { cat "$log"; exit 1; }
rm -f "$log"
exec "$venv/bin/python" -m pytest -q "$@"
