#!/usr/bin/env bash
# bundle.sh - build with the CUDA backend and collect what tests/gpu/run-all.sh
# needs on a GPU machine into one folder (default .gpu-bundle/, ignored by git):
#   bin/        pipeline-run, every test and benchmark executable
#   lib/        the non-system shared libraries they load (ldd), e.g. libyaml,
#               OpenBLAS, jansson; CUDA libraries too with --with-cuda-libs
#   tests.tsv   suite, name, executable, timeout and arguments of each meson test
#   plans/      examples/plans
#   gpu/        the PyTorch side: torch_eager.py, torch_gpt2.py, tutorial.py, torch_common.py,
#               kernel_table.py (ncu's kernels grouped by family) and san_classify.py
#               (whose kernels compute-sanitizer's reports are in)
#   torch/      bf16_check.py with crosscheck.py and st.py (the bf16 cross-check,
#               run by run-all.sh on cuda:0), gpt2_check.py and gpt2_model.py (the
#               GPT-2 check and the PyTorch GPT-2 of --part gpt2) with adamw_state.py
#               and check_args.py (what the check imports)
#   common/     checks.py, the counted checks these scripts import (../common)
#   tools/      libcuda_count.so, the LD_PRELOAD allocation counter
#               (tests/gpu/cuda_count.c, checked here by cuda_count_test.sh)
#   data/       Debian's Fashion-MNIST (dataset-fashion-mnist) when installed here,
#               for run-all.sh's training part (about 30 MB; --no-data leaves it out)
#   run-all.sh  the runner, parts/ its parts (sourced by it)
#   commit.txt  the commit the binaries were built from (git describe)
# Usage: tests/gpu/bundle.sh [--build DIR] [--out DIR] [--arch sm_90] [--with-cuda-libs]
#                            [--no-data] [--small]
# --small: for copying to a machine with little room or time: no data, and
# bin/ holds only what run-all.sh runs without --all (pipeline-run,
# gconv_probe, gpu_versions, bench_images and the cuda suite's tests); --all
# then reports the other tests as not in the bundle. Part 3 (Fashion-MNIST)
# finds no data in the folder. The folder is about 190 MB (84 of them lib/:
# OpenBLAS, and the image codecs libgd loads), so --small also writes it as
# one xz archive beside it, OUT.tar.xz (about 20 MB), the thing to copy:
# `tar -xJf .gpu-bundle.tar.xz` there gives the folder back. With Debian's
# Fashion-MNIST installed it also writes OUT-data.tar (30 MB), part 3's
# data alone: copied too, `tar -xf .gpu-bundle-data.tar` there puts it in
# the folder's data/, and part 3 runs.
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
small=0
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --with-cuda-libs) cuda_libs=1; shift ;;
        --no-data) with_data=0; shift ;;
        --small) with_data=0; small=1; shift ;;
        -h|--help) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "bundle.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" -Dcuda=enabled -Dgpu_arch="$arch" -Dbuildtype=release
fi
ninja -C "$build"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/plans" "$out/gpu" "$out/tools" "$out/torch" "$out/common"

# Tests as meson knows them: suite, name, executable, timeout, arguments.
# Arguments naming this machine's source tree or build folder (absolute, or an
# executable's path relative to the build folder) are written as
# @SRC@/path and @BIN@/name (an executable collected into bin/): run-all.sh
# puts in the source tree it is given and the bundle's bin/, so the file
# holds no path of this machine. A test that needs the build folder itself
# keeps @BUILD@, which run-all.sh reports as not runnable from a bundle;
# interpreters are @PATH@/name (found on the GPU machine's PATH), and a
# test's environment goes before it through env(1).
meson introspect --tests "$build" | python3 -c '
import json, os, sys, shutil
tests = json.load(sys.stdin)
out, root, build = sys.argv[1], os.path.realpath(sys.argv[2]), os.path.realpath(sys.argv[3])
def portable(a):
    if not a.startswith("/"):  # relative to the build folder: an executable built there?
        p = os.path.join(build, a)
        if "/" not in a or not (os.path.isfile(p) and os.access(p, os.X_OK)):
            return a
    p = os.path.realpath(a if a.startswith("/") else os.path.join(build, a))
    if p == build or p.startswith(build + "/"):
        rel = os.path.relpath(p, build)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            shutil.copy2(p, os.path.join(out, "bin"))
            return "@BIN@/" + os.path.basename(p)
        return "@BUILD@/" + rel if rel != "." else "@BUILD@"
    if p == root or p.startswith(root + "/"):
        rel = os.path.relpath(p, root)
        return "@SRC@/" + rel if rel != "." else "@SRC@"
    return a
