#!/usr/bin/env bash
# One GPU-machine session: build with CUDA, run the benchmarks, then the whole suite (CUDA tests
# enabled, integration tests also with CUDA workers). Logs go to $OUT (or ./gpu-out). For a host
# without a package registry, carry .devdeps (../shared/offline-deps/README.md):
#   source .devdeps/env.sh && bash bench/gpu-session.sh [bench|move|linalg|scale|robust|tests|svd|spill|dash|tls|mac|gather|sched|rand|io|zarrcuda|cufile|stencil|dtype|nanred|scan|mapfuse|intsum|restart|usertyped|v3|f32v3|f32v4|defaultv|svdbatch|all]
# bench: kernels + seed reductions; move: transfers, transpose-sum, slice3 (issue 5);
# linalg: dot, svd (issue 6); scale: tiny tasks, 1 M-chunk seed, worker kill (issue 7);
# robust: 300-job soak and socket fuzzing with CUDA workers (issue 12);
# svd: the Gram-path SVD against TSQR, its CUDA kernel and integration tests, dot (issue 19).
# spill: arrays beyond the workers' memory (issue 13).
# dash: dashboard overhead and hostile load, a performance report (issue 14).
# tls: gs-bench tasks with and without TLS on the control connections, alternating (issue 15).
# gather: slice3 on one GPU by each gather path (relay, direct, shm, auto), and the direct
#         gather tests with CUDA workers (issue 18 item 4).
# mac: payload MAC throughput and transfers with MACs off/on; CUDA integration with staged MACs (issue 12).
# sched: the scheduler's ceiling on tiny tasks, 1 M tasks on 4 CPU workers, and the dashboard's
#        overhead on them (issue 19 item 4, issue 14); needs gs-bench gsched gworker gs-local-cluster.
# rand: transposed tiles, version-2 normals, gs-kbench beside the limits (issue 19, session 6).
# io: npy/raw/zarr files written and read by the workers against dd (issue 18).
# cufile: cuFile reads (forced; compatibility mode without nvidia_fs) against pinned staging:
#   test_chunkops_cuda_file, the heartbeat counters, gs-bench io npy/raw per path (issue 18).
# stencil: the STENCIL kernel's tests and rate, gs-bench stencil on the GPUs and the CPU (issue 16).
# dtype: typed fused kernels and combines on CUDA against the CPU backend (with GS_RED_PROD:
#   chunkops_cuda/prod_*, and every reduction of test_cuda.c), typed kernel timings (issue 20);
#   targets test_chunkops_cuda gs-kbench.
# rand32: float32 random CPU == GPU (also in dtype's chunkops_cuda/*), gs-bench seed --dtype float32
#   (issue 20); targets test_chunkops_cuda gs-bench gsched gworker.
# many: gs_client_compute_many with CUDA workers (integration tests) and gs-bench many, one
#   compute_many against three computes (issue 20 item 4); targets gs-bench gsched_daemon gworker
#   gs-local-cluster test_integration.
# shape: reshape/ravel/eye/diag/tril/triu evaluated on the CUDA backend against plain-C references
#   (graph_shape/*_on_cuda) and gs-bench shape on one GPU and on the CPU (issue 20 item 3);
#   targets test_graph_shape gs-bench gsched_daemon gworker.
# nanred: np.prod and the any/all/nan* reductions on the GPU (issue 20 item 3): the product
#   kernels against the CPU (chunkops_cuda/prod_*), the composite reductions with CUDA workers
#   (integration_reduce_nan), gs-bench nanred on one GPU; targets test_chunkops_cuda gs-bench
#   gsched_daemon gworker gs-local-cluster test_integration.
# mapfuse: elementwise user kernels fused in chains on the GPU and gs-bench mapblocks (issue 16,
#   session 8); targets in its block.
# intsum: exact integer reductions (issue 20): integer-record reduce and combine kernels on CUDA
#   against the CPU bit for bit (chunkops_cuda_intsum/*), big-endian raw files read by CUDA
#   workers and their int64 sum/prod against numpy's (integration_files/big_endian*, issue 18),
#   gs-bench nanred --dtype int64 and gs-bench io --format raw --byteorder little|big on one
#   GPU; targets test_chunkops_cuda test_integration
#   gs-bench gsched_daemon gworker gs-local-cluster.
# restart: a user NVRTC kernel with an illegal address: GS_ERR_DEVICE_LOST in the backend
#   (sync, health, notify), then end to end on a CUDA worker under gs-local-cluster (job fails
#   naming the kernel and cudaErrorIllegalAddress, worker exits 75, restarted, next kernel exact)
#   and the CPU-knob restart tests (issue 16 item 4); targets test_chunkops_cuda_rtc_launch
#   test_deploy gsched_daemon gworker gs-local-cluster gs_test_kernels.
# zarrcuda: file reads on CUDA workers' file threads (issue 18, session 9): the file-thread
#   tests and integration_files with CUDA workers, gs-bench io zarr none/blosc and npy on one
#   GPU; targets test_worker test_integration gs-bench gsched_daemon gworker gs-local-cluster.
# usertyped: user kernels on every dtype (issue 16, session 9): NVRTC compiles the typed
#   prelude, typed map_blocks with an NVRTC kernel (fused, unfused) and a staged C kernel equal to
#   the CPU backend byte for byte, the shared 3x3 smoothing source (cuda_stencil, integration
#   stencil tests, gs-bench stencil --kernel cuda), the CPU-pool fusion hint on this host's
#   CPU (gs-bench mapblocks 16 blocks: declined; 64 blocks: fused); targets
#   test_chunkops_cuda_rtc test_chunkops_cuda_stencil test_graph_stencil test_integration
#   gs-bench gsched_daemon gworker gs-local-cluster gs_test_kernels.
# v3: version-3 normals (issue 19, session 11): CUDA == CPU bit for bit (pair kernels with
#   stride 1 and 2), gs-kbench fused_seed_v3 / philox_normal_v3 beside v1 (fused_seed_v1,
#   philox_normal), the seed (fused and --no-fuse) with --random 1 and --random 3, and with one pair per thread
#   (GS_CUDA_PAIRS_U=1; the default is 2); targets test_chunkops_cuda gs-kbench gs-bench gsched gworker
#   gs-local-cluster.
# f32v3: float32 version-3 normals (pairs at distance 2, docs/random.md section 11; issue 20's
#   float32 seed target): CPU == GPU bit for bit (chunkops_cuda/float32_v3*), gs-kbench's
#   fused_seed_f32_v1 against fused_seed_f32_v3, gs-bench seed --dtype float32 on one GPU with
#   --random 1 and --random 3 (n 500000, chunk 10000: 1 TB of float32), then the kbench and
#   --random 3 with GS_CUDA_F32PAIRS=0 (the CHAIN walk: the A/B of the pair kernels); targets
#   GS_TARGETS="test_chunkops_cuda gs-kbench gs-bench gsched_daemon gworker gs-local-cluster".
# f32v4: float32 version-4 normals (a stride-2 row reads whole Philox blocks, docs/random.md
#   section 12; issue 20's float32 seed target <= 0.30 s): CPU == GPU bit for bit
#   (chunkops_cuda/float32_v4*, and the v3 ones beside), gs-kbench fused_seed_f32_v3 beside
#   fused_seed_f32_v4, gs-bench seed --dtype float32 on one GPU with --random 4 and --random 3
#   (n 500000, chunk 10000), then the kbench and --random 4 with GS_CUDA_F32PAIRS=0 (the CHAIN
#   walk); the same GS_TARGETS as f32v3.
# defaultv: the default normals (session 12: float64 version 3, float32 version 4, with no
#   --random): the worker's GPU == CPU seed test on the default arrays (worker_cuda/*), the
#   float64 and float32 CUDA random tests, then gs-bench seed on one GPU by default and with
#   --random 1 (the old default) in float64 and float32 (n 500000, chunk 10000). Targets
#   GS_TARGETS="gs-bench gsched_daemon gworker gs-local-cluster test_chunkops_cuda test_worker".
# GS_TARGETS="a b ..." builds only those targets (a shorter build for one stage).
set -uo pipefail
what=${1:-all}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
jobs=$(nproc)
{ nvidia-smi -L; nvidia-smi topo -m 2>/dev/null | head -8; nproc; free -g | head -2; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
# .devdeps (Debian 12 packages under a pkg-config sysroot) has no OpenBLAS/LAPACKE; the GPU
# host's own ones are used. Their .pc files name /usr/... paths that pkg-config prefixes with
# the sysroot: point those paths back at the host's directories.
if [ -n "${PKG_CONFIG_SYSROOT_DIR:-}" ]; then
  for d in include/x86_64-linux-gnu/openblas-pthread lib/x86_64-linux-gnu/openblas-pthread; do
    if [ -d "/usr/$d" ] && [ ! -e "$PKG_CONFIG_SYSROOT_DIR/usr/$d" ]; then
      mkdir -p "$(dirname "$PKG_CONFIG_SYSROOT_DIR/usr/$d")"
      ln -s "/usr/$d" "$PKG_CONFIG_SYSROOT_DIR/usr/$d"
    fi
  done
fi
case ":${LD_LIBRARY_PATH:-}:" in *:/usr/local/cuda/lib64:*) ;; *)
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$jobs" ${GS_TARGETS:+--target $GS_TARGETS} >"$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
ngpu=$(nvidia-smi -L | grep -c '^GPU')
B=build-gpu/bin
export GS_BIN_DIR=$PWD/$B
if [ "$what" = bench ] || [ "$what" = all ]; then
  {
    $B/gs-kbench
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda
    $B/gs-bench seed --n 20000 --chunk 1000 --workers 2 --backend cpu
    # the seed on 1, 2, ..., ngpu workers (issue 17: scaling over one GPU)
    for w in $(seq 1 "$ngpu"); do
      $B/gs-bench seed --n 500000 --chunk 10000 --workers "$w" --backend cuda --repeat 5
    done
    $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2
    $B/gs-bench seed --n 500000 --chunk 10000 --workers "$ngpu" --backend cuda --no-fuse --repeat 2
  } 2>"$out/bench.err" | tee "$out/bench.jsonl"
  tail -5 "$out/bench.err"
