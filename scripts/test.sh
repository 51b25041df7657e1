#!/usr/bin/env bash
# Set up (once per version of setup.cfg) and run the test suite.
# The virtualenv lives outside the clone, keyed by a hash of setup.cfg, so it is reused while the
# declared dependencies stay the same and rebuilt from setup.cfg as soon as they change.
#
# Every clone on this machine shares that cache, and several may test at once, so:
# - a run holds a shared lock on venv-KEY.lock for as long as it uses venv-KEY (pytest inherits it);
# - one run builds venv-KEY, under the exclusive lock venv-KEY.build.lock (the others wait, then reuse it),
#   in a temporary folder beside it that is renamed into place (atomic) once complete: a venv-KEY folder
#   is always whole, and an interrupted build leaves only a .building-* folder;
# - old venvs (another setup.cfg, unused for two days) are removed only when their lock can be taken
#   exclusively (no run uses them), by renaming them out of the way first; leftovers of interrupted
#   builds only while nobody builds that key.
# The cached venv holds the dependencies; this checkout's code is imported through PYTHONPATH (set below
# for every process the tests start), so runs never change what the venv points at.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
cache="${HEADSEARCH_VENV_CACHE:-$HOME/.cache/headsearch}"
key="$(sha256sum setup.cfg | cut -c1-16)"
venv="$cache/venv-$key"
mkdir -p "$cache"

exec {in_use}>>"$cache/venv-$key.lock"
flock --shared "$in_use"

build_venv() {
    tmp="$(mktemp -d "$cache/.building-venv-$key.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT  # a failed or interrupted build leaves nothing behind
    chmod 755 "$tmp"
    "$PYTHON" -m venv --prompt "venv-$key" "$tmp"
    "$tmp/bin/python" -m pip install --quiet --upgrade pip
    "$tmp/bin/python" -m pip install --quiet -e '.[test,train,ray,export,bench]'
    # Console scripts and activate name the folder they were made in: name the final one.
    grep -rlIF "$tmp" "$tmp/bin" | xargs -r sed -i "s|$tmp|$venv|g"
    touch "$tmp/.complete"
    if [ -e "$venv" ]; then  # left by an older version of this script: never complete, never in use
        mv -T "$venv" "$(mktemp -u "$cache/.trash-venv-$key.XXXXXX")"
    fi
    mv -T "$tmp" "$venv"
    trap - EXIT
}

remove_unused_venvs() {
    local dir name
    # Each environment is several GB: drop those of other setup.cfg versions unused for two days.
    find "$cache" -maxdepth 2 -name .complete -path "$cache/venv-*" -mtime +2 -printf '%h\n' | while read -r dir; do
        name="$(basename "$dir")"
        [ "$name" = "venv-$key" ] && continue
        (flock --exclusive --nonblock 9 || exit 0
         trash="$(mktemp -u "$cache/.trash-$name.XXXXXX")"
         mv -T "$dir" "$trash" && rm -rf "$trash") 9>>"$cache/$name.lock"
    done
    # Interrupted builds (their builder is gone when the key's build lock is free), interrupted removals.
    for dir in "$cache"/.building-venv-*; do
        [ -d "$dir" ] || continue
        name="$(basename "$dir")"; name="${name#.building-}"; name="${name%.*}"
        (flock --exclusive --nonblock 9 || exit 0; rm -rf "$dir") 9>>"$cache/$name.build.lock"
    done
    for dir in "$cache"/.trash-venv-*; do  # renamed out of the way: nobody uses them
        [ -d "$dir" ] && { rm -rf "$dir" || true; }
    done
    return 0
}

if [ ! -f "$venv/.complete" ]; then
    exec {building}>>"$cache/venv-$key.build.lock"
    flock --exclusive "$building"
    if [ ! -f "$venv/.complete" ]; then  # not built by another run while this one waited
        build_venv
        remove_unused_venvs || echo "warning: could not remove every unused venv in $cache" >&2
    fi
    exec {building}>&-
fi
touch "$venv/.complete"  # last used now (for the removal of unused venvs)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Bytecode is cached as on any install (into this clone's __pycache__, which git ignores): an environment that says
# PYTHONDONTWRITEBYTECODE would make every `headsearch` process a test starts compile the project again (0.2 s each).
unset PYTHONDONTWRITEBYTECODE
# Habits first: lint and layering fail the run before the (slower) tests start.
"$venv/bin/ruff" check --quiet .
"$venv/bin/lint-imports" --no-cache >/dev/null || "$venv/bin/lint-imports" --no-cache
# One test process per core and one more, up to four (HEADSEARCH_TEST_WORKERS to choose; 0 runs them in this process),
# each test file in one process so its module fixtures (the libraries it indexes) are built once. A test process often
# waits (on a CLI it started, a server, a browser, a kill it times): on 2 cores two processes kept 1.66 cores busy and
# the suite took 11:25, three took 10:45 (idle 2-core Intel Xeon, the same tests).
workers="${HEADSEARCH_TEST_WORKERS:-$(( $(nproc) + 1 ))}"
[ "$workers" -gt 4 ] && workers=4
# The cores shared out among the test processes, as `index --workers` shares them among its workers: each process's
# model sessions ($HEADSEARCH_THREADS), OpenMP and BLAS pools get its share, not every core (two processes with a
# pool of every core each took 14% more CPU time for the same tests on two cores).
share=$(( $(nproc) / (workers > 0 ? workers : 1) ))
[ "$share" -lt 1 ] && share=1
export HEADSEARCH_THREADS="${HEADSEARCH_THREADS:-$share}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-$share}" \
    OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$share}"
exec "$venv/bin/python" -m pytest -q -n "$workers" --dist loadfile "$@"