with open(os.path.join(out, "tests.tsv"), "w") as f:
    for t in tests:
        exe = t["cmd"][0]
        if os.path.realpath(exe).startswith(build + "/"):
            shutil.copy2(exe, os.path.join(out, "bin"))
            exe = os.path.basename(exe)
        else:  # an interpreter (python3, bash): found on the GPU machine PATH
            exe = "@PATH@/" + os.path.basename(exe)
        args = [portable(a) for a in t["cmd"][1:]]
        env = ["%s=%s" % kv for kv in sorted((t.get("env") or {}).items())]
        if env:
            args = env + [exe if exe.startswith("@PATH@/") else "./" + exe] + args
            exe = "@PATH@/env"
        suites = [x.split(":")[-1] for x in t["suite"] or []]
        suite = "cuda" if "cuda" in suites else suites[0] if suites else "default"
        f.write("\t".join([suite, t["name"], exe, str(t.get("timeout") or 60)] + args) + "\n")
' "$out" "$root" "$build"
meson introspect --benchmarks "$build" | python3 -c '
import json, os, sys, shutil
for t in json.load(sys.stdin):
    shutil.copy2(t["cmd"][0], os.path.join(sys.argv[1], "bin"))
' "$out"
cp "$build/pipeline-run" "$out/bin/"
cp "$build/tests/bench/bench_images" "$out/bin/" # part 11's loader (run by a benchmark's script)
if [ $small = 1 ]; then
    keep=" pipeline-run gconv_probe gpu_versions bench_images $(awk -F'\t' '$1 == "cuda" { for (i = 3; i <= NF; i++) { f = $i; sub(/^@BIN@\//, "", f); printf "%s ", f } }' "$out/tests.tsv")"
    for f in "$out"/bin/*; do
        case $keep in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
    done
fi
cp -r "$root/examples/plans/." "$out/plans/" 2>/dev/null || true
cp "$root/tests/gpu/run-all.sh" "$out/"
mkdir -p "$out/parts"
cp "$root"/tests/gpu/parts/*.sh "$out/parts/"
# the commit the binaries were built from, for run-all.sh's results
git -C "$root" describe --always --dirty --abbrev=10 >"$out/commit.txt" 2>/dev/null ||
    echo "unknown" >"$out/commit.txt"
fashion=/usr/share/datasets/fashion-mnist
if [ $with_data = 1 ] && [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$out/data/fashion-mnist"
    cp "$fashion"/*-ubyte.gz "$out/data/fashion-mnist/"
fi
cp "$root"/tests/gpu/*.py "$out/gpu/"
cp "$root"/tests/torch/bf16_check.py "$root"/tests/torch/crosscheck.py "$root"/tests/torch/st.py \
    "$root"/tests/torch/gpt2_check.py "$root"/tests/torch/gpt2_model.py \
    "$root"/tests/torch/adamw_state.py "$root"/tests/torch/check_args.py "$out/torch/"
cp "$root"/tests/common/checks.py "$out/common/"

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
cuda='^(libcudart|libcudnn[^ ]*|libcublas|libcublasLt|libnvrtc[^ ]*|libnvJitLink|libcufft|libcurand|libnccl)\.so'
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
echo "bundle: $out ($(du -sh "$out" | cut -f1)); on the GPU machine run: $(basename "$out")/run-all.sh $(basename "$out") (--part quick first: see its header)"
if [ $small = 1 ]; then
    # written whole or not at all: an archive cut short is never left under its name
    archive=$out.tar.xz
    # one block with a dictionary larger than the folder: the binaries share
    # most of their bytes (each links the library whole), and xz finds the
    # repeats only within its dictionary (8 MiB at -6: 45 MB; 192 MiB: 20 MB);
    # one block is one thread
    tar -C "$(dirname "$out")" -cf - "$(basename "$out")" |
        xz -T1 --lzma2=preset=6,dict=192MiB >"$archive.part"
    mv "$archive.part" "$archive"
    echo "bundle: $archive ($(du -h "$archive" | cut -f1)), to copy; there: tar -xJf $(basename "$archive")"
    # part 3's data apart (gzip already: a plain tar), so that the archive
    # above stays small and part 3 can still run: unpacked beside the bundle
    # it lands in BUNDLE/data/fashion-mnist
    data_archive=$out-data.tar
    rm -f "$data_archive"
    if [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
        tar -C "$fashion" --transform "s|^\./|$(basename "$out")/data/fashion-mnist/|" \
            -cf "$data_archive.part" ./train-images-idx3-ubyte.gz ./train-labels-idx1-ubyte.gz \
            ./t10k-images-idx3-ubyte.gz ./t10k-labels-idx1-ubyte.gz
        mv "$data_archive.part" "$data_archive"
        echo "bundle: $data_archive ($(du -h "$data_archive" | cut -f1)), part 3's data; there: tar -xf $(basename "$data_archive")"
    else
        echo "bundle: no $data_archive ($fashion missing: apt-get install dataset-fashion-mnist); part 3 will report its data missing"
    fi
fi