fi
run() { echo "+ $*" >&2; timeout 240 "$@"; }
if [ "$what" = move ] || [ "$what" = all ]; then
  {
    run $B/gs-bench transfer --backend cuda --workers 2 --sizes 8,80,800 --repeat 5
    run $B/gs-bench transfer --backend cpu --workers 2 --sizes 8,80 --repeat 3
    run $B/gs-bench transpose-sum --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 5
    run $B/gs-bench slice3 --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3
  } 2>"$out/move.err" | tee "$out/move.jsonl"
  # the same transfers through a cluster logging at info: the workers' and gsched's own
  # measurements of each path (worker/ipc.c, scheduler bandwidth table)
  $B/gs-local-cluster --port 0 --log-level info >"$out/lc-info.out" 2>"$out/lc-info.err" &
  lcpid=$!
  for _ in $(seq 1 300); do grep -q ready "$out/lc-info.out" 2>/dev/null && break; sleep 0.1; done
  addr=$(grep -o 'tcp://[0-9.:]*' "$out/lc-info.out" | head -1)
  # the cluster's generated token, for the client (through the environment, not argv)
  GSCHED_TOKEN=$(sed -n 's/^gs-local-cluster token //p' "$out/lc-info.out")
  export GSCHED_TOKEN
  if [ -n "$addr" ]; then
    run $B/gs-bench transfer --scheduler "$addr" --workers "$ngpu" --sizes 8,80,800,2000 --repeat 5 \
      >>"$out/move.jsonl" 2>>"$out/move.err"
  fi
  kill -TERM $lcpid; wait $lcpid
  grep -h "over cuda-ipc\|over ucx\|CUDA IPC\|transfer .* -> " "$out/lc-info.err" | head -20
  tail -5 "$out/move.err"
