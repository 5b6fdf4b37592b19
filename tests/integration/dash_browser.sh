#!/usr/bin/env bash
# Browser test of the dashboard: a real local cluster runs jobs while Debian's headless
# chromium loads the page; the DOM it renders must show the worker rows, a task-stream lane
# holding tasks and an operation's progress bar at 100 %. A screenshot is kept; its path is
# printed. Skips (exit 0 with a message) when chromium is not installed.
# Usage: tests/integration/dash_browser.sh BUILD_DIR [OUT_DIR]
set -uo pipefail
build=${1:?usage: dash_browser.sh BUILD_DIR [OUT_DIR]}
out=${2:-$build/dash-browser}
bin=$build/bin
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "dash-browser: SKIP: chromium is not installed (bash .ci/install-deps.sh --browser installs it)"
  exit 0
fi
mkdir -p "$out"
work=$(mktemp -d)
cluster_pid=""
cleanup() {
  [ -n "$cluster_pid" ] && kill "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
export GSCHED_TOKEN=dash-browser-$$

"$bin/gs-local-cluster" --port 0 --nworkers 2 --backend cpu --nthreads 2 --dashboard-address 127.0.0.1:0 \
  --bin-dir "$bin" --ready-timeout 60 >"$work/cluster.out" 2>"$work/cluster.err" &
cluster_pid=$!
for _ in $(seq 600); do
  grep -q "ready tcp://" "$work/cluster.out" 2>/dev/null && break
  kill -0 "$cluster_pid" 2>/dev/null || break
  sleep 0.1
done
sched=$(sed -n 's/^gs-local-cluster ready //p' "$work/cluster.out")
dash=$(sed -n 's/^gsched dashboard at //p' "$work/cluster.err")
if [ -z "$sched" ] || [ -z "$dash" ]; then
  echo "dash-browser: FAIL: the cluster did not start"; cat "$work/cluster.out" "$work/cluster.err"; exit 1
fi
echo "dash-browser: cluster $sched, dashboard $dash"

# one finished job (its graph at 100 %), then a longer one running while the page loads
"$bin/gs-bench" tasks --tasks 2000 --shape tree --scheduler "$sched" --workers 2 --repeat 1 >"$work/job1.json" || {
  echo "dash-browser: FAIL: first job"; exit 1; }
"$bin/gs-bench" tasks --tasks 400000 --scheduler "$sched" --workers 2 --repeat 5 >"$work/job2.json" 2>&1 &
job=$!

chrome() {  # extra args...   (bounded: a hung browser fails the test instead of the CI run)
  timeout 180 "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$(mktemp -d -p "$work")" \
    --window-size=1400,1100 "$@" 2>>"$work/chromium.err"
}
# the DOM after 6 s of the page's (virtual) time: a dozen polls
chrome --virtual-time-budget=6000 --dump-dom "$dash" >"$out/dom.html" || true
# the screenshot shows that DOM as rendered (a screenshot of the live page is taken at its load
# event, before the first poll answers; under a virtual-time budget it never completes while
# the page polls): the dumped DOM with the stylesheet inlined and the script left out
{
  sed -e '/<link rel="stylesheet"/d' -e 's|<script src="/static/dash.js"></script>||' "$out/dom.html" |
    sed -e '/<\/head>/{
r '"$(dirname "$0")/../../scheduler/dash/static/dash.css"'
i <style>
a </style>
}'
} >"$work/rendered.html"
chrome --screenshot="$out/dashboard.png" "file://$work/rendered.html" >/dev/null || true
wait "$job" || { echo "dash-browser: FAIL: second job"; cat "$work/job2.json"; exit 1; }

fail=0
nrows=$(grep -o 'class="worker-row"' "$out/dom.html" | wc -l)
ntasks=$(grep -o 'class="task"' "$out/dom.html" | wc -l)
nlanes=$(grep -o 'class="lane"' "$out/dom.html" | wc -l)
full=$(grep -o 'class="progress" data-pct="100.0"' "$out/dom.html" | wc -l)
[ "$nrows" -eq 2 ] || { echo "dash-browser: FAIL: $nrows worker rows, expected 2"; fail=1; }
[ "$nlanes" -ge 4 ] || { echo "dash-browser: FAIL: $nlanes task-stream lanes, expected one per worker thread (4)"; fail=1; }
[ "$ntasks" -gt 0 ] || { echo "dash-browser: FAIL: no task in the task stream"; fail=1; }
[ "$full" -gt 0 ] || { echo "dash-browser: FAIL: no progress bar at 100 %"; fail=1; }
echo "dash-browser: $nrows worker rows, $nlanes lanes, $ntasks tasks drawn, $full progress bars at 100 %"
if [ -s "$out/dashboard.png" ]; then
  echo "dash-browser: screenshot $(cd "$out" && pwd)/dashboard.png"
else
  echo "dash-browser: FAIL: no screenshot"; fail=1
fi
echo "dash-browser: DOM $(cd "$out" && pwd)/dom.html"
[ $fail -eq 0 ] || { tail -n 20 "$work/chromium.err"; exit 1; }
echo "dash-browser: PASS"
