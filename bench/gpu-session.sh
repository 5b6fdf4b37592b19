#!/usr/bin/env bash
# One GPU-machine session: build with CUDA, run the whole suite (CUDA tests enabled), then the
# benchmarks. Logs go to $OUT (or ./gpu-out). Meant for a host without a package registry, with
# the offline dependencies carried in .devdeps (see ../shared/offline-deps/README.md):
#   source .devdeps/env.sh && bash bench/gpu-session.sh [tests|bench|all]
set -uo pipefail
what=${1:-all}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
jobs=$(nproc)
{
  nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8; nproc; free -g | head -2
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$jobs" >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
if [ "$what" = tests ] || [ "$what" = all ]; then
  ctest --test-dir build-gpu -V -j8 --timeout 400 >"$out/tests.log" 2>&1
  grep -E "Synthesis|tests passed|tests failed" "$out/tests.log"
  grep -E -A15 "\[FAIL\]|CRASH" "$out/tests.log" | head -60
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  B=build-gpu/bin
  {
    $B/gs-kbench
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 2 --backend cpu
    $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3
    $B/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 5
    $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2
    $B/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --no-fuse --repeat 2
  } 2>"$out/bench.err" | tee "$out/bench.jsonl"
  tail -20 "$out/bench.err"
fi