fi
if [ "$what" = linalg ] || [ "$what" = all ]; then
  {
    run $B/gs-bench dot --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3
    run $B/gs-bench svd --rows 4000000 --cols 1000 --chunk 250000 --workers "$ngpu" --backend cuda --repeat 3
  } 2>"$out/linalg.err" | tee "$out/linalg.jsonl"
  tail -5 "$out/linalg.err"
fi
if [ "$what" = scale ] || [ "$what" = all ]; then
  {
    for shape in independent tree; do
      run $B/gs-bench tasks --tasks 1000000 --workers 4 --backend cpu --shape "$shape" --repeat 3
    done
    run $B/gs-bench seed --n 100000 --chunk 100 --workers 4 --backend cpu --repeat 2
    OUT="$out" GS_BIN_DIR="$PWD/$B" run bash bench/gs-bench/kill-worker.sh --backend cuda \
      --workers "$ngpu" --runs 3
    # one gsched, 256 CPU workers (docs/SCALING.md; needs ~4 GB of host memory)
    run bash scripts/gs-many-workers-bench.sh "$B" 256 100000
  } 2>"$out/scale.err" | tee "$out/scale.jsonl"
  tail -5 "$out/scale.err"
fi
# robust: 300-job soak and socket fuzzing with CUDA workers (issue 12)
if [ "$what" = robust ] || [ "$what" = all ]; then
  {
    run $B/gs-bench soak --jobs 300 --every 50 --warmup 50 --backend cuda --workers "$ngpu"
    GS_TEST_BACKEND=cuda run build-gpu/tests/sockfuzz --seconds 120 --rss-bound fail --daemon-log "$out/sockfuzz.daemons.log"
  } 2>"$out/robust.err" | tee "$out/robust.jsonl"
  tail -5 "$out/robust.err"
fi
if [ "$what" = spill ] || [ "$what" = all ]; then
  # issue 13: arrays beyond the workers' memory (persist F x the limit, then sum). The cpu runs
  # spill host memory to disk (--local-directory default: $TMPDIR); the cuda runs spill device
  # memory to host memory (worker/spill/host.c: host_spilled_* / host_unspilled_* in the JSON;
  # goal gb_per_s >= 25 on one H200)
  {
    run $B/gs-bench spill --backend cpu --factor 4 --limit-mb 1000 --workers 1
    run $B/gs-bench spill --backend cpu --factor 1.5 --limit-mb 4000 --workers 2
    run $B/gs-bench spill --backend cuda --factor 1.5 --workers 1
    run $B/gs-bench spill --backend cuda --factor 1.5 --workers 1 --limit-mb 4000 --repeat 3
    # the host pool's slabs page-locked by cudaHostAlloc (vs the default cudaHostRegister of
    # huge-page memory)
    GSCHED_HOST_POOL=alloc run $B/gs-bench spill --backend cuda --factor 1.5 --workers 1
    # device -> host -> disk (worker/spill/cascade.c): a 4 GB host tier under a 16 GB device,
    # 24 GB persisted: spilled_bytes / unspilled_bytes are the host <-> disk moves
    run $B/gs-bench spill --backend cuda --factor 1.5 --workers 1 --host-limit-mb 4000
  } 2>"$out/spill.err" | tee "$out/spill.jsonl"
  tail -5 "$out/spill.err"
  # the GPU tests of the host tier (1.5 x a 64 MiB device limit; a chunk beyond the device);
  # their "host tier:" line gives the page-locked pool's bytes and seconds (worker/spill/hpool.c)
  timeout 300 build-gpu/tests/test_worker --verbose --filter 'worker_cuda_spill/*' \
    >"$out/spill-tests.log" 2>&1
  GSCHED_HOST_POOL=alloc timeout 300 build-gpu/tests/test_worker --verbose \
    --filter 'worker_cuda_spill/persisted*' >>"$out/spill-tests.log" 2>&1
  grep -hE "PASS|FAIL|SKIP|CRASH|Synthesis|host tier|Assertion|message" "$out/spill-tests.log" | head -20
fi
if [ "$what" = dash ] || [ "$what" = all ]; then
  # the dashboard (issue 14): 1 M tiny tasks with the dashboard polled vs disabled, alternated;
  # a job's time with and without 1,000 slow clients and bad requests on the dashboard; a
  # report of the seed reduction on the GPUs
  {
    bash bench/dash-bench.sh build-gpu overhead 1000000 5 cpu
    bash bench/dash-bench.sh build-gpu load 1000000 3 cpu
    run $B/gs-bench seed --n 100000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3 \
      --report "$out/seed-report.html"
  } 2>"$out/dash.err" | tee "$out/dash.jsonl"
  tail -5 "$out/dash.err"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  t1=$(date +%s)
  ctest --test-dir build-gpu -V -j12 --timeout 240 >"$out/tests.log" 2>&1
  GS_TEST_BACKEND=cuda ctest --test-dir build-gpu -V -R integration --timeout 240 >"$out/tests-cuda-integration.log" 2>&1
  grep -hE "Synthesis|tests passed|tests failed" "$out/tests.log" "$out/tests-cuda-integration.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/tests.log" "$out/tests-cuda-integration.log" | head -80
  echo "tests: $(( $(date +%s) - t1 )) s"
