#!/usr/bin/env bash
# run-all.sh - one run on a GPU machine yields every figure and diagnostic the
# project tracks: the libraries loaded, the CUDA test suite, pipeline-run's
# images/s against PyTorch's (eager and torch.compile) at the same batch, image
# size and precision, host waits and allocations per step, training accuracy,
# the bf16 cross-check, memory, kernels per step and the sanitizers; it writes
# them into a results folder, as a table (summary.txt) and as results.md in
# the form of the project's GPU results notes (commit, GPU, driver,
# precision, figures, the command of each).
#
# Usage: run-all.sh BUNDLE [options]     (BUNDLE made by tests/gpu/bundle.sh)
#   --part P         quick, 1 .. 11, gpt2, or all (1 to 11 and gpt2; default
#                    quick); see below
#   --batch N        global batch (default 128)      --size N   image size (224)
#   --steps N        pipeline-run steps (default 20; quick: 8)
#   --torch-steps N  timed PyTorch steps (default 20 after 5 warm-up steps;
#                    quick: 8 after 3)
#   --all            run every test suite, not only the CUDA one (part 1)
#   --source DIR     the project's source tree, for --all's tests that read it
#                    (default: the folder holding BUNDLE, when it is one)
#   --results DIR    write into DIR instead of a new BUNDLE/results-<time>;
#                    `latest` is the newest BUNDLE/results-*; the table and
#                    results.md then hold the rows of earlier parts written there
#   --copy-to DIR    copy the results folder into DIR at the end
#   --budget S       the invocation's time budget (default 350 s a part, 390
#                    for parts 1, 4 and gpt2, the sum for all; three times that in a dry
#                    run): nothing starts after it, and a command running is
#                    cut at it; what is left reads SKIPPED
#   --tutorial-steps N   pipeline-run steps per split in the tutorial sweep (8)
#   --dry-run-cpu    exercise the whole script on a machine without a GPU:
#                    every device mapped to cpu:0, tiny sizes, PyTorch on cpu
#                    (set PYTHON to a python3 with torch)
#
# Parts: each fits in 6 minutes of an H100 at the defaults. A part is cut in
# sections with a time budget each (section in parts/common.sh): a section
# whose time runs out stops its command and starts nothing more, the next one
# begins, and whatever did not run reads SKIPPED; the table and results.md
# are written either way. In the order of what they tell:
#   quick  (parts/quick.sh) the libraries and GPU loaded; the CUDA test suite,
#          most telling tests first, as far as 120 s go; the bf16 cross-check
#          on cuda:0 (1 stage); fp32 and TF32 (batch B) and bf16 NHWC (2B)
#          images/s, ours 1 stage against PyTorch eager measured in the same
#          run (goals: 1.15x, bf16 1.35x); host waits, allocations and graph launches per
#          steady step; compute-sanitizer memcheck over a 2-stage bf16 plan
#   2      (parts/part2.sh) host waits, allocations, graph and kernel launches
#          per steady step: GPT-2 124M bf16 (graphs on), then ResNet-50's
#          images/s, graphs on and off, 1 and 2 stages
#   1      (parts/part1.sh) the whole CUDA test suite; fp32 (cudnn.benchmark
#          off and on) and TF32 against PyTorch eager; ours with cuDNN's
#          batch norm and with 4 GiB of convolution workspace
#   4      (parts/part4.sh) bf16 at 2B and B against PyTorch eager
#          channels_last, torch.compile at 2B, NHWC against NCHW, 4 GiB of
#          convolution workspace against 512 MiB
#   5      (parts/part5.sh) the bf16 cross-check with 1, 2 and 4 stages; peak
#          memory bf16 against fp32; PyTorch's fp32 step against float64 (the
#          conditioning the CUDA tests' tolerances stand on)
#   9      (parts/part9.sh) compute-sanitizer memcheck, racecheck, synccheck
#          and initcheck over the native kernels' test and a 2-stage plan
#   7      (parts/part7.sh) 1, 2 and 4 stages on one GPU (fp32, bf16),
#          heuristic against measured algorithms, 2 replicas in one process
#   8      (parts/part8.sh) the PyTorch tutorial's split-size sweep
#   10     (parts/part10.sh) one step's kernels under ncu, bf16 and fp32, and
#          the GPU busy fraction
#   3      (parts/part3.sh) Fashion-MNIST training (needs BUNDLE/data)
#   6      (parts/part6.sh) the graph API support probe
#   11     (parts/part11.sh) the image loader: a folder of ImageNet-sized
#          JPEGs made in the run; decode + RandomResizedCrop(224) + flip +
#          normalise images/s, ours and torchvision's DataLoader, 1 and all
#          cores; ResNet-50 bf16 trained from the folder (data wait per step,
#          whether the loader limits the step) beside synthetic data; goals:
#          3x torchvision per core, the loader sustains the bf16 step
#   gpt2   (parts/gpt2.sh) GPT-2 on CUDA: test_cuda_gpt2; two stages on cuda:0 against PyTorch
#          float64 (tests/torch/gpt2_check.py), then GPT-2 124M tokens/s at
#          batch 8 x 1024, ours bf16 (native, and the f32 stand-ins), tf32 and fp32
#          against PyTorch eager and torch.compile, with peak memory; the
#          bf16 step's kernels under ncu by family
# One GPU machine lent for about 15 minutes (its start included): check that
# the bundle runs there, then run quick, then what time is left allows, each
# part adding to the same results and copying them out (a folder left on the
# machine is gone when it is handed back):
#   nvidia-smi; ldd BUNDLE/bin/pipeline-run BUNDLE/bin/gpu_versions | grep 'not found'
#   BUNDLE/run-all.sh BUNDLE --part quick --results /tmp/pp-gpu --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 2 --results /tmp/pp-gpu --copy-to "$OUT"
# Without a GPU (PYTHON: a python3 with torch and torchvision; part 3 needs the
# bundle's data):
#   tests/gpu/bundle.sh --small && .gpu-bundle/run-all.sh .gpu-bundle --part quick --dry-run-cpu
#
# Precision: fp32, TF32 off (ours: CUDNN_FMA_MATH convolutions,
# CUBLAS_DEFAULT_MATH; PyTorch: fp32_precision "ieee", or allow_tf32 False on
# older versions), except the rows marked tf32 (TF32 on for both: ours
# `precision: tf32`, PyTorch fp32_precision "tf32") and bf16 (ours `precision:
# bf16`: bf16 activations, fp32 master weights; PyTorch torch.autocast bf16
# around forward and loss, fp32 master weights). NVIDIA_TF32_OVERRIDE is
# reported, never set. Our runs measure convolution algorithms (as PyTorch's
# cudnn.benchmark does) and share them through PP_CUDNN_CACHE=RESULTS/cudnn-algos.txt,
# which stays in the results as the record of the algorithms chosen.
# Writes logs, JSON, CSV, the sweep chart, summary.txt and results.md under
# the results folder; every figure comes with the command that produced it
# (run from BUNDLE, LD_LIBRARY_PATH as printed under "libraries"). A piece
# that fails is reported and the run goes on. Never changes GPU settings
# (clocks, power, compute mode, MIG). Exit status 1 when a test or a step
# failed, else 0.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d'; }
bundle=${1:-}
if [ -z "$bundle" ] || [ "$bundle" = -h ] || [ "$bundle" = --help ]; then usage; exit 2; fi
shift
batch=128 size=224 steps=20 tsteps=20 all=0 part=quick results="" copy_to="" budget="" dry=0
source="" steps_given=0 tsteps_given=0
tut_steps=8
args_given="$*"
while [ $# -gt 0 ]; do
    case $1 in
        --batch) batch=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --steps) steps=$2; steps_given=1; shift 2 ;;
        --torch-steps) tsteps=$2; tsteps_given=1; shift 2 ;;
        --all) all=1; shift ;;
        --source) source=$2; shift 2 ;;
        --part) part=$2; shift 2 ;;
        --results) results=$2; shift 2 ;;
        --copy-to) copy_to=$2; shift 2 ;;
        --budget) budget=$2; shift 2 ;;
        --tutorial-steps) tut_steps=$2; shift 2 ;;
        --dry-run-cpu) dry=1; shift ;;
        *) echo "run-all.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done
