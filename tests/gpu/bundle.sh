#!/usr/bin/env bash
# bundle.sh - build with the CUDA backend and collect what tests/gpu/run-all.sh
# needs on a GPU machine into one folder (default .gpu-bundle/, ignored by git):
#   bin/        pipeline-run, every test and benchmark executable
#   lib/        the non-system shared libraries they load (ldd), e.g. libyaml,
#               OpenBLAS, jansson; CUDA libraries too with --with-cuda-libs
#   tests.tsv   suite, name, executable, timeout and arguments of each meson test
#   plans/      examples/plans
#   gpu/        the PyTorch side: torch_eager.py, tutorial.py, torch_common.py,
#               and kernel_table.py (ncu's kernels grouped by family)
#   torch/      bf16_check.py with crosscheck.py and st.py (the bf16 cross-check,
#               run by run-all.sh on cuda:0)
#   tools/      libcuda_count.so, the LD_PRELOAD allocation counter
#               (tests/gpu/cuda_count.c, checked here by cuda_count_test.sh)
#   data/       Debian's Fashion-MNIST (dataset-fashion-mnist) when installed here,
#               for run-all.sh's training part (about 30 MB; --no-data leaves it out)
#   run-all.sh  the runner
# Usage: tests/gpu/bundle.sh [--build DIR] [--out DIR] [--arch sm_90] [--with-cuda-libs]
#                            [--no-data]
# cuDNN and cuBLAS are left out by default: the GPU machine has them (CUDA
# toolkit or PyTorch's nvidia-* wheels) and they are large. The driver
# (libcuda) is never bundled.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-gpu-bundle
out=$root/.gpu-bundle
arch=sm_90
cuda_libs=0
with_data=1
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --with-cuda-libs) cuda_libs=1; shift ;;
        --no-data) with_data=0; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" -Dcuda=enabled -Dgpu_arch="$arch" -Dbuildtype=release
fi
ninja -C "$build"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/plans" "$out/gpu" "$out/tools" "$out/torch"

# Tests as meson knows them: suite, name, executable, timeout, arguments.
meson introspect --tests "$build" | python3 -c '
import json, os, sys, shutil
tests = json.load(sys.stdin)
out = sys.argv[1]
with open(os.path.join(out, "tests.tsv"), "w") as f:
    for t in tests:
        exe = t["cmd"][0]
        shutil.copy2(exe, os.path.join(out, "bin"))
        suite = t["suite"][0].split(":")[-1] if t["suite"] else "default"
        f.write("\t".join([suite, t["name"], os.path.basename(exe), str(t.get("timeout") or 60)]
                          + t["cmd"][1:]) + "\n")
' "$out"
meson introspect --benchmarks "$build" | python3 -c '
import json, os, sys, shutil
for t in json.load(sys.stdin):
    shutil.copy2(t["cmd"][0], os.path.join(sys.argv[1], "bin"))
' "$out"
cp "$build/pipeline-run" "$out/bin/"
cp -r "$root/examples/plans/." "$out/plans/" 2>/dev/null || true
cp "$root/tests/gpu/run-all.sh" "$out/"
fashion=/usr/share/datasets/fashion-mnist
if [ $with_data = 1 ] && [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$out/data/fashion-mnist"
    cp "$fashion"/*-ubyte.gz "$out/data/fashion-mnist/"
fi
cp "$root"/tests/gpu/*.py "$out/gpu/"
cp "$root"/tests/torch/bf16_check.py "$root"/tests/torch/crosscheck.py "$root"/tests/torch/st.py \
    "$out/torch/"

# The allocation counter, built for this machine's (and the GPU machine's)
# x86-64 glibc, and checked against a stand-in libcudart. A failed check is
# reported, not fatal: run-all.sh then reports the counts as failed.
cc=${CC:-cc}
if "$cc" -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out/tools/libcuda_count.so" \
    "$root/tests/gpu/cuda_count.c" -ldl; then
    cp "$root/tests/gpu/cuda_count.c" "$root/tests/gpu/cuda_count_test.sh" "$out/tools/"
    if ! "$root/tests/gpu/cuda_count_test.sh" "$out/tools/libcuda_count.so" >"$out/tools/cuda_count_test.log" 2>&1; then
        echo "bundle.sh: WARNING: the interposer self-test failed (see $out/tools/cuda_count_test.log)" >&2
    fi
    tail -1 "$out/tools/cuda_count_test.log"
else
    echo "bundle.sh: WARNING: could not build tests/gpu/cuda_count.c" >&2
    rm -f "$out/tools/libcuda_count.so"
fi

# Shared libraries: everything ldd resolves except the C runtime, the CUDA
# driver and (unless asked) the CUDA libraries.
skip='^(libc|libm|libdl|librt|libpthread|ld-linux[^ ]*|libgcc_s|libstdc\+\+|libcuda|libnvidia[^ ]*)\.so'
cuda='^(libcudart|libcudnn[^ ]*|libcublas|libcublasLt|libnvrtc[^ ]*|libnvJitLink|libcufft|libcurand)\.so'
want() { # file
    local base; base=$(basename "$1")
    [[ $base =~ $skip ]] && return 1
    [[ $cuda_libs = 0 && $base =~ $cuda ]] && return 1
    return 0
}
copy_deps() { # binary or library
    { ldd "$1" 2>/dev/null || true; } | awk '/=> \// { print $3 }' | while read -r lib; do
        want "$lib" || continue
        [ -e "$out/lib/$(basename "$lib")" ] && continue
        cp -L "$lib" "$out/lib/"
        copy_deps "$lib"
    done
}
for f in "$out"/bin/*; do copy_deps "$f"; done
if [ $cuda_libs = 1 ]; then
    # cuDNN and cuBLASLt load parts of themselves with dlopen: ldd cannot see them.
    for lib in "$(dirname "$(ldd "$out/bin/pipeline-run" | awk '/libcudnn.so/ { print $3 }')")"/libcudnn*.so.*[0-9]; do
        [ -e "$lib" ] && cp -L "$lib" "$out/lib/" && copy_deps "$lib"
    done
fi
missing=$(for f in "$out"/bin/*; do LD_LIBRARY_PATH=$out/lib ldd "$f" 2>/dev/null | grep 'not found' || true; done | sort -u)
[ -n "$missing" ] && echo "bundle.sh: unresolved here: $missing" >&2
echo "bundle: $out ($(du -sh "$out" | cut -f1)); on the GPU machine run: $(basename "$out")/run-all.sh $(basename "$out") (or in two parts: see its header)"