fi
if [ "$what" = svd ]; then
  # svd: needs the targets gs-bench gs-kbench gsched gworker test_chunkops_cuda test_integration
  t1=$(date +%s)
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda_linalg/*' >"$out/svd-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_linalg/*' \
    >>"$out/svd-tests.log" 2>&1
  grep -hE "Synthesis|gram svd" "$out/svd-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/svd-tests.log" | head -40
  echo "svd tests: $(( $(date +%s) - t1 )) s"
  {
    run $B/gs-kbench --linalg-only
  } >"$out/svd-kbench.txt" 2>&1
  grep -E '"what"' "$out/svd-kbench.txt" | cut -c1-150
  S="svd --cols 1000 --chunk 250000 --workers 1 --backend cuda"
  {
    run $B/gs-bench $S --rows 4000000 --repeat 3
    GS_CUDA_GRAM=syrk run $B/gs-bench $S --rows 4000000 --repeat 2
    run $B/gs-bench $S --rows 2000000 --repeat 2
    run $B/gs-bench $S --rows 2000000 --repeat 2 --no-gram
    run $B/gs-bench $S --rows 4000000 --repeat 2 --no-gram
    # a zero column: the Gram path refuses it, gs_client_persist falls back to TSQR (s6-svdfb)
    run $B/gs-bench $S --rows 2000000 --repeat 2 --rank-deficient
    run $B/gs-bench dot --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3
  } 2>"$out/svd.err" | tee "$out/svd.jsonl"
  grep -E "failed|error" "$out/svd.err" | head -8
fi
# svdbatch: the tall SVD with the batched Gram (issue 19, session 13; GS_CUDA_GRAM=batched, the
# default now) against the blocked one (GS_CUDA_GRAM=blocked, the default before), alternating in
# one call: the CUDA linalg tests (GRAM of every method against the CPU), gs-kbench's Gram lines
# (block side x slices sweep), gs-bench svd 4 M x 1000 both ways, twice, then a run with a
# performance report (svdbatch-report.html: the task stream shows what the passes' barriers and
# no-op tasks cost). Both arms run the session-13 lowering (GSTEP adds the 16 Grams itself: no
# SUM task per pass), so the pair isolates the Gram method. Targets: GS_TARGETS="gs-bench gs-kbench gsched_daemon gworker gs-local-cluster
# test_chunkops_cuda test_integration".
if [ "$what" = svdbatch ]; then
  t1=$(date +%s)
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda_linalg/*' >"$out/svdbatch-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_linalg/*' \
    >>"$out/svdbatch-tests.log" 2>&1
  grep -hE "Synthesis|gram svd" "$out/svdbatch-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/svdbatch-tests.log" | head -40
  echo "svdbatch tests: $(( $(date +%s) - t1 )) s"
  run $B/gs-kbench --linalg-only >"$out/svdbatch-kbench.txt" 2>&1
  grep -E '"what":"(gram|gstep1|apply_gemm)' "$out/svdbatch-kbench.txt" | cut -c1-170
  S="svd --cols 1000 --chunk 250000 --workers 1 --backend cuda --rows 4000000"
  {
    for i in 1 2; do
      run $B/gs-bench $S --repeat 3
      GS_CUDA_GRAM=blocked run $B/gs-bench $S --repeat 3
    done
    # the batched method's other settings (pick by the kbench gram_b<B>_s<S> lines)
    GS_CUDA_GRAM_BLOCK=256 run $B/gs-bench $S --repeat 3
    GS_CUDA_GRAM_BLOCK=256 GS_CUDA_GRAM_SPLIT=16 run $B/gs-bench $S --repeat 3
    GS_CUDA_GRAM_SPLIT=16 run $B/gs-bench $S --repeat 3
    GS_CUDA_GRAM=strided run $B/gs-bench $S --repeat 3
    run $B/gs-bench $S --repeat 2 --report "$out/svdbatch-report.html"
  } 2>"$out/svdbatch.err" | tee "$out/svdbatch.jsonl" | cut -c1-260
  grep -E "failed|error" "$out/svdbatch.err" | head -8
fi
# mac: payload MACs on the data plane (issue 12): MAC throughput of this host's CPU (GMAC as used,
# HMAC-SHA256/512, BLAKE2b), then transfers with MACs off and on, alternating: cpu workers (UCX
# over loopback, every byte MACed) and cuda workers (one host: CUDA IPC, trusted, not MACed:
# expect no difference); then the integration suite with CUDA workers whose device chunks are
# staged and MACed (GSCHED_PAYLOAD_MAC=device). Needs: gs-mac-bench gs-bench gsched gworker
# gs-local-cluster test_integration.
if [ "$what" = mac ]; then
  {
    run $B/gs-mac-bench 256 5
    for r in 1 2 3; do
      for m in off on; do
        echo "{\"payload_mac\":\"$m\",\"round\":$r}"
        run env GSCHED_PAYLOAD_MAC=$m $B/gs-bench transfer --backend cpu --workers 2 --sizes 8,80,800 --repeat 5
        run env GSCHED_PAYLOAD_MAC=$m $B/gs-bench transfer --backend cuda --workers 2 --sizes 8,80,800 --repeat 5
      done
    done
  } 2>"$out/mac.err" | tee "$out/mac.jsonl"
  tail -5 "$out/mac.err"
  GSCHED_PAYLOAD_MAC=device GS_TEST_BACKEND=cuda ctest --test-dir build-gpu -V -R integration --timeout 240 \
    >"$out/tests-cuda-mac-device.log" 2>&1
  grep -hE "Synthesis|tests passed|tests failed" "$out/tests-cuda-mac-device.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/tests-cuda-mac-device.log" | head -40
fi
if [ "$what" = rand ]; then
  # rand (issue 19, session 6): transposed-tile kernels, version-2 normals, kernels beside their
  # limits. Needs the targets gs-bench gs-kbench gsched gworker test_chunkops_cuda.
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/transposed*' >"$out/rand-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/normal_v2*' >>"$out/rand-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda_plan/*' >>"$out/rand-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/*' >>"$out/rand-tests.log" 2>&1
  grep -hE "Synthesis" "$out/rand-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/rand-tests.log" | head -40
  run $B/gs-kbench --no-linalg >"$out/rand-kbench.jsonl" 2>&1
  grep -E '"what"' "$out/rand-kbench.jsonl" | cut -c1-220
  {
    run $B/gs-bench transpose-sum --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 5
    GS_CUDA_TTILE=0 run $B/gs-bench transpose-sum --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --random 1
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --random 2
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2 --random 1
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2 --random 2
  } 2>"$out/rand.err" | tee "$out/rand.jsonl"
  grep -E "failed|error" "$out/rand.err" | head -8
fi
if [ "$what" = tls ]; then
  # tls: needs the targets gs-bench gsched gworker; the CPU figures of a quiet host
  bash bench/tls-bench.sh build-gpu/bin 5 200000 2>"$out/tls.err" | tee "$out/tls.txt" | cut -c1-160
  # a 1 GB gather (x[::3] of 19400^2 float64 on 2 CPU workers) relayed through gsched, plain and TLS
  GS_TLS_BENCH="slice3 --n 19400 --chunk 1000 --gather-path relay --repeat 2" \
    bash bench/tls-bench.sh build-gpu/bin 3 2>>"$out/tls.err" | tee -a "$out/tls.txt" | cut -c1-400
fi
if [ "$what" = gather ]; then
  # gather: needs the targets gs-bench gsched_daemon gworker gs-local-cluster test_client test_integration
  {
    for p in relay direct shm auto; do
      run $B/gs-bench slice3 --n 40000 --chunk 10000 --workers 1 --backend cuda --gather-path $p --repeat 3
    done
    run $B/gs-bench slice3 --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --gather-path auto --repeat 3
  } 2>"$out/gather.err" | tee "$out/gather.jsonl" | cut -c1-400
  grep -E "failed|error|mismatch" "$out/gather.err" | head -8
  { build-gpu/tests/test_client --filter 'client_gather_direct/*'
    GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_gather/*'
  } >"$out/gather-tests.log" 2>&1
  grep -hE "Synthesis" "$out/gather-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/gather-tests.log" | head -40
fi
if [ "$what" = sched ]; then
  # sched: tasks/s of 1 M tiny tasks (target >= 5 M/s on a 16-core host), per-process CPU us/task
  # in each JSON line; then the dashboard overhead (>= 5 alternating pairs, median and spread)
  {
    run $B/gs-bench tasks --tasks 1000000 --workers 4 --backend cpu --repeat 5 --dashboard-address none
    run $B/gs-bench tasks --tasks 1000000 --workers 4 --backend cpu --shape tree --repeat 3 --dashboard-address none
    bash bench/dash-bench.sh build-gpu overhead 1000000 6 cpu
  } 2>"$out/sched.err" | tee "$out/sched.jsonl" | cut -c1-400
  tail -5 "$out/sched.err"
fi
if [ "$what" = io ]; then
  # io: array files read and written by the workers (issue 18); needs the targets gs-bench
  # gsched gworker test_integration. Files go to /tmp (never to $out).
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_files/*' \
    >"$out/io-tests.log" 2>&1
  grep -hE "Synthesis|\[(FAIL|SKIP)\].*files" "$out/io-tests.log"
  {
    for be in cuda cpu; do
      for f in "npy" "raw" "zarr --codec none" "zarr --codec zstd" "zarr --codec blosc" \
               "zarr --codec zstd --zarr-version 2"; do
        run $B/gs-bench io --format $f --n 20000 --chunk 5000 --workers 1 --backend $be --repeat 2 --dir /tmp
      done
    done
    # typed files (session 7): the array's own dtype written and read, no float64 conversion
    for dt in float32 uint8 bool; do
      for f in "npy" "zarr --codec blosc"; do
        run $B/gs-bench io --format $f --dtype $dt --n 20000 --chunk 5000 --workers 1 --backend cuda --repeat 2 --dir /tmp
      done
    done
  } 2>"$out/io.err" | tee "$out/io.jsonl"
  grep -E "failed|error|mismatch|staging" "$out/io.err" | head -8
fi
if [ "$what" = zarrcuda ]; then
  # zarrcuda: see the header
  GS_TEST_BACKEND=cuda timeout 120 build-gpu/tests/test_worker --filter 'worker_file_threads/*' \
    >"$out/zarrcuda-tests.log" 2>&1
  GS_TEST_BACKEND=cuda timeout 150 build-gpu/tests/test_integration --filter 'integration_files/*' \
    >>"$out/zarrcuda-tests.log" 2>&1
  grep -hE "Synthesis|\[(FAIL|SKIP)\]" "$out/zarrcuda-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/zarrcuda-tests.log" | head -30
  {
    for f in "zarr --codec none" "zarr --codec blosc" "npy"; do
      run $B/gs-bench io --format $f --n 20000 --chunk 5000 --workers 1 --backend cuda --repeat 2 --dir /tmp
    done
  } 2>"$out/zarrcuda.err" | tee "$out/zarrcuda.jsonl"
  grep -E "failed|error|mismatch|staging|file threads" "$out/zarrcuda.err" | head -8
fi
if [ "$what" = cufile ]; then
  # cufile (issue 18 item 2): cuFile reads into device memory against pinned staging. Targets:
  # GS_TARGETS="test_chunkops_cuda_file test_integration gs-bench gsched_daemon gworker
  # gs-local-cluster".
  # The host has cufile.h and libcufile but no nvidia_fs: auto stages, cufile runs cuFile's
  # compatibility mode (read_path "cufile-compat"). Files go to /tmp (never to $out).
  grep -h "cuFile" "$out/configure.log"
  build-gpu/tests/test_chunkops_cuda_file --verbose >"$out/cufile-tests.log" 2>&1
  for fp in pinned cufile; do
    GSCHED_FILE_PATH=$fp GS_TEST_BACKEND=cuda timeout 120 build-gpu/tests/test_integration \
      --filter 'integration_files/workers_report*' >>"$out/cufile-tests.log" 2>&1
  done
  grep -hE "Synthesis|\[(FAIL|SKIP)\]" "$out/cufile-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/cufile-tests.log" | head -40
  {
    for fp in pinned cufile; do
      for f in npy raw; do
        run env GSCHED_FILE_PATH=$fp $B/gs-bench io --format $f --n 20000 --chunk 5000 --workers 1 \
          --backend cuda --repeat 2 --dir /tmp
      done
    done
  } 2>"$out/cufile.err" | tee "$out/cufile.jsonl" | cut -c1-400
  grep -hE "file reads|failed|error|mismatch" "$out/cufile.err" | sort | uniq -c | head -12
fi
if [ "$what" = stencil ]; then
  # stencil (issue 16): the CUDA STENCIL kernel's tests, its kernel rate on one 10000^2 chunk,
  # and the seed's 3x3 smoothing of a 40000^2 array on one GPU (target <= 15 ms; the
  # bandwidth limit is 25.6 GB / 4.3 TB/s = 6 ms) and on all of them; the CPU backend against
  # a single-threaded C loop. Targets: GS_TARGETS="gs-bench gs-kbench gsched_daemon gworker
  # gs-local-cluster test_chunkops_cuda_stencil test_graph_stencil test_integration
  # test_chunkops_cuda_rtc test_chunkops_cuda_rtc_launch"
  build-gpu/tests/test_chunkops_cuda_stencil >"$out/stencil-tests.log" 2>&1
  build-gpu/tests/test_graph_stencil >>"$out/stencil-tests.log" 2>&1
  # users' CPU kernels on GPU workers, staged through host memory (needs test_integration)
  if [ -x build-gpu/tests/test_integration ]; then
    GS_TEST_BACKEND=cuda timeout 300 build-gpu/tests/test_integration --verbose \
      --filter 'integration_stencil/*' >>"$out/stencil-tests.log" 2>&1
  fi
  # users' CUDA C++ kernels (NVRTC): compile + disk cache, launch against a C reference, an
  # illegal address failing the sync (targets test_chunkops_cuda_rtc test_chunkops_cuda_rtc_launch)
  for t in test_chunkops_cuda_rtc test_chunkops_cuda_rtc_launch; do
    if [ -x build-gpu/tests/$t ]; then
      build-gpu/tests/$t --verbose >>"$out/stencil-tests.log" 2>&1 || true
    fi
  done
  # map_overlap with a CUDA C++ kernel: padded block assembled on the device, NVRTC kernel on
  # it, bit-equal to the built-in stencil for every boundary on odd chunkings (issue 16)
  build-gpu/tests/test_chunkops_cuda_stencil --verbose --filter 'cuda_stencil/map_overlap_cuda*' \
    >>"$out/stencil-tests.log" 2>&1 || true
  grep -hE "Synthesis" "$out/stencil-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/stencil-tests.log" | head -40
  {
    run $B/gs-kbench --no-linalg | grep -E '"(stencil_3x3|d2d_memcpy|copy_kernel)"'
    run $B/gs-bench stencil --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 5 --loop-max-mb 0
    run $B/gs-bench stencil --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 \
      --boundary periodic --loop-max-mb 0
    run $B/gs-bench stencil --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3 --loop-max-mb 0
    run $B/gs-bench stencil --n 8000 --chunk 2000 --workers 2 --backend cpu --repeat 3
    # the same smoothing as a CUDA C++ kernel through map_overlap (padded block on the device)
    run $B/gs-bench stencil --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 \
      --kernel cuda --loop-max-mb 0
  } 2>"$out/stencil.err" | tee "$out/stencil.jsonl"
  tail -5 "$out/stencil.err"
fi
if [ "$what" = dtype ]; then
  # dtype: needs the targets test_chunkops_cuda gs-kbench
  t1=$(date +%s)
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/*' >"$out/dtype-tests.log" 2>&1
  grep -hE "Synthesis" "$out/dtype-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/dtype-tests.log" | head -40
  echo "dtype tests: $(( $(date +%s) - t1 )) s"
  run $B/gs-kbench --no-linalg --reps 10 2>"$out/dtype-kbench.err" | tee "$out/dtype-kbench.jsonl" |
    grep -E '"(sum_1e8|philox_normal_store|typed_[a-z0-9_]*)"' | cut -c1-160
fi
if [ "$what" = rand32 ]; then
  # rand32: float32 random and random integers, CPU == GPU bit for bit, and the seed in float32
  # (issue 20 item 2); needs the targets test_chunkops_cuda gs-bench gsched gworker.
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/float32_random*' 2>&1 | tail -3
  {
    run $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda --dtype float32 --random 1
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --random 1
    run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --dtype float32 --random 1
  } 2>"$out/rand32.err" | tee "$out/rand32.jsonl" | cut -c1-300
  tail -4 "$out/rand32.err"
fi
if [ "$what" = many ]; then
  # many: several results from one graph on GPU workers (issue 20 item 4): the integration tests
  # (results byte-identical to separate computes, shared tasks once, typed results, failures
  # writing nothing), then one compute_many against three computes on one GPU and on all.
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_compute_many/*' \
    >"$out/many-tests.log" 2>&1
  grep -hE "Synthesis" "$out/many-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/many-tests.log" | head -40
  {
    run $B/gs-bench many --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3
    run $B/gs-bench many --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3
  } 2>"$out/many.err" | tee "$out/many.jsonl" | cut -c1-400
  tail -4 "$out/many.err"
fi
if [ "$what" = shape ]; then
  # shape: needs the targets test_graph_shape gs-bench gsched_daemon gworker
  build-gpu/tests/test_graph_shape --verbose --filter 'graph_shape/*_on_cuda' >"$out/shape-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/shape-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/shape-tests.log" | head -40
  {
    run $B/gs-bench shape --n 20000 --chunk 5000 --workers 1 --backend cuda --repeat 3
    run $B/gs-bench shape --n 4000 --chunk 1000 --workers 2 --backend cpu --repeat 2
  } 2>"$out/shape.err" | tee "$out/shape.jsonl" | cut -c1-220
  tail -4 "$out/shape.err"
fi
if [ "$what" = nanred ]; then
  # nanred: see the header
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/prod*' >"$out/nanred-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_reduce_nan/*' \
    >>"$out/nanred-tests.log" 2>&1
  grep -hE "Synthesis" "$out/nanred-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/nanred-tests.log" | head -40
  {
    run $B/gs-bench nanred --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --persist-y
    run $B/gs-bench nanred --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --persist-y --dtype float32
  } 2>"$out/nanred.err" | tee "$out/nanred.jsonl" | cut -c1-300
  tail -4 "$out/nanred.err"
fi
if [ "$what" = scan ]; then
  # scan: cumsum/cumprod (gs_array_cumulative, issue 20 item 3) on the GPU: the CUDA SCAN kernels
  # against the CPU's (chunkops_cuda_scan/*), the graph tests evaluated on CUDA
  # (graph_scan/*_on_cuda), the integration test with CUDA workers (integration_scan), then
  # gs-bench scan on one GPU along each axis, float64 and float32, and on the CPU beside a C loop.
  # Targets: test_chunkops_cuda_scan test_graph_scan test_integration gs-bench gsched_daemon
  # gworker gs-local-cluster.
  build-gpu/tests/test_chunkops_cuda_scan --verbose >"$out/scan-tests.log" 2>&1
  build-gpu/tests/test_graph_scan --verbose --filter 'graph_scan/*_on_cuda' >>"$out/scan-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_scan/*' \
    >>"$out/scan-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/scan-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/scan-tests.log" | head -40
  {
    run $B/gs-bench scan --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --axis 0
    run $B/gs-bench scan --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --axis 1
    run $B/gs-bench scan --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --axis 1 --dtype float32
    run $B/gs-bench scan --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 2 --axis 0 --op prod
    run $B/gs-bench scan --n 8000 --chunk 2000 --workers 4 --backend cpu --repeat 2 --axis 1 --c-loop
  } 2>"$out/scan.err" | tee "$out/scan.jsonl" | cut -c1-300
  tail -4 "$out/scan.err"
fi
if [ "$what" = mapfuse ]; then
  # mapfuse: elementwise user kernels fused in chains (issue 16 item 1, session 8): an NVRTC
  # kernel and a staged C kernel between fused kernels against the CPU backend
  # (cuda_stencil/an_elementwise_cuda_kernel_fused_*), the graph and integration tests with CUDA
  # workers, then gs-bench mapblocks (fused vs unfused vs the built-in square) on one GPU, on
  # all and on the CPU; targets test_chunkops_cuda_stencil test_graph_stencil test_integration
  # gs-bench gsched_daemon gworker gs-local-cluster.
  build-gpu/tests/test_chunkops_cuda_stencil --verbose --filter 'cuda_stencil/an_elementwise*' \
    >"$out/mapfuse-tests.log" 2>&1
  build-gpu/tests/test_graph_stencil --filter 'graph_map_fuse/*' >>"$out/mapfuse-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_map_fuse/*' \
    >>"$out/mapfuse-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/mapfuse-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/mapfuse-tests.log" | head -40
  {
    run $B/gs-bench mapblocks --n 20000 --chunk 5000 --workers 1 --backend cuda --repeat 3
    run $B/gs-bench mapblocks --n 20000 --chunk 5000 --workers 1 --backend cuda --kernel c --repeat 2
    run $B/gs-bench mapblocks --n 40000 --chunk 10000 --workers "$ngpu" --backend cuda --repeat 3
    run $B/gs-bench mapblocks --n 4000 --chunk 1000 --workers 2 --backend cpu --repeat 3
  } 2>"$out/mapfuse.err" | tee "$out/mapfuse.jsonl" | cut -c1-300
  tail -4 "$out/mapfuse.err"
fi
if [ "$what" = intsum ]; then
  # intsum: see the header
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda_intsum/*' >"$out/intsum-tests.log" 2>&1
  GS_TEST_BACKEND=cuda build-gpu/tests/test_integration --filter 'integration_files/big_endian*' \
    >>"$out/intsum-tests.log" 2>&1
  grep -hE "Synthesis" "$out/intsum-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/intsum-tests.log" | head -40
  {
    run $B/gs-bench nanred --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --persist-y --dtype int64
    run $B/gs-bench nanred --n 40000 --chunk 10000 --workers 1 --backend cuda --repeat 3 --persist-y
    for bo in little big; do
      run $B/gs-bench io --format raw --byteorder $bo --n 20000 --chunk 5000 --workers 1 --backend cuda --repeat 2 --dir /tmp
    done
  } 2>"$out/intsum.err" | tee "$out/intsum.jsonl" | cut -c1-300
  tail -4 "$out/intsum.err"
fi
if [ "$what" = restart ]; then
  # restart: see the header
  build-gpu/tests/test_chunkops_cuda_rtc_launch --verbose --filter 'chunkops_cuda_rtc_launch/an_illegal*' \
    >"$out/restart-tests.log" 2>&1
  GS_BIN_DIR=$PWD/build-gpu/bin timeout 300 build-gpu/tests/test_deploy --verbose \
    --filter 'deploy_restart/*' >>"$out/restart-tests.log" 2>&1
  grep -hE "Synthesis|SKIP.*(restart|illegal)" "$out/restart-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/restart-tests.log" | head -40
  grep -hE "lost the device|is lost|restarting it in|restarted \(pid" "$out/restart-tests.log" | head -12
fi
if [ "$what" = usertyped ]; then
  # usertyped: see the header
  build-gpu/tests/test_chunkops_cuda_rtc --verbose >"$out/usertyped-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda_stencil --verbose >>"$out/usertyped-tests.log" 2>&1
  build-gpu/tests/test_graph_stencil --filter 'graph_map*/*' >>"$out/usertyped-tests.log" 2>&1
  GS_TEST_BACKEND=cuda timeout 300 build-gpu/tests/test_integration \
    --filter 'integration_stencil/*' >>"$out/usertyped-tests.log" 2>&1
  timeout 300 build-gpu/tests/test_integration --filter 'integration_map_fuse/*' \
    >>"$out/usertyped-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/usertyped-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/usertyped-tests.log" | head -40
  {
    run $B/gs-bench stencil --n 20000 --chunk 5000 --workers 1 --backend cuda --kernel cuda --repeat 3
    run $B/gs-bench mapblocks --n 4000 --chunk 1000 --workers 1 --backend cpu --repeat 3
    run $B/gs-bench mapblocks --n 4000 --chunk 500 --workers 1 --backend cpu --repeat 3
  } 2>"$out/usertyped.err" | tee "$out/usertyped.jsonl" | cut -c1-300
  tail -4 "$out/usertyped.err"
