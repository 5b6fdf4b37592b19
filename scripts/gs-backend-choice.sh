#!/usr/bin/env bash
# Which backend the first run uses: cuda when GPUs are visible AND the build has the CUDA backend
# (as its own `gs-bench --version` reports it), else cpu. Sourced by quickstart.sh and by
# tests/deploy/test_backend_choice.sh; run directly it prints the choice:
#   bash scripts/gs-backend-choice.sh [GS_BENCH]   ->  cuda | cpu
# Overrides (for tests): GS_NGPU (the GPU count; default: nvidia-smi -L), GS_BENCH (the gs-bench
# binary; default build/bin/gs-bench).

# The number of GPUs visible: $GS_NGPU when set, else what nvidia-smi lists (0 without it).
gs_gpu_count() {
  local n=0
  if [ -n "${GS_NGPU:-}" ]; then
    echo "$GS_NGPU"
    return 0
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  fi
  echo "${n:-0}"
}

# Status 0 when BENCH --version says the build has the CUDA backend.
gs_build_has_cuda() {
  local v
  v=$("$1" --version 2>/dev/null) || return 1
  case "$v" in
    *"(cuda backend: yes)"*) return 0 ;;
  esac
  return 1
}

# gs_backend_choice NGPU BENCH: prints cuda or cpu.
gs_backend_choice() {
  if [ "$1" -gt 0 ] && gs_build_has_cuda "$2"; then
    echo cuda
  else
    echo cpu
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  gs_backend_choice "$(gs_gpu_count)" "${1:-${GS_BENCH:-build/bin/gs-bench}}"
fi
