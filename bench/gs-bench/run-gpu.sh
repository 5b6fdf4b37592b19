#!/usr/bin/env bash
# On a GPU host, from the repository root (with .devdeps/ when the host lacks the -dev
# packages): build with CUDA, time gs-local-cluster's start on every visible GPU, run the seed
# benchmark on CUDA and CPU workers, and the client / deploy / integration suites with CUDA
# workers. Logs and JSON lines go to $OUT (default ./gpu-out).
# Usage: bash bench/gs-bench/run-gpu.sh [all|build|ready|bench|big|scale|tests]  (default all)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
mkdir -p "$out"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
jobs=$(nproc)
b=build-gpu
{
  nvidia-smi -L
  nvidia-smi topo -m
  ls /proc/driver/nvidia/gpus 2>&1
  for d in /proc/driver/nvidia/gpus/*; do
    bus=$(basename "$d"); echo "$bus numa_node $(cat /sys/bus/pci/devices/$bus/numa_node 2>/dev/null)"
  done
} >"$out/gpus.txt" 2>&1

stage=${1:-all}
want() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }

if want build; then
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build $b -j"$jobs" --target gsched_daemon gworker gs-local-cluster gs-bench \
  gsched-example test_client test_deploy test_integration >"$out/build.log" 2>&1 \
  || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
fi
export GS_BIN_DIR=$PWD/$b/bin

if want ready; then
# readiness of gs-local-cluster with one worker per GPU (5 starts)
for i in 1 2 3 4 5; do
  rm -f "$out/lc.out"
  t0=$(date +%s.%N)
  $b/bin/gs-local-cluster --port 0 >"$out/lc.out" 2>>"$out/lc.err" &
  pid=$!
  while ! grep -q "ready" "$out/lc.out" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || break
    sleep 0.002
  done
  t1=$(date +%s.%N)
  echo "start $i: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') s" | tee -a "$out/ready.txt"
  cat "$out/lc.out" >>"$out/ready.txt"
  kill -TERM $pid; wait $pid; echo "exit $?" >>"$out/ready.txt"
done
pgrep -a "gsched|gworker" >"$out/leftover.txt" || true
cat "$out/ready.txt"
fi

ngpu=$(nvidia-smi -L | grep -c '^GPU')
bench() { timeout 180 $b/bin/gs-bench seed "$@" >>"$out/bench.jsonl" 2>>"$out/bench.err"; }
tbench() { timeout 300 $b/bin/gs-bench tasks "$@" >>"$out/bench.jsonl" 2>>"$out/bench.err"; }
if want bench; then
  bench --n 20000 --chunk 1000 --backend cuda --workers 1 --repeat 3
  bench --n 20000 --chunk 1000 --backend cpu --workers 4 --repeat 3
  bench --n 20000 --chunk 1000 --backend cuda --workers "$ngpu" --repeat 3
  cat "$out/bench.jsonl"
fi
if want big; then
  bench --n 500000 --chunk 10000 --backend cuda --workers 1 --repeat 3
  bench --n 500000 --chunk 10000 --backend cuda --workers "$ngpu" --repeat 3
  bench --n 500000 --chunk 10000 --backend cuda --workers 1 --repeat 3 --no-fuse
  cat "$out/bench.jsonl"
fi
if want scale; then   # 1 M chunks: submission and runtime at scale
  bench --n 100000 --chunk 100 --backend cpu --workers 4
  bench --n 100000 --chunk 100 --backend cuda --workers "$ngpu"
  # 1 M tiny tasks end to end (issue 7 target: >= 1 M tasks/s with 4 workers)
  for shape in independent tree; do
    tbench --tasks 1000000 --workers 4 --backend cpu --shape "$shape" --repeat 3 --verbose
    tbench --tasks 1000000 --workers "$ngpu" --backend cuda --shape "$shape" --repeat 3 --verbose
  done
  cat "$out/bench.jsonl"
fi
if want tests; then
  for t in test_client test_deploy test_integration; do
    GS_TEST_BACKEND=cuda timeout 900 $b/tests/$t --verbose=0 -j4 >"$out/$t.log" 2>&1
    echo "$t rc=$?" >>"$out/tests.txt"
    grep -E "Synthesis|FAIL" "$out/$t.log" >>"$out/tests.txt"
  done
  cat "$out/tests.txt"
fi