fi
if [ "$what" = v3 ]; then
  # v3: see the header
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/normal_v*' >"$out/v3-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/*' >>"$out/v3-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda_plan/*' >>"$out/v3-tests.log" 2>&1
  grep -hE "Synthesis" "$out/v3-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/v3-tests.log" | head -40
  run $B/gs-kbench --no-linalg >"$out/v3-kbench.jsonl" 2>&1
  GS_CUDA_PAIRS_U=1 run $B/gs-kbench --no-linalg >"$out/v3-kbench-u1.jsonl" 2>&1
  grep -E '"(fused_seed_v1|fused_seed_v2|fused_seed_v3|philox_normal|philox_normal_v2|philox_normal_v3)"' "$out/v3-kbench.jsonl" | cut -c1-200
  echo "GS_CUDA_PAIRS_U=1:"
  grep -E '"(fused_seed_v2|fused_seed_v3|philox_normal_v2|philox_normal_v3)"' "$out/v3-kbench-u1.jsonl" | cut -c1-200
  GS_CUDA_PAIRS_U=1 build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/normal_v*' 2>&1 | grep -E "Synthesis|FAIL" 
  {
    for v in 1 3; do
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 5 --random $v
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --no-fuse --repeat 2 --random $v
    done
    GS_CUDA_PAIRS_U=1 run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --repeat 5 --random 3
  } 2>"$out/v3.err" | tee "$out/v3.jsonl" | cut -c1-330
  grep -E "failed|error" "$out/v3.err" | head -8
