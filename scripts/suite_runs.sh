#!/usr/bin/env bash
# The README's `pytest`, run N times in a row on a fresh clone of HEAD, each line: start, beside a hog or not,
# pytest's own summary (count, failures, time). Beside a hog: two busy loops run for the whole of that run.
#
#   scripts/suite_runs.sh QUIET HOGGED [LOG]     e.g. scripts/suite_runs.sh 8 4 /tmp/suite_runs.log
#
# The clone uses this checkout's virtual environment (.venv): what CI installs, without installing it 12 times.
set -uo pipefail
quiet=${1:-1}
hogged=${2:-0}
log=${3:-/tmp/suite_runs.log}
here=$(cd "$(dirname "$0")/.." && pwd)
clone=$(mktemp -d /tmp/loadertop-suite.XXXXXX)
git clone -q "$here" "$clone/repo"
cd "$clone/repo" || exit 1
export PYTHONPATH="$clone/repo"  # the clone's code, in the tests' subprocesses too (.venv's editable install names this checkout)
. "$here/.venv/bin/activate"
echo "# $(git rev-parse --short HEAD) on $(nproc) CPUs: $quiet quiet, $hogged beside two busy loops" >>"$log"
for i in $(seq 1 $((quiet + hogged))); do
    hogs=()
    if [ "$i" -gt "$quiet" ]; then
        for _ in 1 2; do python3 -c "while True: pass" & hogs+=($!); done
    fi
    started=$(date +%H:%M:%S)
    python -m pytest -q -p no:cacheprovider >"$log.$i.txt" 2>&1  # whole, for the failures' details
    summary=$(grep -E "^FAILED|^ERROR|[0-9]+ (passed|failed)" "$log.$i.txt" | tr '\n' ' ')
    [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
    echo "run $i $started $([ ${#hogs[@]} -gt 0 ] && echo hog || echo quiet): $summary" >>"$log"
done
rm -rf "$clone"
