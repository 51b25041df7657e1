#!/usr/bin/env bash
# Set up (once per version of setup.cfg) and run the test suite.
# The virtualenv lives outside the clone, keyed by a hash of setup.cfg, so it is reused while the
# declared dependencies stay the same and rebuilt from setup.cfg as soon as they change.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
cache="${HEADSEARCH_VENV_CACHE:-$HOME/.cache/headsearch}"
key="$(sha256sum setup.cfg | cut -c1-16)"
venv="$cache/venv-$key"
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet -e '.[test,train,ray]'
    touch "$venv/.complete"
    # Each environment is several GB: drop those of other setup.cfg versions unused for two days.
    find "$cache" -maxdepth 2 -name .complete -path "$cache/venv-*" -mtime +2 -printf '%h\n' | xargs -r rm -rf
fi
touch "$venv/.complete"
# Point the cached environment at this checkout (cheap; no dependency changes).
log="$(mktemp)"
"$venv/bin/pip" install --quiet --no-deps -e . >"$log" 2>&1 || { cat "$log"; exit 1; }
rm -f "$log"
# Habits first: lint and layering fail the run before the (slower) tests start.
"$venv/bin/ruff" check --quiet .
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
exec "$venv/bin/python" -m pytest -q "$@"