fi
if [ "$what" = f32v3 ]; then
  # f32v3: see the header
  build-gpu/tests/test_chunkops_cuda --verbose --filter 'chunkops_cuda/float32_v3*' \
    >"$out/f32v3-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/float32*' >>"$out/f32v3-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/f32v3-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/f32v3-tests.log" | head -40
  run $B/gs-kbench --no-linalg >"$out/f32v3-kbench.jsonl" 2>&1
  grep -E '"fused_seed' "$out/f32v3-kbench.jsonl" | cut -c1-240
  {
    for r in 1 3; do
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --dtype float32 --repeat 3 --random $r
    done
  } 2>"$out/f32v3.err" | tee "$out/f32v3.jsonl" | cut -c1-300
  tail -4 "$out/f32v3.err"
  # GS_CUDA_F32PAIRS=0: the CHAIN walk instead of the float32 pair kernels (fused_pairs_f32.cu)
  GS_CUDA_F32PAIRS=0 run $B/gs-kbench --no-linalg >"$out/f32v3-kbench-chain.jsonl" 2>&1
  grep -E '"fused_seed_f32' "$out/f32v3-kbench-chain.jsonl" | cut -c1-240
  GS_CUDA_F32PAIRS=0 run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda \
    --dtype float32 --repeat 3 --random 3 2>>"$out/f32v3.err" | tee -a "$out/f32v3.jsonl" | cut -c1-300
