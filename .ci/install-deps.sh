#!/usr/bin/env bash
# Install what gsched needs on Debian/Ubuntu (idempotent; skips apt when everything is present).
set -euo pipefail
pkgs="build-essential cmake ninja-build pkg-config libuv1-dev libmsgpack-dev libucx-dev
      libcriterion-dev libopenblas-dev liblapacke-dev procps stress-ng
      libmicrohttpd-dev libjansson-dev"
# --fuzz: also clang and its libFuzzer runtime (for .ci/fuzz.sh)
if [ "${1:-}" = "--fuzz" ]; then
  pkgs="$pkgs clang"
  if apt-cache show libclang-rt-14-dev >/dev/null 2>&1 || dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
    pkgs="$pkgs libclang-rt-14-dev"
  fi
fi
# --browser: also chromium for the dashboard's browser test (large; .ci/test.sh skips that step
# with a message when it is absent)
if [ "${1:-}" = "--browser" ]; then
  pkgs="$pkgs chromium"
fi
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