all_parts="1 2 3 4 5 6 7 8 9 10 11 gpt2"
case " quick $all_parts all " in
    *" $part "*) ;;
    *) echo "run-all.sh: --part must be quick, 1 to 11, gpt2, or all" >&2; exit 2 ;;
esac
# a dry run on the CPU is slower than the GPU the budgets are made for
time_scale=1
[ $dry = 1 ] && time_scale=3
if [ -z "$budget" ]; then
    case $part in all) budget=3970 ;; 1|4|gpt2) budget=390 ;; *) budget=350 ;; esac
    budget=$((budget * time_scale))
fi
py=${PYTHON:-python3}

# The tutorial's experiment: batch 120 of 128x128, split sizes 1 to 60.
tut_batch=120 tut_size=128 tut_splits=1,3,5,8,10,12,20,40,60
tut_number=3 tut_repeat=5 twarm=5
if [ $dry = 1 ]; then
    batch=8 size=32 steps=3 tsteps=2 twarm=1 tut_steps=2
    tut_batch=24 tut_size=64 tut_splits=1,3,8,12 tut_number=1 tut_repeat=2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bundle=$(cd "$bundle" && pwd) || exit 2
bin=$bundle/bin
# the source tree, for --all's tests that read it: --source, else the folder
# holding the bundle when it is the project's checkout
if [ -n "$source" ]; then
    source=$(cd "$source" && pwd) || exit 2
