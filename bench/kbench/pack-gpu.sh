#!/usr/bin/env bash
# Build the CUDA backend's test and benchmark here and pack them, with the shared libraries
# they need beyond glibc and the CUDA driver, into one folder that can be carried to a GPU host
# (whose image may lack libuv/UCX/Criterion development packages). The CUDA toolkit's libraries
# (cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE, nvJitLink: hundreds of MB) are not packed: the GPU host
# has them in /usr/local/cuda/lib64, which must be on LD_LIBRARY_PATH there (run.sh adds it).
# There:
#     bash <folder>/run.sh          # GPU tests, gs-kbench, SASS statistics of the seed kernel
# Usage (repository root): bash bench/kbench/pack-gpu.sh [build-dir] [out-dir]
#   defaults: build-cuda, .gpu   (add the out-dir to .git/info/exclude before carrying it)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
out=${2:-.gpu}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DGS_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
fi
cmake --build "$build" -j2 --target test_chunkops_cuda gs-kbench

rm -rf "$out"
mkdir -p "$out/lib"
cp "$build/tests/test_chunkops_cuda" "$build/bin/gs-kbench" "$out/"
# every shared library outside glibc / the compiler runtime / the CUDA driver / the CUDA
# toolkit's libraries (cuBLAS, cuBLASLt, cuSOLVER and what it loads: cuSPARSE, nvJitLink; the
# host's /usr/local/cuda/lib64 has them)
for bin in "$out/test_chunkops_cuda" "$out/gs-kbench"; do
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$lib" in /usr/local/cuda*) continue ;; esac
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|ld-linux*|\
      libstdc++.so*|libgcc_s.so*|libcuda.so*|libcublas*.so*|libcusolver*.so*|libcusparse*.so*|\
      libnvJitLink*.so*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done

# register/spill report of the kernels, from this build's flags
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
for f in chunkops/cuda/fused*.cu; do
  "$nvcc" -std=c++17 -O3 -arch=sm_90 --fmad=false -Xptxas -v -I. -Igraph/include -Icommon/include \
    -c "$f" -o /dev/null || true
done 2>"$out/ptxas.txt"
python3 bench/kbench/ptxas-summary.py <"$out/ptxas.txt" | sort >"$out/ptxas-summary.txt" || true
grep -E "k_flat_full<1,1,1,1,0>|k_flat_full<1,1,2,2,0>|k_row<1,1,1,0>" "$out/ptxas-summary.txt" || true

cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs on the GPU host from the packed folder. Writes logs under $OUT when it is set.
cd "$(dirname "$0")"
# packed libraries first; cuBLAS/cuSOLVER are the host's (not packed)
export LD_LIBRARY_PATH="$PWD/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! ls /usr/local/cuda/lib64/libcusolver.so* >/dev/null 2>&1; then
  echo "run.sh: no cuSOLVER in /usr/local/cuda/lib64: add the CUDA libraries' folder to LD_LIBRARY_PATH" >&2
fi
logs=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv || true
echo "=== test_chunkops_cuda"
./test_chunkops_cuda --verbose=1 -j1 >"$logs/test_cuda.log" 2>&1
rc=$?
grep -E "^\[(FAIL|SKIP|----)\]|Synthesis" "$logs/test_cuda.log" | head -n 60
echo "test_chunkops_cuda exit $rc"
echo "=== gs-kbench"
./gs-kbench --reps 30 | tee "$logs/kbench.jsonl"
echo "=== SASS of the seed kernel (k_flat_full<1,1,1,1,SUM>) and the sum_1e8 kernel (k_flat_full<1,1,2,2,SUM>)"
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass gs-kbench >"$logs/kbench.sass" 2>/dev/null
  python3 - "$logs/kbench.sass" <<'PY'
import re, sys, collections
text = open(sys.argv[1]).read()
blocks = re.split(r"\n\s*Function : ", text)
for b in blocks:
    name = b.split("\n", 1)[0]
    if "k_flat_fullILi1ELi1ELi1ELi1ELi0E" not in name and "k_flat_fullILi1ELi1ELi2ELi2ELi0E" not in name:
        continue
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", b)
    c = collections.Counter(o.split(".")[0] for o in ops)
    print(name.strip(), "instructions:", len(ops))
    print(" ".join(f"{k}:{v}" for k, v in c.most_common(30)))
PY
fi
exit $rc
EOF
chmod +x "$out/run.sh"
du -sh "$out"
echo "packed into $out: carry it and run 'bash $out/run.sh' on the GPU host"
