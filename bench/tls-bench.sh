#!/usr/bin/env bash
# The cost of TLS on the control connections: `gs-bench tasks` against gsched + 2 CPU workers on
# loopback, alternating plain TCP and TLS (mutual: client certificates required) runs.
# Certificates are made here by the openssl CLI in a temporary directory.
#   bench/tls-bench.sh [BIN_DIR] [ROUNDS] [TASKS]   (defaults: build/bin 3 200000)
# GS_TLS_BENCH="slice3 --n 12000 --chunk 1000" runs that gs-bench command instead of tasks
# (x[::3] of a 12000^2 array: 384 MB gathered through the client's control connection).
set -euo pipefail
bin=${1:-build/bin}
rounds=${2:-3}
tasks=${3:-200000}
dir=$(mktemp -d /tmp/gs-tls-bench-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
(
  cd "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 \
    -subj /CN=bench-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key -out node.csr -subj /CN=node 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > node.ext
  openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out node.pem \
    -extfile node.ext 2>/dev/null
)
tls=(--tls-ca-file "$dir/ca.pem" --tls-cert "$dir/node.pem" --tls-key "$dir/node.key")
run() {  # $1: plain|tls
  local extra=() sched_extra=() addr
  [ "$1" = tls ] && extra=("${tls[@]}") && sched_extra=("${tls[@]}" --tls-require-client-cert)
  pids=()
  exec 3< <(exec "$bin/gsched" --port 0 --dashboard-address none "${sched_extra[@]}")
  pids+=($!)
  read -r line <&3
  addr=${line#gsched listening on }
  for i in 0 1; do
    "$bin/gworker" "$addr" --name "w$i" --backend cpu --nthreads 1 "${extra[@]}" 2>/dev/null &
    pids+=($!)
  done
  # shellcheck disable=SC2086
  "$bin/gs-bench" ${GS_TLS_BENCH:-tasks --tasks $tasks} --workers 2 --scheduler "$addr" "${extra[@]}" | tail -1 |
    sed "s/^/$1 /"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  exec 3<&-
}
for r in $(seq "$rounds"); do
  run plain
  run tls
done