elif [ -f "$bundle/../meson.build" ] && [ -d "$bundle/../tests" ]; then
    source=$(cd "$bundle/.." && pwd)
fi
if [ "$results" = latest ]; then
    results=$(find "$bundle" -maxdepth 1 -type d -name 'results-*' | sort | tail -1)
    [ -n "$results" ] || echo "run-all.sh: no earlier results folder; starting a new one"
fi
res=${results:-$bundle/results-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$res" || exit 1
res=$(cd "$res" && pwd)
rows_file=$res/rows.tsv
t_start=$SECONDS
failures=0
# the commit the bundle was built from (bundle.sh), else the source tree's
commit=$(cat "$bundle/commit.txt" 2>/dev/null)
if [ -z "$commit" ] && [ -n "$source" ] && command -v git >/dev/null 2>&1; then
    commit=$(git -C "$source" describe --always --dirty 2>/dev/null)
fi
echo "results: $res (part $part, budget ${budget}s, commit ${commit:-unknown})"

# The parts and their helpers: beside this script (the bundle's copy), or in
# the source tree's tests/gpu.
parts=$here/parts
[ -f "$parts/common.sh" ] || parts=$bundle/parts
if [ ! -f "$parts/common.sh" ]; then
    echo "run-all.sh: no parts/ beside the script nor in $bundle (bundle.sh copies it)" >&2
    exit 2
fi
# shellcheck source=parts/common.sh
. "$parts/common.sh"
# shellcheck source=parts/quick.sh
. "$parts/quick.sh"
# shellcheck source=parts/part1.sh
. "$parts/part1.sh"
# shellcheck source=parts/part2.sh
. "$parts/part2.sh"
# shellcheck source=parts/part3.sh
. "$parts/part3.sh"
# shellcheck source=parts/part4.sh
. "$parts/part4.sh"
# shellcheck source=parts/part5.sh
. "$parts/part5.sh"
# shellcheck source=parts/part6.sh
. "$parts/part6.sh"
# shellcheck source=parts/part7.sh
. "$parts/part7.sh"
# shellcheck source=parts/part8.sh
. "$parts/part8.sh"
# shellcheck source=parts/part9.sh
. "$parts/part9.sh"
# shellcheck source=parts/part10.sh
. "$parts/part10.sh"
# shellcheck source=parts/part11.sh
. "$parts/part11.sh"
# shellcheck source=parts/gpt2.sh
. "$parts/gpt2.sh"

# ---- machine and libraries (every part) -----------------------------------------

cur_part=$part
section versions
echo "== machine"
gpu="none" driver="none"
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,power.limit,compute_mode \
        --format=csv 2>&1 | tee "$res/nvidia-smi.txt"
else
    echo "nvidia-smi not found"
fi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
fi
[ $dry = 1 ] && ngpu=0
echo "visible GPUs: $ngpu"
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -1
tf32_env=${NVIDIA_TF32_OVERRIDE-unset}
echo "NVIDIA_TF32_OVERRIDE=$tf32_env"
"$py" - >"$res/python.txt" 2>&1 <<'PY'
try:
    import torch, torchvision
    print("torch", torch.__version__, "torchvision", torchvision.__version__,
          "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
except Exception as e:
    print("torch unavailable:", e)
PY
cat "$res/python.txt"

echo "== libraries"
libdirs=$bundle/lib
pylibs=$("$py" - 2>/dev/null <<'PY'
import os
dirs = []
for mod in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cuda_nvrtc",
            "nvidia.nvjitlink", "nvidia.nccl", "nvidia.cu13"):
    try:
        m = __import__(mod, fromlist=["_"])
        for p in m.__path__:
            if os.path.isdir(os.path.join(p, "lib")):
                dirs.append(os.path.join(p, "lib"))
    except Exception:
        pass
print(":".join(dirs))
PY
)
[ -n "$pylibs" ] && libdirs=$libdirs:$pylibs
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && libdirs=$libdirs:$d
done
# PyTorch runs with the library path it was given, as it is normally run.
if [ -n "${LD_LIBRARY_PATH+x}" ]; then
    pyrun=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" "$py")
else
    pyrun=(env -u LD_LIBRARY_PATH "$py")
fi
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee "$res/env.txt"
# the convolution algorithms our runs measure, shared between them and kept
# (not by the tests and the allocation counts: they measure on their own)
export PP_CUDNN_CACHE=$res/cudnn-algos.txt
unset PP_CUDNN_FIND
echo "PP_CUDNN_CACHE=$PP_CUDNN_CACHE" | tee -a "$res/env.txt"
missing=$(for f in "$bin"/*; do ldd "$f" 2>/dev/null | grep 'not found'; done | sort -u)
cudart=$(ldd "$bin/pipeline-run" 2>/dev/null | awk '/libcudart\.so/ { print $1 " => " $3 }')
echo "pipeline-run needs: ${cudart:-no shared libcudart (the allocation counter cannot see it)}"
if [ -n "$missing" ]; then
    echo "missing libraries:"; echo "$missing"
    row "libraries" "MISSING" "$(echo "$missing" | awk '{print $1}' | tr '\n' ' ')" "ldd bin/*"
else
    # cuBLAS, cuBLASLt and NCCL: pipeline-run opens them on first use (dlopen, the
    # same search path); gpu_versions links them, so its ldd names the files
    libbin=$bin/gpu_versions
    [ -x "$libbin" ] || libbin=$bin/pipeline-run
    for l in libcudart libcudnn.so libcublas.so libcublasLt.so libnccl.so; do
        ldd "$libbin" | grep -m1 "$l" || true
    done
    row "libraries" "ok" "$(ldd "$libbin" | awk '/libcudnn.so|libcublas.so|libcublasLt.so|libcudart.so|libnccl.so/ {print $3}' | tr '\n' ' ')" "ldd bin/$(basename "$libbin")"
fi
versions_row


torch_precision=""
case $part in
    quick) part_quick ;;
    all) for p in $all_parts; do "part$p"; done ;;
    *) "part$part" ;;
esac

# ---- the table and results.md ----------------------------------------------------

precision="fp32, TF32 off (ours: CUDNN_FMA_MATH + CUBLAS_DEFAULT_MATH; PyTorch: ${torch_precision:-fp32_precision ieee / allow_tf32 False}), except rows marked tf32 (TF32 on for both) or bf16 (ours precision: bf16, fp32 master weights; PyTorch torch.autocast bf16); NVIDIA_TF32_OVERRIDE=$tf32_env. Ours measures convolution algorithms per shape (PP_CUDNN_CACHE) unless a row says heuristic."
{
    echo
    echo "== summary: ${gpu}, driver ${driver}, $ngpu GPU(s) visible, commit ${commit:-unknown}"
    echo "   precision: $precision"
    echo "   batch $batch, ${size}x$size, SGD; tutorial batch $tut_batch, ${tut_size}x$tut_size; medians over timed steps (CUDA events)"
    echo "   commands run from the bundle folder; results in $res"
    [ $dry = 1 ] && echo "   DRY RUN ON THE CPU: the figures mean nothing"
    printf '%-6s  %-52s %-16s %s\n' "part" "what" "result" "figure"
    prev=""
    while IFS=$'\t' read -r p _ what result figure cmd; do
        printf '%-6s  %-52s %-16s %s\n' "${p#part }" "$what" "$result" "$figure"
        if [ -n "$cmd" ] && [ "$cmd" = "$prev" ]; then
            printf '%-6s    $ (the same command)\n' ""
        elif [ -n "$cmd" ]; then
            printf '%-6s    $ %s\n' "" "$cmd"
        fi
        prev=$cmd
    done <"$rows_file"
    echo "($(( SECONDS - t_start )) s this invocation, $failures failed item(s))"
} | tee "$res/summary.txt"

# every invocation into this results folder, for results.md
printf '%s\t%s\t%s\t%s\n' "$part" "$(basename "$0") BUNDLE $args_given" \
    "$(( SECONDS - t_start ))" "${commit:-unknown}" >>"$res/invocations.tsv"
md_args=(--command "$(basename "$0") BUNDLE $args_given" --commit "$commit" --gpu "$gpu"
    --driver "$driver" --ngpu "$ngpu" --elapsed "$(( SECONDS - t_start ))"
    --precision "$precision" --batch "$batch" --size "$size")
[ $dry = 1 ] && md_args+=(--dry)
if [ -f "$here/results_md.py" ]; then md=$here/results_md.py; else md=$bundle/gpu/results_md.py; fi
"$py" "$md" "$res" "${md_args[@]}" || echo "run-all.sh: results.md not written" >&2

if [ -n "$copy_to" ]; then
    mkdir -p "$copy_to" && cp -r "$res" "$copy_to/" && echo "copied to $copy_to/$(basename "$res")"
fi
[ "$failures" -eq 0 ]
