#!/usr/bin/env bash
# Install dependencies, build gsched, and run the main job: the seed reduction
# (normal(10,1,(n,n)) + 1)[::2, ::2].sum() on a local cluster — one worker per GPU when GPUs are
# present (the full 2 TB array, n = 500000, chunks 10000), else CPU workers at a size that suits
# the machine.
# Usage: bash scripts/quickstart.sh [extra gs-bench arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
if [ "$ngpu" -gt 0 ] && grep -q 'GS_HAVE_CUDA:INTERNAL=ON\|GS_HAVE_CUDA' build/CMakeCache.txt; then
  echo "gsched: $ngpu GPU(s): 2 TB seed reduction on $ngpu CUDA workers"
  exec build/bin/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3 "$@"
else
  workers=$jobs
  echo "gsched: no GPU: seed reduction on $workers CPU workers"
  exec build/bin/gs-bench seed --n 12000 --chunk 1000 --workers "$workers" --backend cpu "$@"
fi
