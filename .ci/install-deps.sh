#!/usr/bin/env bash
# Install what gsched needs on Debian/Ubuntu (idempotent; skips apt when everything is present).
set -euo pipefail
pkgs="build-essential cmake ninja-build pkg-config libuv1-dev libmsgpack-dev libucx-dev
      libcriterion-dev libopenblas-dev liblapacke-dev procps stress-ng libssl-dev
      libmicrohttpd-dev libjansson-dev libzstd-dev libblosc-dev python3-numpy python3-zarr"
# Optional groups (any number of flags):
#   --fuzz     clang and its libFuzzer runtime (for .ci/fuzz.sh)
#   --hosts    what the several-host tests use (tests/netns: namespaces, veth, tc; tests/deploy:
#              a real sshd and a real single-node Slurm with munge); they skip, saying why,
#              without them
#   --browser  chromium for the dashboard's browser test (large; .ci/test.sh skips that step
#              with a message when it is absent)
for flag in "$@"; do
  case "$flag" in
    --fuzz)
      pkgs="$pkgs clang"
      if apt-cache show libclang-rt-14-dev >/dev/null 2>&1 || dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
        pkgs="$pkgs libclang-rt-14-dev"
      fi ;;
    --hosts) pkgs="$pkgs iproute2 openssh-server openssh-client slurmctld slurmd slurm-client munge" ;;
    --browser) pkgs="$pkgs chromium" ;;
    *) echo "install-deps.sh: unknown option $flag (--fuzz, --hosts, --browser)" >&2; exit 2 ;;
  esac
done
missing=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "gsched: installing:$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
