#!/usr/bin/env bash
# Install dependencies, build gsched, and run the main job: the seed reduction
# (normal(10,1,(n,n)) + 1)[::2, ::2].sum() on a local cluster — one worker per GPU when GPUs are
# present and the build has the CUDA backend (the full 2 TB array, n = 500000, chunks 10000),
# else CPU workers at a size that suits the machine. The choice is scripts/gs-backend-choice.sh
# (GS_NGPU overrides the GPU count).
# Usage: bash scripts/quickstart.sh [extra gs-bench arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/gs-backend-choice.sh
bash .ci/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
bench=build/bin/gs-bench
echo "gsched: $("$bench" --version)"
ngpu=$(gs_gpu_count)
if [ "$(gs_backend_choice "$ngpu" "$bench")" = cuda ]; then
  echo "gsched: $ngpu GPU(s): 2 TB seed reduction on $ngpu CUDA workers"
  exec "$bench" seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3 "$@"
else
  workers=$jobs
  if [ "$ngpu" -gt 0 ]; then
    echo "gsched: $ngpu GPU(s) visible but this build has no CUDA backend (is nvcc installed?)"
  else
    echo "gsched: no GPU"
  fi
  echo "gsched: seed reduction on $workers CPU workers"
  exec "$bench" seed --n 12000 --chunk 1000 --workers "$workers" --backend cpu "$@"
fi