fi
if [ "$what" = f32v4 ]; then
  # f32v4: see the header
  build-gpu/tests/test_chunkops_cuda --verbose --filter 'chunkops_cuda/float32_v4*' \
    >"$out/f32v4-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/float32*' >>"$out/f32v4-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/f32v4-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/f32v4-tests.log" | head -40
  run $B/gs-kbench --no-linalg >"$out/f32v4-kbench.jsonl" 2>&1
  grep -E '"fused_seed_f32' "$out/f32v4-kbench.jsonl" | cut -c1-240
  {
    for r in 4 3; do
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --dtype float32 --random $r --repeat 3
    done
  } 2>"$out/f32v4.err" | tee "$out/f32v4.jsonl" | cut -c1-300
  tail -4 "$out/f32v4.err"
  # GS_CUDA_F32PAIRS=0: the CHAIN walk instead of the pair/block kernels (fused_pairs_f32.cu)
  GS_CUDA_F32PAIRS=0 run $B/gs-kbench --no-linalg --only fused_seed_f32_v1,fused_seed_f32_v3,fused_seed_f32_v4 \
    >"$out/f32v4-kbench-chain.jsonl" 2>&1
  grep -E '"fused_seed_f32' "$out/f32v4-kbench-chain.jsonl" | cut -c1-240
  GS_CUDA_F32PAIRS=0 run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda \
    --dtype float32 --random 4 --repeat 3 2>>"$out/f32v4.err" | tee -a "$out/f32v4.jsonl" | cut -c1-300
