#!/usr/bin/env bash
# The first run's backend decision (scripts/gs-backend-choice.sh) for every (GPUs visible, CUDA
# build) combination, without a GPU: fake gs-bench binaries stand in for the two builds and
# GS_NGPU for nvidia-smi. Then every real binary's --version: exit 0, and the backend it reports
# is this build's.
# Usage: test_backend_choice.sh SRC_DIR WORK_DIR yes|no BINARY...
set -uo pipefail
src=$1 work=$2 expect=$3
shift 3
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

. "$src/scripts/gs-backend-choice.sh"

mkdir -p "$work"
for b in yes no; do
  printf '#!/bin/sh\necho "gs-bench 0.1.0 (cuda backend: %s)"\n' "$b" >"$work/gs-bench-$b"
  chmod +x "$work/gs-bench-$b"
done
printf '#!/bin/sh\nexit 2\n' >"$work/gs-bench-old"   # a build before --version existed
chmod +x "$work/gs-bench-old"

check() { # NGPU BUILD EXPECTED
  local got
  got=$(gs_backend_choice "$1" "$work/gs-bench-$2")
  [ "$got" = "$3" ] || fail "$1 GPU(s), cuda build $2: chose '$got', expected '$3'"
}
check 0 yes cpu
check 0 no cpu
check 1 yes cuda
check 8 yes cuda
check 1 no cpu
check 4 no cpu
check 2 old cpu
check 2 missing cpu

# GS_NGPU overrides nvidia-smi; run as a script it prints the choice.
[ "$(GS_NGPU=3 gs_gpu_count)" = 3 ] || fail "GS_NGPU=3 not honoured"
got=$(GS_NGPU=2 bash "$src/scripts/gs-backend-choice.sh" "$work/gs-bench-yes")
[ "$got" = cuda ] || fail "script with 2 GPUs and a CUDA build printed '$got'"
got=$(GS_NGPU=2 GS_BENCH="$work/gs-bench-no" bash "$src/scripts/gs-backend-choice.sh")
[ "$got" = cpu ] || fail "script with 2 GPUs and a CPU build printed '$got'"

# Every binary of this build: --version exits 0 and names itself and this build's backend.
for bin in "$@"; do
  name=$(basename "$bin")
  out=$("$bin" --version 2>&1)
  rc=$?
  [ "$rc" = 0 ] || fail "$name --version exited $rc: $out"
  case "$out" in
    "$name "[0-9]*" (cuda backend: $expect)") ;;
    *) fail "$name --version printed '$out', expected '$name X.Y.Z (cuda backend: $expect)'" ;;
  esac
done
# and the decision on the real gs-bench: cuda exactly when the build has it
for bin in "$@"; do
  if [ "$(basename "$bin")" = gs-bench ]; then
    want=cpu
    [ "$expect" = yes ] && want=cuda
    got=$(gs_backend_choice 1 "$bin")
    [ "$got" = "$want" ] || fail "1 GPU with this build's gs-bench: chose '$got', expected '$want'"
  fi
done

[ "$fails" = 0 ] && echo "backend choice: all checks passed"
exit $((fails > 0))
