#!/usr/bin/env bash
# One GPU-machine session: build with CUDA, run the benchmarks, then the whole suite (CUDA tests
# enabled, integration tests also with CUDA workers). Logs go to $OUT (or ./gpu-out). For a host
# without a package registry, carry .devdeps (../shared/offline-deps/README.md):
#   source .devdeps/env.sh && bash bench/gpu-session.sh [bench|tests|all]
set -uo pipefail
what=${1:-all}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
jobs=$(nproc)
{ nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8; nproc; free -g | head -2; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$jobs" >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
B=build-gpu/bin
export GS_BIN_DIR=$PWD/$B
if [ "$what" = bench ] || [ "$what" = all ]; then
  {
    $B/gs-kbench
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 2 --backend cpu
    $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3
    $B/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 5
    $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2
    $B/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --no-fuse --repeat 2
  } 2>"$out/bench.err" | tee "$out/bench.jsonl"
  tail -5 "$out/bench.err"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  t1=$(date +%s)
  ctest --test-dir build-gpu -V -j12 --timeout 240 >"$out/tests.log" 2>&1
  GS_TEST_BACKEND=cuda ctest --test-dir build-gpu -V -R integration --timeout 240 >"$out/tests-cuda-integration.log" 2>&1
  grep -hE "Synthesis|tests passed|tests failed" "$out/tests.log" "$out/tests-cuda-integration.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/tests.log" "$out/tests-cuda-integration.log" | head -80
  echo "tests: $(( $(date +%s) - t1 )) s"
fi