fi
if [ "$what" = defaultv ]; then
  # defaultv: see the header. The default seed should match --random 3 (float64, <= 0.40 s on
  # one H200) and --random 4 (float32, <= 0.30 s); "random" in each JSON line names the version.
  timeout 300 build-gpu/tests/test_worker --filter 'worker_cuda/*' >"$out/defaultv-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/normal_v*' >>"$out/defaultv-tests.log" 2>&1
  build-gpu/tests/test_chunkops_cuda --filter 'chunkops_cuda/float32_v4*' >>"$out/defaultv-tests.log" 2>&1
  grep -hE "Synthesis|SKIP" "$out/defaultv-tests.log"
  grep -hE -A12 "\[FAIL\]|CRASH" "$out/defaultv-tests.log" | head -40
  {
    run $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda
    run $B/gs-bench seed --n 20000 --chunk 1000 --workers 1 --backend cuda --dtype float32
    for d in float64 float32; do
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --dtype $d --repeat 5
      run $B/gs-bench seed --n 500000 --chunk 10000 --workers 1 --backend cuda --dtype $d --repeat 3 --random 1
    done
  } 2>"$out/defaultv.err" | tee "$out/defaultv.jsonl" | cut -c1-300
  grep -E "failed|error|warning" "$out/defaultv.err" | head -8
fi
