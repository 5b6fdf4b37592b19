#!/usr/bin/env bash
# SASS of the fused kernels on a machine without a GPU or cuobjdump: compiles chunkops/cuda/
# fused*.cu for sm_90 as CMake does (--fmad=false), keeps the cubins, and disassembles them with
# an nvdisasm given in $NVDISASM. CUDA 11.8's nvdisasm (Debian bookworm non-free package
# nvidia-cuda-toolkit; `apt-get download` it with a temporary sources list naming non-free,
# then `dpkg-deb -x` the .deb: only usr/bin/nvdisasm is needed) reads CUDA 13 cubins once the
# ELF header carries the old sm_90 flags (done here); it skips the instructions it does not
# know (VIADD and a few more), so listings miss those lines and counts are slightly low.
# Usage (repository root): NVDISASM=/path/to/nvdisasm bash bench/kbench/sass-local.sh OUTDIR [KERNEL-REGEX]
#   writes OUTDIR/fused.sass, OUTDIR/ptxas.txt, OUTDIR/ptxas-summary.txt and prints, for each
#   kernel matching KERNEL-REGEX (mangled name, default: the seed kernel), its loops' sizes.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: sass-local.sh OUTDIR [KERNEL-REGEX]}
re=${2:-k_flat_fullILi1ELi1ELi1ELi1ELi0ELi1E}
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
for f in chunkops/cuda/fused*.cu; do
  b=$(basename "$f" .cu)
  mkdir -p "$out/keep/$b"
  "$nvcc" -D_GNU_SOURCE -I. -Icommon/include -Igraph/include -O2 -DNDEBUG -arch=sm_90 \
    --fmad=false -Xptxas=-v -std=c++17 -x cu -c "$f" -o "$out/keep/$b/$b.o" \
    --keep --keep-dir "$out/keep/$b"
done 2>"$out/ptxas.txt"
python3 bench/kbench/ptxas-summary.py <"$out/ptxas.txt" | sort >"$out/ptxas-summary.txt"
python3 - "$out" "$re" <<'PY'
import glob, re, struct, subprocess, sys, os
out, pat = sys.argv[1], sys.argv[2]
sass = ""
for cubin in sorted(glob.glob(os.path.join(out, "keep", "*", "*.sm_90.cubin"))):
    d = bytearray(open(cubin, "rb").read())
    d[7], d[8] = 0x33, 7                      # OS/ABI and ABI version of CUDA 11 cubins
    struct.pack_into("<I", d, 0x30, 0x5a055a)  # e_flags: sm_90, virtual sm_90, 64-bit
    old = os.path.join(os.path.dirname(cubin), "old.cubin")
    open(old, "wb").write(d)
    sass += subprocess.run([os.environ["NVDISASM"], "-c", old], capture_output=True, text=True).stdout
open(os.path.join(out, "fused.sass"), "w").write(sass)
addr = lambda l: (lambda m: int(m.group(1), 16) if m else None)(re.match(r"\s+/\*([0-9a-f]{4,})\*/", l))
for part in re.split(r"\n//-+ \.text\.", sass):
    name = part.split(" ", 1)[0]
    if not re.search(pat, name): continue
    lines = part.split("\n")
    lab = {m.group(1): i for i, l in enumerate(lines) for m in [re.match(r"^(\.L_x_\d+):", l)] if m}
    print(name)
    for i, l in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", l)
        if m and m.group(1) in lab and lab[m.group(1)] < i:
            a0 = next(addr(x) for x in lines[lab[m.group(1)]:] if addr(x) is not None)
            print(f"  loop {m.group(1)}: {(addr(l) - a0) // 16 + 1} instructions (static)")
PY
