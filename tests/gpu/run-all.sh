#!/usr/bin/env bash
# run-all.sh - one run on a GPU machine: check the libraries, run the CUDA test
# suite, benchmark pipeline-run against PyTorch eager ResNet-50 at the same
# batch size, image size and precision, check how it scales with stages on one
# GPU, count CUDA allocations in steady-state steps, repeat the PyTorch
# model-parallel tutorial's split-size experiment, train on Fashion-MNIST,
# measure bf16 in NHWC against PyTorch's bf16 (eager and torch.compile) with
# kernel tables per step and sanitizer checks, and print a table last.
#
# Usage: run-all.sh BUNDLE [options]     (BUNDLE made by tests/gpu/bundle.sh)
#   --batch N        global batch (default 128)      --size N   image size (224)
#   --steps N        pipeline-run steps (default 20) --all      run every test suite
#   --source DIR     the project's source tree, for --all's tests that read it
#                    (default: the folder holding BUNDLE, when it is one)
#   --torch-steps N  timed PyTorch steps (default 20, after 5 warm-up steps)
#   --part 1|2|3|4|5|6|all  which part to run (default all; see below)
#   --results DIR    write into DIR instead of a new BUNDLE/results-<time>;
#                    `latest` is the newest BUNDLE/results-*; the final table
#                    then holds the rows of earlier parts written there too
#   --copy-to DIR    copy the results folder into DIR at the end
#   --budget S       start nothing new after S seconds (default 540 a part,
#                    3320 for all); what is left is reported as skipped
#   --tutorial-steps N   pipeline-run steps per split in the tutorial sweep (8)
#   --dry-run-cpu    exercise the whole script on a machine without a GPU:
#                    every device mapped to cpu:0, tiny sizes, PyTorch on cpu
#                    (set PYTHON to a python3 with torch)
#
# Parts (each under 10 minutes of an H100 at default settings):
#   part 1: libraries; CUDA test suite; fp32 images/s, ours 1 stage vs PyTorch
#           eager (cudnn.benchmark off and on); 1, 2 and 4 stages on cuda:0
#           with the same micro-batches (batch 128, split 32) and their ratios;
#           ours with cuDNN's heuristic algorithms (PP_CUDNN_FIND=0) against
#           measured ones; tf32 images/s, ours 1 stage vs PyTorch eager TF32
#   part 2: libraries; cudaMalloc/cudaFree calls, host synchronisations, graph
#           and kernel launches per steady-state step and images/s with CUDA
#           graphs on and off (LD_PRELOAD interposer, 1 and 2 stages,
#           --cuda-graphs on|off); the tutorial's experiment
#           (examples/plans/tutorial-layer2.yaml --sweep-split against
#           tests/gpu/tutorial.py's ModelParallel/PipelineParallelResNet50)
#   part 3: training on Fashion-MNIST (BUNDLE/data, copied by bundle.sh from
#           Debian's dataset-fashion-mnist): examples/plans/fashion-mnist-
#           resnet18.yaml and fashion-mnist-lenet.yaml for their 10 epochs on
#           cuda:0 (both stages on one GPU): test accuracy after the last
#           epoch (goals 0.90 and 0.89) and training seconds per epoch
#           (ResNet-18's goal: 5 s)
#   part 4: bf16 mixed precision (NHWC on CUDA), speed: images/s at batch B
#           and 2B (128, 256): ours 1 stage (--layout auto: NHWC, and --layout
#           nchw), 2 and 4 stages on cuda:0 (split 32), PyTorch eager bf16
#           autocast channels_last (cudnn.benchmark on) and its torch.compile,
#           with the goals ours / eager >= 1.15 and ours / compile >= 1.00;
#           2 data-parallel replicas sharing cuda:0 in one process (batch B)
#   part 5: bf16 correctness and the step's kernels (reads part 4's runs from
#           the same results folder, or runs the 1-stage plan itself): the
#           bf16 cross-check on cuda:0
#           (tests/torch/bf16_check.py --device cuda:0: ours within 3x PyTorch
#           autocast's error against float64); peak memory per stage, bf16
#           against fp32 (--json peak_bytes, a device's high-water mark: stages
#           sharing one GPU share one figure); one steady step's kernels under
#           ncu (PP_PROFILE_STEP=5 of 6 steps, ncu --profile-from-start off
#           --clock-control none --cache-control none: the clocks and caches
#           of a plain run, no GPU setting changed) grouped by family by
#           tests/gpu/kernel_table.py, for bf16 and fp32 at batch B, and the GPU busy fraction (kernel ms / median step ms
#           of the same plan without ncu); compute-sanitizer memcheck and
#           racecheck over bin/test_cuda_native and a 2-step bf16 ResNet-18
#           plan (64x64, batch 8, 2 stages on cuda:0). ncu and
#           compute-sanitizer rows read MISSING where the tools are not found
#   part 6: the graph API support probe: for each of ResNet-50's convolution
#           geometries at the batch size, every direction in bf16 and fp32
#           (IEEE), NHWC and NCHW, what cuDNN's graph API offers (engines
#           found, refused by numerical notes, timed; the one chosen and its
#           time), from bin/gconv_probe; its table in gconv-probe.out
# Invocations of under 10 minutes each, each adding to the first's results
# (a folder outside the bundle survives the bundle being copied again):
#   BUNDLE/run-all.sh BUNDLE --part 1 --results /tmp/pp-gpu-results --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 2 --results /tmp/pp-gpu-results --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 3 --results /tmp/pp-gpu-results --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 4 --results /tmp/pp-gpu-results --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 5 --results /tmp/pp-gpu-results --copy-to "$OUT"
#   BUNDLE/run-all.sh BUNDLE --part 6 --results /tmp/pp-gpu-results --copy-to "$OUT"
# When the GPU machine is lent for less time than six parts take (about 9
# minutes each), or the bundle must be copied somewhere small: bundle with
# `bundle.sh --small` (about 50 MB: no data, only the executables these parts
# run), check first in one short call that the bundle runs there
#   nvidia-smi; ldd BUNDLE/bin/pipeline-run | grep 'not found'
# (empty: every library resolves; run-all.sh adds PyTorch's nvidia-* library
# folders itself), then run the parts in the order of what they tell: 1 (the
# CUDA suite, fp32 against PyTorch), 2 (host waits, allocations and graph
# launches per steady step), 5 (bf16 correctness, memory, kernels), 4 (bf16
# speed), 6, 3. Give every part --copy-to: a results folder left on the
# machine is gone when the machine is handed back between calls.
# Without a GPU (PYTHON: a python3 with torch and torchvision; part 3 needs the
# bundle's data, parts 4 to 6 none):
#   tests/gpu/bundle.sh --no-data && .gpu-bundle/run-all.sh .gpu-bundle --part 4 --dry-run-cpu
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
# Writes logs, JSON, CSV, the sweep chart and summary.txt under the results
# folder; every figure in the table comes with the command that produced it
# (run from BUNDLE, LD_LIBRARY_PATH as printed under "libraries"). A piece
# that fails is reported and the run goes on. Never changes GPU settings
# (clocks, power, compute mode, MIG). Exit status 1 when a test or a step
# failed, else 0.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d'; }
bundle=${1:-}
if [ -z "$bundle" ] || [ "$bundle" = -h ] || [ "$bundle" = --help ]; then usage; exit 2; fi
shift
batch=128 size=224 steps=20 tsteps=20 all=0 part=all results="" copy_to="" budget="" dry=0
source=""
tut_steps=8
while [ $# -gt 0 ]; do
    case $1 in
        --batch) batch=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --torch-steps) tsteps=$2; shift 2 ;;
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
case $part in 1|2|3|4|5|6|all) ;; *) echo "run-all.sh: --part must be 1, 2, 3, 4, 5, 6 or all" >&2; exit 2 ;; esac
[ -n "$budget" ] || { [ "$part" = all ] && budget=3320 || budget=540; }
py=${PYTHON:-python3}

# The tutorial's experiment: batch 120 of 128x128, split sizes 1 to 60.
tut_batch=120 tut_size=128 tut_splits=1,3,5,8,10,12,20,40,60
tut_number=3 tut_repeat=5 twarm=5
if [ $dry = 1 ]; then
    batch=8 size=32 steps=3 tsteps=2 twarm=1 tut_steps=2
    tut_batch=24 tut_size=64 tut_splits=1,3,8,12 tut_number=1 tut_repeat=2
fi

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
echo "results: $res (part $part, budget ${budget}s)"

# ---- helpers -----------------------------------------------------------------

left() { echo $((budget - (SECONDS - t_start))); }

# Shortens a command for the table: paths relative to BUNDLE.
show() {
    local s out=""
    for s in "$@"; do
        s=${s//$bundle\//}
        case $s in LD_LIBRARY_PATH=*) s='LD_LIBRARY_PATH=(as run-all.sh was given)' ;; esac
        case $s in *[[:space:]\'\"*\$]*) s="'$s'" ;; esac
        out+="$s "
    done
    echo "${out% }"
}

# row WHAT RESULT FIGURE [COMMAND]: one line of the final table (rows.tsv;
# tab-separated, so no field but the last may be empty).
row() {
    local clean=() f
    for f in "$1" "$2" "${3:--}" "${4:-}"; do clean+=("$(printf '%s' "$f" | tr '\t\n' '  ')"); done
    printf 'part %s\t%s\t%s\t%s\t%s\n' "$cur_part" "${clean[@]}" >>"$rows_file"
    case $2 in FAIL*|MISSING*) failures=$((failures + 1)) ;; esac
}

# run NAME CAP CMD...: runs CMD (from BUNDLE) with stdout to NAME.out and
# stderr to NAME.log, limited to CAP seconds or what is left of the budget.
# Sets last_cmd. Returns CMD's status, 124 on timeout, 200 when skipped.
last_cmd=""
run() {
    local name=$1 cap=$2 l
    shift 2
    last_cmd=$(show "$@")
    l=$(left)
    if [ "$l" -lt 30 ]; then
        echo "skipped: $last_cmd (time budget spent)"
        echo "skipped: time budget spent" >"$res/$name.log"
        return 200
    fi
    [ "$cap" -gt $((l - 15)) ] && cap=$((l - 15))
    printf '%s\n' "$last_cmd" >"$res/$name.cmd"
    echo "\$ $last_cmd"
    (cd "$bundle" && timeout -k 10 "$cap" "$@") >"$res/$name.out" 2>"$res/$name.log"
}

# why RC NAME: a short reason for a failed run.
why() {
    case $1 in
        124|137) echo "timed out" ;;
        200) echo "skipped: time budget spent" ;;
        *) tail -n 3 "$res/$2.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200 ;;
    esac
}
result_of() { [ "$1" = 200 ] && echo SKIPPED || echo "FAIL($1)"; }

# jget FILE EXPR: a value from a JSON file (EXPR in Python over j), or "".
jget() {
    "$py" - "$1" "$2" 2>/dev/null <<'PY' || true
import json, sys
try:
    j = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    v = eval(sys.argv[2], {"j": j})
    print(("%.1f" % v) if isinstance(v, float) else v)
except Exception:
    pass
PY
}

# ratio A B: A / B to two decimals, or "".
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b }'; }
# ge X LIMIT: "ok" when X >= LIMIT, "BELOW" otherwise, "FAIL(no figure)" without X.
ge() { awk -v x="$1" -v l="$2" 'BEGIN { if (x == "") print "FAIL(no figure)"; else if (x + 0 >= l + 0) print "ok"; else print "BELOW" }'; }

# le X LIMIT: "ok" when X <= LIMIT, "ABOVE" otherwise, "FAIL(no figure)" without X.
le() { awk -v x="$1" -v l="$2" 'BEGIN { if (x == "") print "FAIL(no figure)"; else if (x + 0 <= l + 0) print "ok"; else print "ABOVE" }'; }

# pipeline-run's device map: everything on one GPU (or on cpu:0 in a dry run).
map_all() { [ $dry = 1 ] && echo "cuda:*=cpu:0" || echo "cuda:*=cuda:0"; }

# plan_for NAME BATCH SPLIT STEPS SIZE STAGES [PRECISION]: writes $res/NAME.yaml.
plan_for() {
    cat >"$res/$1.yaml" <<YAML
model: {name: resnet50, num_classes: 1000, in_channels: 3, stem: imagenet}
batch: {size: $2, split_size: $3}
schedule: 1f1b
precision: ${7:-fp32}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data: {format: synthetic, image_size: [$5, $5]}
seed: 1
steps: $4
stages:
$6
YAML
}
stages1="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}"
stages2="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}
  - {device: cuda:1, layers: [layer3, layer4, avgpool, fc]}"
# The cuts of examples/plans/resnet50-4gpu.yaml.
stages4="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2.0]}
  - {device: cuda:1, layers: [layer2.1, layer2.2, layer2.3, layer3.0, layer3.1]}
  - {device: cuda:2, layers: [layer3.2, layer3.3, layer3.4, layer3.5]}
  - {device: cuda:3, layers: [layer4, avgpool, fc]}"

# pr NAME PLAN [ARGS...]: pipeline-run PLAN --json; sets pr_ips and pr_fig.
# Variables in the array pr_env (VAR=VALUE) go to its environment.
pr_ips="" pr_fig="" pr_env=()
pr() {
    local name=$1 plan=$2 rc
    shift 2
    pr_ips="" pr_fig=""
    if [ ${#pr_env[@]} -gt 0 ]; then
        run "pr-$name" 240 env "${pr_env[@]}" "$bin/pipeline-run" "$plan" --json "$@"
    else
        run "pr-$name" 240 "$bin/pipeline-run" "$plan" --json "$@"
    fi
    rc=$?
    if [ $rc -ne 0 ]; then
        pr_fig=$(why $rc "pr-$name")
        echo "pipeline-run $name: $(result_of $rc): $pr_fig"
        return $rc
    fi
    pr_ips=$(jget "$res/pr-$name.out" 'j["images_per_s"]')
    pr_fig=$(jget "$res/pr-$name.out" '"%.1f img/s, %.1f ms/step median (min %.1f), %d micro-batch(es) of %d, bubble %.2f" % (j["images_per_s"], j["step_ms"]["median"], j["step_ms"]["min"], j["micro_batches"], j["split_size"], j["bubble_frac"])')
    echo "pipeline-run $name: $pr_fig"
    if [ -z "$pr_ips" ]; then
        pr_fig="no JSON summary on stdout (see pr-$name.out)"
        return 1
    fi
}

# ---- machine and libraries (every part) -----------------------------------------

cur_part=$part
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
    for l in libcudart libcudnn.so libcublas.so; do
        ldd "$bin/pipeline-run" | grep -m1 "$l" || true
    done
    row "libraries" "ok" "$(ldd "$bin/pipeline-run" | awk '/libcudnn.so|libcublas.so|libcudart.so/ {print $3}' | tr '\n' ' ')" "ldd bin/pipeline-run"
fi

# ---- part 1: tests, fp32 throughput against PyTorch, stages on one GPU -----------

part1() {
    cur_part=1
    echo "== tests"
    local pass=0 fail=0 skip=0 suite name exe timeout args log rc r l why
    while IFS=$'\t' read -r suite name exe timeout args; do
        [ "$all" = 1 ] || [ "$suite" = cuda ] || continue
        log=$res/test-$name.log
        l=$(left)
        if [ "$l" -lt 60 ]; then
            row "test $suite/$name" "SKIPPED" "time budget spent" "bin/$exe $args"
            continue
        fi
        [ "$timeout" -gt $((l - 45)) ] && timeout=$((l - 45))
        # the bundle's placeholders (bundle.sh): interpreters from PATH, the
        # bundle's executables, the source tree
        case $exe in @PATH@/*) exe=${exe#@PATH@/} ;; *) exe=./$exe ;; esac
        args=${args//@PATH@\//}
        args=${args//@BIN@/$bin}
        why=""
        if [[ $exe == ./* ]] && [ ! -x "$bin/$exe" ]; then why="not in the bundle (bundle.sh --small)"
        elif [[ $args == *@BUILD@* ]]; then why="needs the build folder"
        elif [[ $args == *@SRC@* ]] && [ -z "$source" ]; then why="needs the source tree (--source DIR)"
        fi
        if [ -n "$why" ]; then
            row "test $suite/$name" "SKIPPED" "$why" "cd bin && $exe $args"
            skip=$((skip + 1))
            continue
        fi
        args=${args//@SRC@/$source}
        # shellcheck disable=SC2086
        (cd "$bin" && timeout -k 10 "$timeout" env -u PP_CUDNN_CACHE $exe $args) >"$log" 2>&1
        rc=$?
        case $rc in
            0) pass=$((pass + 1)); r=PASS ;;
            77) skip=$((skip + 1)); r=SKIP ;;
            *) fail=$((fail + 1)); r="FAIL($rc)" ;;
        esac
        printf '%-8s %-24s %s\n' "$r" "$suite/$name" "$(tail -1 "$log")"
        row "test $suite/$name" "$r" "$(tail -1 "$log")" "cd bin && $exe $args"
    done <"$bundle/tests.tsv"
    echo "$pass passed, $fail failed, $skip skipped"

    echo "== fp32 throughput: pipeline-run 1 stage vs PyTorch eager (batch $batch, ${size}x$size)"
    local map; map=$(map_all)
    plan_for r50-1stage-full "$batch" "$batch" "$steps" "$size" "$stages1"
    local ours=""
    if pr 1stage-full "$res/r50-1stage-full.yaml" --steps "$steps" --device-map "$map"; then
        ours=$pr_ips
        row "ours fp32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours fp32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    local tdev=cuda:0 bench out ips
    [ $dry = 1 ] && tdev=cpu
    for bench in 0 1; do
        run "torch-eager-bench$bench" 240 "${pyrun[@]}" "$bundle/gpu/torch_eager.py" --batch "$batch" \
            --size "$size" --steps "$tsteps" --warmup "$twarm" --cudnn-benchmark $bench --device "$tdev"
        rc=$?
        out=$(tail -n 2 "$res/torch-eager-bench$bench.out" 2>/dev/null | head -1)
        if [ $rc -eq 0 ]; then
            echo "torch eager cudnn.benchmark=$bench: $out"
            ips=$(jget "$res/torch-eager-bench$bench.out" 'j["images_per_s"]')
            [ $bench = 0 ] && torch_precision=$(jget "$res/torch-eager-bench$bench.out" 'j["precision"]')
            row "torch eager fp32, cudnn.benchmark=$bench" ok "$out" "$last_cmd"
            local rt; rt=$(ratio "$ours" "$ips")
            row "  ours / torch eager (benchmark=$bench)" "$(ge "$rt" 1.0)" \
                "${rt:-?} (goal >= 1.00): ${ours:-?} / ${ips:-?} img/s" ""
        else
            echo "torch eager cudnn.benchmark=$bench: $(result_of $rc): $(why $rc "torch-eager-bench$bench")"
            row "torch eager fp32, cudnn.benchmark=$bench" "$(result_of $rc)" \
                "$(why $rc "torch-eager-bench$bench")" "$last_cmd"
        fi
    done

    local split=32 s one="" ips_s
    [ $dry = 1 ] && split=2
    echo "== stages on one GPU: 1, 2 and 4 stages, batch $batch in micro-batches of $split"
    plan_for r50-1stage-split$split "$batch" $split "$steps" "$size" "$stages1"
    plan_for r50-2stage-split$split "$batch" $split "$steps" "$size" "$stages2"
    plan_for r50-4stage-split$split "$batch" $split "$steps" "$size" "$stages4"
    for s in 1 2 4; do
        if pr "${s}stage-split$split" "$res/r50-${s}stage-split$split.yaml" --steps "$steps" \
            --device-map "$map"; then
            ips_s=$pr_ips
            row "ours $s stage(s) on one GPU, split $split" ok "$pr_fig" "$last_cmd"
            if [ $s = 1 ]; then
                one=$ips_s
            else
                local rt; rt=$(ratio "$ips_s" "$one")
                row "  $s stages / 1 stage" "$(ge "$rt" 0.95)" \
                    "${rt:-?} (goal >= 0.95): ${ips_s:-?} / ${one:-?} img/s" ""
            fi
        else
            row "ours $s stage(s) on one GPU, split $split" "$(result_of $?)" "$pr_fig" "$last_cmd"
        fi
    done

    echo "== convolution algorithms: cuDNN's heuristics (PP_CUDNN_FIND=0) against measured"
    pr_env=(PP_CUDNN_FIND=0)
    if pr 1stage-full-heuristics "$res/r50-1stage-full.yaml" --steps "$steps" --device-map "$map"
    then
        row "ours fp32 1 stage, heuristic algorithms" ok "$pr_fig" "$last_cmd"
        local rt; rt=$(ratio "$ours" "$pr_ips")
        row "  measured / heuristic algorithms" "info" "${rt:-?}: ${ours:-?} / ${pr_ips:-?} img/s" ""
    else
        row "ours fp32 1 stage, heuristic algorithms" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    pr_env=()

    echo "== tf32 throughput: pipeline-run 1 stage vs PyTorch eager TF32 (cudnn.benchmark on)"
    local ours_tf32=""
    plan_for r50-1stage-full-tf32 "$batch" "$batch" "$steps" "$size" "$stages1" tf32
    if pr 1stage-full-tf32 "$res/r50-1stage-full-tf32.yaml" --steps "$steps" --device-map "$map"
    then
        ours_tf32=$pr_ips
        row "ours tf32 1 stage, batch $batch" ok "$pr_fig" "$last_cmd"
    else
        row "ours tf32 1 stage, batch $batch" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    run torch-eager-tf32 240 "${pyrun[@]}" "$bundle/gpu/torch_eager.py" --batch "$batch" \
        --size "$size" --steps "$tsteps" --warmup "$twarm" --cudnn-benchmark 1 --device "$tdev" \
        --precision tf32
    rc=$?
    out=$(tail -n 2 "$res/torch-eager-tf32.out" 2>/dev/null | head -1)
    if [ $rc -eq 0 ]; then
        ips=$(jget "$res/torch-eager-tf32.out" 'j["images_per_s"]')
        row "torch eager tf32, cudnn.benchmark=1" ok "$out" "$last_cmd"
        local rt; rt=$(ratio "$ours_tf32" "$ips")
        row "  ours / torch eager tf32" "$(ge "$rt" 1.0)" \
            "${rt:-?} (goal >= 1.00): ${ours_tf32:-?} / ${ips:-?} img/s" ""
    else
        row "torch eager tf32, cudnn.benchmark=1" "$(result_of $rc)" "$(why $rc torch-eager-tf32)" \
            "$last_cmd"
    fi
}

# ---- part 2: allocation counts, the tutorial's experiment ------------------------

# counts_of FILE: the pipeline-run line of an interposer output file.
counts_of() { grep '^cuda_count prog=pipeline-run ' "$1" 2>/dev/null | tail -1; }
# field LINE KEY
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { v = $2 } END { print v + 0 }'; }

part2() {
    cur_part=2
    echo "== cudaMalloc/cudaFree in steady-state steps (LD_PRELOAD interposer)"
    local lib=$bundle/tools/libcuda_count.so map split=32 s n rc
    map=$(map_all)
    [ $dry = 1 ] && split=2
    if [ ! -f "$lib" ]; then
        row "cudaMalloc count" "FAIL(no interposer)" "$lib missing (bundle.sh builds it)" ""
    elif [ -z "$cudart" ]; then
        row "cudaMalloc count" "FAIL(static cudart)" "pipeline-run does not load libcudart.so: calls cannot be interposed" "ldd bin/pipeline-run"
    else
        plan_for r50-1stage-split$split "$batch" $split "$steps" "$size" "$stages1"
        plan_for r50-2stage-split$split "$batch" $split "$steps" "$size" "$stages2"
        local g ips_on ips_off
        for s in 1 2; do
          ips_on="" ips_off=""
          # graphs on and off (--cuda-graphs): with them a steady step should be a
          # few graph launches and no host wait but the step's end
          for g in on off; do
            local c_lo="" c_hi="" cmd_hi="" tag="${s}stage-graphs-$g"
            for n in 4 14; do
                rm -f "$res/counts-$tag-$n.txt"
                # no shared algorithm file: both runs measure in their first step,
                # so the difference between them is the steady state; steps 0-3
                # (0-based) are the two buffer sets' eager warm-ups and captures,
                # so 14 minus 4 steps are ten replays
                run "count-$tag-$n" 180 env -u PP_CUDNN_CACHE -u PP_CUDA_GRAPHS \
                    LD_PRELOAD="$lib" PP_CUDA_COUNT_OUT="$res/counts-$tag-$n.txt" \
                    "$bin/pipeline-run" "$res/r50-${s}stage-split$split.yaml" --steps $n \
                    --device-map "$map" --cuda-graphs $g --json
                rc=$?
                if [ $rc -ne 0 ]; then
                    row "cudaMalloc count, $s stage(s), $n steps, graphs $g" "$(result_of $rc)" \
                        "$(why $rc "count-$tag-$n")" "$last_cmd"
                    continue 2
                fi
                [ $n = 4 ] && c_lo=$(counts_of "$res/counts-$tag-$n.txt")
                [ $n = 14 ] && { c_hi=$(counts_of "$res/counts-$tag-$n.txt"); cmd_hi=$last_cmd; }
            done
            if [ -z "$c_lo" ] || [ -z "$c_hi" ]; then
                row "cudaMalloc per 10 steps, $s stage(s), graphs $g" "FAIL(no counts)" \
                    "the interposer wrote nothing (not preloaded?)" "$cmd_hi"
                continue
            fi
            local k d fig="" bad=0
            local syncs=0
            for k in cudaMalloc cudaFree cudaMallocHost cudaHostAlloc cudaFreeHost cudaMallocManaged \
                cudaMallocAsync cudaFreeAsync cudaMallocFromPoolAsync cudaDeviceSynchronize \
                cudaStreamSynchronize cudaEventSynchronize cudaMemcpy; do
                d=$(( $(field "$c_hi" "$k") - $(field "$c_lo" "$k") ))
                fig+="$k $d, "
                case $k in cudaMalloc|cudaFree|cudaMallocHost|cudaHostAlloc|cudaFreeHost|cudaMallocManaged)
                    [ "$d" -ne 0 ] && bad=1 ;;
                    cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy)
                    syncs=$((syncs + d)) ;;
                esac
            done
            local total_async; total_async=$(field "$c_hi" cudaMallocAsync)
            local verdict=ok
            [ $bad = 1 ] && verdict="FAIL(allocates)"
            if [ "$total_async" -eq 0 ] && [ "$(field "$c_hi" cudaMalloc)" -eq 0 ]; then
                verdict="FAIL(not intercepted)"
                fig="no allocation call seen at all (14 steps): the interposer did not see the runtime; $fig"
            fi
            echo "$s stage(s), graphs $g, per 10 steady-state steps: ${fig%, }"
            row "CUDA allocation calls per 10 steps, $s stage(s), graphs $g" "$verdict" \
                "${fig%, } (14 steps minus 4 steps; goal cudaMalloc = cudaFree = 0; async pool calls allowed)" \
                "$cmd_hi (and --steps 4)"
            # host waits (device, stream, event synchronisations, synchronous copies)
            row "host synchronisations per steady step, $s stage(s), graphs $g" \
                "$(le "$(awk -v n=$syncs 'BEGIN { printf "%.1f", n / 10 }')" 1)" \
                "$(awk -v n=$syncs 'BEGIN { printf "%.1f", n / 10 }') per step ($syncs in 10; goal at most 1)" \
                "$cmd_hi (and --steps 4)"
            # launches: graph launches, the backend's own kernels through the
            # runtime (cuDNN's and cuBLAS's are not seen), captures begun
            local gl kl bc mode refused verdict_g per_g
            gl=$(( $(field "$c_hi" cudaGraphLaunch) - $(field "$c_lo" cudaGraphLaunch) ))
            kl=$(( $(field "$c_hi" cudaLaunchKernel) - $(field "$c_lo" cudaLaunchKernel) ))
            bc=$(field "$c_hi" cudaStreamBeginCapture)
            mode=$(jget "$res/count-$tag-14.out" 'j["cuda_graphs"]["mode"]')
            refused=$(jget "$res/count-$tag-14.out" 'j["cuda_graphs"]["refused"] or ""')
            per_g=$(awk -v n=$gl 'BEGIN { printf "%.1f", n / 10 }')
            verdict_g=ok
            if [ "$mode" = "n/a" ]; then
                verdict_g=info
            elif [ $g = on ] && [ "$gl" -lt 10 ]; then
                verdict_g="FAIL(eager)"
            elif [ $g = off ] && [ "$gl" -ne 0 ]; then
                verdict_g="FAIL(graphs)"
            fi
            row "graph launches per steady step, $s stage(s), graphs $g" "$verdict_g" \
                "$per_g graph launch(es) and $(awk -v n=$kl 'BEGIN { printf "%.1f", n / 10 }') runtime kernel launches per step, $bc capture(s) in 14 steps; mode ${mode:-?}${refused:+; refused: $refused}" \
                "$cmd_hi (and --steps 4)"
            local ips; ips=$(jget "$res/count-$tag-14.out" 'j["images_per_s"]')
            [ $g = on ] && ips_on=$ips || ips_off=$ips
            row "images/s, $s stage(s), split $split, graphs $g" \
                "$([ -n "$ips" ] && echo ok || echo 'FAIL(no figure)')" \
                "${ips:-?} img/s (14 steps under the interposer, first excluded)" "$cmd_hi"
          done
          local rt; rt=$(ratio "$ips_on" "$ips_off")
          row "  graphs on / off, $s stage(s)" "$([ -n "$rt" ] && echo info || echo 'FAIL(no figure)')" \
              "${rt:-?}: ${ips_on:-?} / ${ips_off:-?} img/s" ""
        done
    fi

    echo "== the tutorial's experiment: cut after layer2, batch $tut_batch, ${tut_size}x$tut_size"
    local plan=$bundle/plans/tutorial-layer2.yaml tmap=() tdevs=cuda:0,cuda:0
    if [ $dry = 1 ]; then
        tmap=(--device-map "cuda:*=cpu:0")
        tdevs=cpu
        if [ -f "$plan" ]; then
            sed -e "s/^  size: 120$/  size: $tut_batch/" \
                -e "s/image_size: \[128, 128\]/image_size: [$tut_size, $tut_size]/" \
                "$plan" >"$res/tutorial-layer2-dry.yaml"
            plan=$res/tutorial-layer2-dry.yaml
        fi
    elif [ "$ngpu" -ge 2 ]; then
        tdevs=cuda:0,cuda:1
    else
        tmap=(--device-map cuda:1=cuda:0)
    fi
    local ours_json=() sweep_ok=0
    if [ ! -f "$plan" ]; then
        row "tutorial sweep (ours)" "FAIL(no plan)" "$plan missing" ""
    else
        run tutorial-ours 420 "$bin/pipeline-run" "$plan" "${tmap[@]}" --steps "$tut_steps" \
            --sweep-split "$tut_splits" --csv "$res/tutorial-ours.csv" \
            --svg "$res/tutorial-ours.svg" --json
        rc=$?
        if [ $rc -eq 0 ]; then
            sweep_ok=1
            ours_json+=("$res/tutorial-ours.out")
            row "tutorial sweep (ours), chart tutorial-ours.svg" ok \
                "$(jget "$res/tutorial-ours.out" '", ".join("%d: %.0f img/s" % (r["split_size"], r["images_per_s"]) for r in j["sweep"])')" \
                "$last_cmd"
        else
            row "tutorial sweep (ours)" "$(result_of $rc)" "$(why $rc tutorial-ours)" "$last_cmd"
        fi
        # A runtime failure (one split size out of memory, say) ends a sweep:
        # then measure the split sizes one by one.
        if [ $sweep_ok = 0 ] && [ $rc = 1 ]; then
            echo "the sweep failed: running each split size alone"
            local sp
            for sp in ${tut_splits//,/ }; do
                run "tutorial-ours-$sp" 120 "$bin/pipeline-run" "$plan" "${tmap[@]}" \
                    --steps "$tut_steps" --sweep-split "$sp" --json
                rc=$?
                if [ $rc -eq 0 ]; then
                    ours_json+=("$res/tutorial-ours-$sp.out")
                else
                    row "tutorial (ours) split $sp" "$(result_of $rc)" "$(why $rc "tutorial-ours-$sp")" "$last_cmd"
                fi
            done
        fi
        run tutorial-ours-nopipe 120 "$bin/pipeline-run" "$plan" "${tmap[@]}" --steps "$tut_steps" \
            --sweep-split "$tut_batch" --json
        rc=$?
        if [ $rc -eq 0 ]; then
            ours_json+=("$res/tutorial-ours-nopipe.out")
            row "tutorial (ours) split $tut_batch, no pipelining" ok \
                "$(jget "$res/tutorial-ours-nopipe.out" '"%.1f img/s, %.1f ms/step" % (j["sweep"][0]["images_per_s"], j["sweep"][0]["step_ms"])')" \
                "$last_cmd"
        else
            row "tutorial (ours) split $tut_batch, no pipelining" "$(result_of $rc)" \
                "$(why $rc tutorial-ours-nopipe)" "$last_cmd"
        fi
    fi
    local oargs=() f
    for f in "${ours_json[@]}"; do oargs+=(--ours "$f"); done
    run tutorial-torch 420 "${pyrun[@]}" "$bundle/gpu/tutorial.py" --devices "$tdevs" --batch "$tut_batch" \
        --size "$tut_size" --splits "$tut_splits" --number "$tut_number" --repeat "$tut_repeat" \
        --csv "$res/tutorial-torch.csv" --combined "$res/tutorial-combined.csv" "${oargs[@]}"
    rc=$?
    local tcmd=$last_cmd
    if [ -s "$res/tutorial-torch.out" ]; then
        cat "$res/tutorial-torch.out"
    fi
    if [ $rc -ne 0 ]; then
        row "tutorial (PyTorch)" "$(result_of $rc)" "$(why $rc tutorial-torch)" "$tcmd"
    fi
    if [ -s "$res/tutorial-torch.csv" ]; then
        local name sp mb d0 d1 med ips
        while IFS=, read -r name sp mb d0 d1 _ _ _ med _ ips _; do
            [ "$name" = model ] && continue
            [ "$name" = PipelineParallelResNet50 ] && continue
            row "tutorial $name ($d0, $d1)" "$([ -n "$ips" ] && echo ok || echo FAIL)" \
                "${ips:-?} img/s, ${med:-?} ms/batch median" "$tcmd"
        done <"$res/tutorial-torch.csv"
    fi
    if [ -s "$res/tutorial-combined.csv" ]; then
        local o t r note
        while IFS=, read -r sp mb o t r note; do
            [ "$sp" = split_size ] && continue
            row "tutorial split $sp ($mb micro-batches)${note:+, $note}" \
                "$([ -n "$r" ] && echo ok || echo "FAIL(missing)")" \
                "ours ${o:-?} img/s, tutorial ${t:-?} img/s, ratio $([ -n "$r" ] && printf '%.2f' "$r" || echo '?')" \
                "$tcmd"
        done <"$res/tutorial-combined.csv"
    fi
}

# ---- part 3: training on Fashion-MNIST ------------------------------------------

# train_plan NAME EXAMPLE: $res/NAME.yaml from plans/EXAMPLE with the data paths of
# BUNDLE/data (in a dry run: subsets of 512 training and 256 test images, 2 epochs).
train_plan() {
    local data=$bundle/data/fashion-mnist
    if [ $dry = 1 ]; then
        "$py" - "$data" "$res/dry-data" <<'PY'
import gzip, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for name, n in (("train-images-idx3-ubyte.gz", 512), ("train-labels-idx1-ubyte.gz", 512),
                ("t10k-images-idx3-ubyte.gz", 256), ("t10k-labels-idx1-ubyte.gz", 256)):
    d = gzip.open(os.path.join(src, name)).read()
    nd = d[3]
    dims = list(struct.unpack(">" + "I" * nd, d[4:4 + 4 * nd]))
    per = 1
    for x in dims[1:]:
        per *= x
    off = 4 + 4 * nd
    dims[0] = n
    with gzip.open(os.path.join(dst, name), "wb") as f:
        f.write(d[:4] + struct.pack(">" + "I" * nd, *dims) + d[off:off + n * per])
PY
        data=$res/dry-data
    fi
    sed -e "s|/usr/share/datasets/fashion-mnist|$data|" "$bundle/plans/$2" >"$res/$1.yaml"
    [ $dry = 1 ] && sed -i -e 's/^epochs: .*/epochs: 2/' "$res/$1.yaml"
}

part3() {
    cur_part=3
    echo "== training on Fashion-MNIST"
    if [ ! -f "$bundle/data/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
        row "Fashion-MNIST training" "MISSING" "$bundle/data/fashion-mnist (bundle.sh copies Debian's dataset-fashion-mnist)" ""
        return
    fi
    local map name example goal_acc goal_s rc acc sec ips
    [ $dry = 1 ] && map="cpu:*=cpu:0" || map="cpu:*=cuda:0"
    for name in resnet18 lenet; do
        if [ $name = resnet18 ]; then
            example=fashion-mnist-resnet18.yaml goal_acc=0.90 goal_s=5
        else
            example=fashion-mnist-lenet.yaml goal_acc=0.89 goal_s=""
        fi
        train_plan "train-$name" "$example"
        run "train-$name" 540 "$bin/pipeline-run" "$res/train-$name.yaml" --device-map "$map" \
            --json --plot "$res/train-$name.svg"
        rc=$?
        if [ $rc -ne 0 ]; then
            row "$name Fashion-MNIST, 10 epochs on one GPU" "$(result_of $rc)" "$(why $rc "train-$name")" "$last_cmd"
            continue
        fi
        acc=$(jget "$res/train-$name.out" '"%.4f" % j["epochs"][-1]["test_acc"]')
        sec=$(jget "$res/train-$name.out" 'sum(e["seconds"] for e in j["epochs"]) / len(j["epochs"])')
        ips=$(jget "$res/train-$name.out" 'j["images_per_s"]')
        echo "$name: test accuracy $acc, ${sec} s per epoch, ${ips} img/s"
        row "$name Fashion-MNIST test accuracy (goal $goal_acc)" "$(ge "$acc" $goal_acc)" \
            "$acc after the last epoch" "$last_cmd"
        if [ -n "$goal_s" ]; then
            row "$name Fashion-MNIST s/epoch (goal $goal_s)" "$(le "$sec" $goal_s)" \
                "$sec s per epoch, $ips img/s training" "$last_cmd"
        else
            row "$name Fashion-MNIST s/epoch" "$([ -n "$sec" ] && echo ok || echo 'FAIL(no figure)')" \
                "$sec s per epoch, $ips img/s training" "$last_cmd"
        fi
    done
}

# ---- part 4: bf16 in NHWC against PyTorch; kernels per step; checks ---------------

ncu="" sanitizer=""
# find_tool NAME PATTERN...: NAME on PATH, else the first file a pattern names.
find_tool() {
    local name=$1 f
    shift
    command -v "$name" 2>/dev/null && return
    for f in "$@"; do
        [ -x "$f" ] && { echo "$f"; return; }
    done
    return 0
}

# te NAME LABEL ARGS...: tests/gpu/torch_eager.py ARGS (batch and size given by the
# caller) as one row; sets te_ips.
te_ips=""
te() {
    local name=$1 label=$2 rc out cap=180
    shift 2
    te_ips=""
    case " $* " in *" --compile "*) cap=240 ;; esac
    run "torch-$name" $cap "${pyrun[@]}" "$bundle/gpu/torch_eager.py" --steps "$tsteps" \
        --warmup "$twarm" "$@"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "$label: $(result_of $rc): $(why $rc "torch-$name")"
        row "$label" "$(result_of $rc)" "$(why $rc "torch-$name")" "$last_cmd"
        return $rc
    fi
    out=$(tail -n 2 "$res/torch-$name.out" 2>/dev/null | head -1)
    te_ips=$(jget "$res/torch-$name.out" 'j["images_per_s"]')
    out+=$(jget "$res/torch-$name.out" '"; compiled in %.0f s" % j["compile_s"] if j.get("compile_s") else ""')
    echo "$label: $out"
    row "$label" "$([ -n "$te_ips" ] && echo ok || echo 'FAIL(no figure)')" "$out" "$last_cmd"
}

# mem_fig BF16_JSON FP32_JSON: peak memory per stage, bf16 against fp32, from --json.
mem_fig() {
    "$py" - "$1" "$2" 2>/dev/null <<'PY' || true
import json, sys
def load(p):
    return json.loads(open(p).read().strip().splitlines()[-1])
b, f = load(sys.argv[1]), load(sys.argv[2])
gib = lambda n: n / 2.0**30
ratio = lambda x, y: "%.2f" % (x / y) if y else "?"
devs = [s["device"] for s in b["stages"]]
if len(b["stages"]) > 1 and len(set(devs)) == 1:
    pb, pf = b["stages"][0]["peak_bytes"], f["stages"][0]["peak_bytes"]
    print("%s, all %d stages: bf16 %.2f GiB / fp32 %.2f GiB = %s (peak_bytes is a device's "
          "high-water mark; the stages share %s, so this is the process-wide figure, not one "
          "per stage)" % (devs[0], len(devs), gib(pb), gib(pf), ratio(pb, pf), devs[0]))
else:
    print(", ".join("stage %d (%s): bf16 %.2f GiB / fp32 %.2f GiB = %s" % (
        i, sb["device"], gib(sb["peak_bytes"]), gib(sf["peak_bytes"]),
        ratio(sb["peak_bytes"], sf["peak_bytes"]))
        for i, (sb, sf) in enumerate(zip(b["stages"], f["stages"]))))
PY
}

# ktable NAME LABEL PLAN STEP_MS STEP_CMD: one steady step (PP_PROFILE_STEP=5 of 6)
# under ncu, grouped by tests/gpu/kernel_table.py; the busy fraction against
# STEP_MS, the median step of the same plan without ncu (STEP_CMD).
ktable() {
    local name=$1 label=$2 plan=$3 step_ms=$4 step_cmd=$5 rc krc fig verdict errs
    if [ $dry = 1 ]; then
        row "kernels per step, $label (ncu)" "n/a" "not applicable in a dry run" ""
        return
    fi
    if [ -z "$ncu" ]; then
        row "kernels per step, $label (ncu)" "MISSING" \
            "ncu (Nsight Compute) not found on PATH nor under /usr/local/cuda*, /opt/nvidia" ""
        return
    fi
    # clocks and caches as the plain run has them: ncu changes no GPU setting
    # step 5 (0-based) replays a graph: steps 0-3 are each buffer set's
    # eager warm-up and capture
    run "ncu-$name" 300 env PP_PROFILE_STEP=5 "$ncu" --profile-from-start off --csv \
        --print-units base --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum "$bin/pipeline-run" "$plan" --steps 6 \
        --device-map "$map" --json
    rc=$?
    local ncmd=$last_cmd
    "$py" "$bundle/gpu/kernel_table.py" "$res/ncu-$name.out" "$res/ncu-$name.log" \
        ${step_ms:+--step-ms "$step_ms"} --csv "$res/kernels-$name.csv" \
        >"$res/kernels-$name.txt" 2>&1
    krc=$?
    if [ $krc -ne 0 ]; then
        errs=$(grep -h '==ERROR==\|==WARNING==' "$res/ncu-$name.out" "$res/ncu-$name.log" 2>/dev/null | head -2 | tr '\n' ' ')
        [ $rc -eq 0 ] && rc=1
        row "kernels per step, $label (ncu)" "$(result_of $rc)" \
            "${errs:-no kernel rows: $(why $rc "ncu-$name")}" "$ncmd"
        return
    fi
    sed '$d' "$res/kernels-$name.txt"
    fig=$(jget "$res/kernels-$name.txt" '"%d kernels, %.2f ms (count/ms): " % (j["kernels"], j["total_ms"]) + ", ".join("%s %d/%.2f" % (k, v["count"], v["ms"]) for k, v in j["families"].items())')
    verdict=ok
    [ $rc -ne 0 ] && verdict="FAIL($rc)"
    row "kernels per step, $label (ncu)" "$verdict" "$fig (per kernel: kernels-$name.csv)" "$ncmd"
    if [ -n "$step_ms" ]; then
        row "  GPU busy fraction, $label" info \
            "$(jget "$res/kernels-$name.txt" '"%.2f = %.2f ms of kernels / %.2f ms median step without ncu" % (j["busy_frac"], j["total_ms"], j["step_ms"])')" \
            "$step_cmd"
    else
        row "  GPU busy fraction, $label" "FAIL(no step time)" \
            "the same plan without ncu gave no median step" "$step_cmd"
    fi
}

# san TOOL NAME LABEL CMD...: CMD under compute-sanitizer --tool TOOL (with the
# variables of the array san_env in its environment); a row with the error count
# of its summary.
san_env=()
san() {
    local tool=$1 name=$2 label=$3 rc errs line verdict
    shift 3
    if [ $dry = 1 ]; then
        row "compute-sanitizer $tool, $label" "n/a" "not applicable in a dry run" ""
        return
    fi
    if [ -z "$sanitizer" ]; then
        row "compute-sanitizer $tool, $label" "MISSING" \
            "compute-sanitizer not found on PATH nor under /usr/local/cuda*" ""
        return
    fi
    run "san-$tool-$name" 120 env "${san_env[@]}" "$sanitizer" --tool "$tool" "$@"
    rc=$?
    errs=$(grep -ho 'ERROR SUMMARY: [0-9]* error' "$res/san-$tool-$name.out" \
        "$res/san-$tool-$name.log" 2>/dev/null | tail -1 | awk '{ print $3 }')
    line=$(grep -ho 'RACECHECK SUMMARY: .*' "$res/san-$tool-$name.out" \
        "$res/san-$tool-$name.log" 2>/dev/null | tail -1)
    if [ -z "$errs" ] && [ -n "$line" ]; then
        errs=$(echo "$line" | sed -n 's/.*(\([0-9]*\) error.*/\1/p')
    fi
    case $rc in
        124|137|200) verdict=$(result_of $rc) ;;
        *) if [ -z "$errs" ]; then verdict="FAIL(no summary)"
           elif [ "$errs" -gt 0 ]; then verdict="FAIL($errs errors)"
           elif [ $rc -ne 0 ]; then verdict="FAIL($rc)"
           else verdict=ok; fi ;;
    esac
    # the first reports, or why the program failed
    local what=""
    if [ "${errs:-0}" -gt 0 ] 2>/dev/null; then
        what=$(grep -h '^========= ' "$res/san-$tool-$name.out" "$res/san-$tool-$name.log" \
            2>/dev/null | grep -v 'COMPUTE-SANITIZER\|SUMMARY' | head -n 2 | tr '\n' ' ' | cut -c1-240)
    elif [ "$verdict" != ok ]; then
        what=$(why $rc "san-$tool-$name")
    fi
    echo "compute-sanitizer $tool, $label: $verdict"
    row "compute-sanitizer $tool, $label" "$verdict" \
        "${errs:-?} errors${line:+; $line}; exit status $rc${what:+: $what}" "$last_cmd"
}

part4() {
    cur_part=4
    local map tdev=cuda:0 split=32 b b1=$batch b2=$((batch * 2)) s rt
    local -A ips=() step=() cmd=()
    map=$(map_all)
    [ $dry = 1 ] && { tdev=cpu; split=2; }
    ncu=$(find_tool ncu /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu \
        /usr/local/cuda-*/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu)
    sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer)
    echo "ncu: ${ncu:-not found}; compute-sanitizer: ${sanitizer:-not found}"

    # ours: 1 stage (layout auto = NHWC for bf16 on CUDA, then NCHW), 2 and 4 stages
    # in micro-batches of $split; PyTorch eager bf16 channels_last (cudnn.benchmark on)
    for b in $b1 $b2; do
        echo "== bf16 throughput, batch $b, ${size}x$size: pipeline-run vs PyTorch eager"
        plan_for "r50-1stage-b$b-bf16" "$b" "$b" "$steps" "$size" "$stages1" bf16
        if pr "1stage-b$b-bf16" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
            --device-map "$map" --layout auto; then
            ips[auto$b]=$pr_ips
            step[auto$b]=$(jget "$res/pr-1stage-b$b-bf16.out" 'j["step_ms"]["median"]')
            cmd[auto$b]=$last_cmd
            row "ours bf16 1 stage, batch $b, layout auto (NHWC on CUDA)" ok "$pr_fig" "$last_cmd"
        else
            row "ours bf16 1 stage, batch $b, layout auto (NHWC on CUDA)" "$(result_of $?)" "$pr_fig" "$last_cmd"
        fi
        if te "eager-bf16-cl-b$b" "torch eager bf16 autocast channels_last, batch $b" \
            --batch "$b" --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision bf16 \
            --channels-last; then
            rt=$(ratio "${ips[auto$b]:-}" "$te_ips")
            row "  ours / torch eager bf16 channels_last, batch $b" "$(ge "$rt" 1.15)" \
                "${rt:-?} (goal >= 1.15): ${ips[auto$b]:-?} / ${te_ips:-?} img/s" ""
        fi
    done
    for b in $b1 $b2; do
        echo "== bf16, batch $b: --layout nchw (what NHWC brings)"
        if pr "1stage-b$b-bf16-nchw" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
            --device-map "$map" --layout nchw; then
            row "ours bf16 1 stage, batch $b, --layout nchw" ok "$pr_fig" "$last_cmd"
            rt=$(ratio "${ips[auto$b]:-}" "$pr_ips")
            row "  NHWC (auto) / NCHW, batch $b" info \
                "${rt:-?}: ${ips[auto$b]:-?} / ${pr_ips:-?} img/s" ""
        else
            row "ours bf16 1 stage, batch $b, --layout nchw" "$(result_of $?)" "$pr_fig" "$last_cmd"
        fi
    done
    for b in $b1 $b2; do
        echo "== bf16, batch $b: 2 and 4 stages on one GPU, micro-batches of $split"
        for s in 2 4; do
            local sv=stages$s
            plan_for "r50-${s}stage-b$b-split$split-bf16" "$b" $split "$steps" "$size" "${!sv}" bf16
            if pr "${s}stage-b$b-split$split-bf16" "$res/r50-${s}stage-b$b-split$split-bf16.yaml" \
                --steps "$steps" --device-map "$map"; then
                [ "$b" = "$b1" ] && cmd[bf16s$s]=$last_cmd
                row "ours bf16 $s stages on one GPU, batch $b, split $split" ok "$pr_fig" "$last_cmd"
                rt=$(ratio "$pr_ips" "${ips[auto$b]:-}")
                row "  $s stages / 1 stage (whole batch), bf16, batch $b" info \
                    "${rt:-?}: ${pr_ips:-?} / ${ips[auto$b]:-?} img/s" ""
            else
                row "ours bf16 $s stages on one GPU, batch $b, split $split" "$(result_of $?)" \
                    "$pr_fig" "$last_cmd"
            fi
        done
    done

    # Two data-parallel replicas sharing cuda:0 in one process (a thread each;
    # NCCL refuses two ranks on one GPU, so the gradients are summed through
    # the host): they run, and what sharing the GPU costs against 1 replica.
    plan_for "r50-2rep-b$b1-bf16" "$b1" "$((b1 / 2))" "$steps" "$size" \
        "  - {device: [cuda:0, cuda:0], layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}" bf16
    sed -i 's/^stages:$/replicas: 2\nstages:/' "$res/r50-2rep-b$b1-bf16.yaml"
    if pr "2rep-b$b1-bf16" "$res/r50-2rep-b$b1-bf16.yaml" --steps "$steps" --device-map "$map"; then
        rt=$(ratio "$pr_ips" "${ips[auto$b1]:-}")
        row "ours bf16 2 replicas on one GPU in one process, batch $b1" ok \
            "$pr_fig; ${rt:-?} of 1 replica's ${ips[auto$b1]:-?} img/s" "$last_cmd"
    else
        row "ours bf16 2 replicas on one GPU in one process, batch $b1" "$(result_of $?)" \
            "$pr_fig" "$last_cmd"
    fi

    # torch.compile last: compiling takes the longest and varies most
    for b in $b1 $b2; do
        echo "== torch.compile bf16 channels_last, batch $b"
        if te "compile-bf16-cl-b$b" "torch.compile bf16 autocast channels_last, batch $b" \
            --batch "$b" --size "$size" --cudnn-benchmark 1 --device "$tdev" --precision bf16 \
            --channels-last --compile; then
            rt=$(ratio "${ips[auto$b]:-}" "$te_ips")
            row "  ours / torch.compile bf16 channels_last, batch $b" "$(ge "$rt" 1.0)" \
                "${rt:-?} (goal >= 1.00): ${ips[auto$b]:-?} / ${te_ips:-?} img/s" ""
        fi
    done

}

# ---- part 5: correctness and diagnostics of bf16 on the GPU ----------------------

# The bf16 runs of part 4 at batch $1 in micro-batches of $2 (when it ran into
# the same results folder), or the same runs here: 1 stage (its median step is
# the busy fraction's), 2 and 4 stages (their memory).
bf16_runs_of() {
    local b=$1 split=$2 s sv
    if [ ! -s "$res/pr-1stage-b$b-bf16.out" ]; then
        plan_for "r50-1stage-b$b-bf16" "$b" "$b" "$steps" "$size" "$stages1" bf16
        pr "1stage-b$b-bf16" "$res/r50-1stage-b$b-bf16.yaml" --steps "$steps" \
            --device-map "$(map_all)" --layout auto >/dev/null
    fi
    for s in 2 4; do
        [ -s "$res/pr-${s}stage-b$b-split$split-bf16.out" ] && continue
        sv=stages$s
        plan_for "r50-${s}stage-b$b-split$split-bf16" "$b" "$split" 3 "$size" "${!sv}" bf16
        pr "${s}stage-b$b-split$split-bf16" "$res/r50-${s}stage-b$b-split$split-bf16.yaml" \
            --steps 3 --device-map "$(map_all)" >/dev/null
    done
}

part5() {
    cur_part=5
    local map tdev=cuda:0 split=32 b1=$batch s
    local -A step=() cmd=()
    map=$(map_all)
    [ $dry = 1 ] && { tdev=cpu; split=2; }
    ncu=$(find_tool ncu /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu \
        /usr/local/cuda-*/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu)
    sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer)
    echo "ncu: ${ncu:-not found}; compute-sanitizer: ${sanitizer:-not found}"
    bf16_runs_of "$b1" "$split"
    step[auto$b1]=$(jget "$res/pr-1stage-b$b1-bf16.out" 'j["step_ms"]["median"]')
    cmd[auto$b1]=$(cat "$res/pr-1stage-b$b1-bf16.cmd" 2>/dev/null)
    for s in 2 4; do
        cmd[bf16s$s]=$(cat "$res/pr-${s}stage-b$b1-split$split-bf16.cmd" 2>/dev/null)
    done

    echo "== bf16 cross-check against PyTorch (float64 reference) on $tdev"
    # pipeline-run with this script's library path; PyTorch keeps the one it was given
    cat >"$res/pipeline-run.sh" <<SH
#!/bin/sh
LD_LIBRARY_PATH='$LD_LIBRARY_PATH' exec '$bin/pipeline-run' "\$@"
SH
    chmod +x "$res/pipeline-run.sh"
    local check=$bundle/torch/bf16_check.py rc verdict
    if [ ! -f "$check" ]; then
        row "bf16 cross-check on $tdev" "FAIL(missing)" "$check (bundle.sh copies tests/torch)" ""
    else
        # (its checkpoints, about 1 GB, stay in a temporary folder)
        run bf16-check 360 "${pyrun[@]}" "$check" "$res/pipeline-run.sh" --device "$tdev"
        rc=$?
        case $rc in 0) verdict=PASS ;; 77) verdict=SKIP ;; *) verdict=$(result_of $rc) ;; esac
        grep -E '^(FAIL|info) ' "$res/bf16-check.out" 2>/dev/null | cut -c1-200
        tail -n 3 "$res/bf16-check.out" 2>/dev/null
        row "bf16 cross-check on $tdev (1, 2, 4 stages)" \
            "$verdict" \
            "$(grep -m1 '^worst ratio' "$res/bf16-check.out" 2>/dev/null || why $rc bf16-check); $(tail -n 1 "$res/bf16-check.out" 2>/dev/null)" \
            "$last_cmd"
    fi

    echo "== fp32 references (memory, busy fraction): 1 stage whole batch, 2 and 4 stages split $split"
    plan_for "r50-1stage-b$b1-fp32" "$b1" "$b1" "$steps" "$size" "$stages1"
    if pr "1stage-b$b1-fp32" "$res/r50-1stage-b$b1-fp32.yaml" --steps "$steps" --device-map "$map"
    then
        step[fp32]=$(jget "$res/pr-1stage-b$b1-fp32.out" 'j["step_ms"]["median"]')
        cmd[fp32]=$last_cmd
        row "ours fp32 1 stage, batch $b1" ok "$pr_fig" "$last_cmd"
    else
        row "ours fp32 1 stage, batch $b1" "$(result_of $?)" "$pr_fig" "$last_cmd"
    fi
    for s in 2 4; do
        local sv=stages$s
        plan_for "r50-${s}stage-b$b1-split$split-fp32" "$b1" $split 3 "$size" "${!sv}"
        if pr "${s}stage-b$b1-split$split-fp32" "$res/r50-${s}stage-b$b1-split$split-fp32.yaml" \
            --steps 3 --device-map "$map"; then
            cmd[fp32s$s]=$last_cmd
        else
            row "ours fp32 $s stages, batch $b1, split $split (memory)" "$(result_of $?)" \
                "$pr_fig" "$last_cmd"
        fi
    done
    echo "== peak memory per stage, bf16 against fp32 (batch $b1)"
    local bj fj fig
    for s in 1 2 4; do
        if [ $s = 1 ]; then
            bj=$res/pr-1stage-b$b1-bf16.out fj=$res/pr-1stage-b$b1-fp32.out
        else
            bj=$res/pr-${s}stage-b$b1-split$split-bf16.out fj=$res/pr-${s}stage-b$b1-split$split-fp32.out
        fi
        fig=$(mem_fig "$bj" "$fj")
        echo "$s stage(s): ${fig:-no figure}"
        row "peak memory bf16 / fp32, batch $b1, $s stage(s)$([ $s = 1 ] || echo ", split $split")" \
            "$([ -n "$fig" ] && echo ok || echo 'FAIL(no figure)')" \
            "${fig:-a run above failed}" \
            "$([ $s = 1 ] && echo "${cmd[auto$b1]:-?}; ${cmd[fp32]:-?}" || echo "${cmd[bf16s$s]:-?}; ${cmd[fp32s$s]:-?}")"
    done

    echo "== kernels per step (ncu), 1 stage, batch $b1"
    ktable "bf16-b$b1" "bf16 1 stage, batch $b1" "$res/r50-1stage-b$b1-bf16.yaml" \
        "${step[auto$b1]:-}" "${cmd[auto$b1]:-}"
    ktable "fp32-b$b1" "fp32 1 stage, batch $b1" "$res/r50-1stage-b$b1-fp32.yaml" \
        "${step[fp32]:-}" "${cmd[fp32]:-}"

    echo "== compute-sanitizer: memcheck and racecheck"
    cat >"$res/r18-2stage-small-bf16.yaml" <<YAML
model: {name: resnet18, num_classes: 10, in_channels: 3, stem: imagenet}
batch: {size: 8, split_size: 4}
schedule: 1f1b
precision: bf16
optimizer: {type: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data: {format: synthetic, image_size: [64, 64]}
seed: 1
steps: 2
stages:
$stages2
YAML
    local tool
    for tool in memcheck racecheck; do
        san_env=(-u PP_CUDNN_CACHE)
        san $tool native "bin/test_cuda_native" "$bin/test_cuda_native"
        # cuDNN's heuristic algorithms: measuring them under the tool takes long
        san_env=(-u PP_CUDNN_CACHE PP_CUDNN_FIND=0)
        san $tool plan "bf16 resnet18 plan, 2 stages" \
            "$bin/pipeline-run" "$res/r18-2stage-small-bf16.yaml" --steps 2 \
            --device-map "$map" --json
    done
    san_env=()
}

# ---- part 6: the graph API support probe ---------------------------------------------

part6() {
    cur_part=6
    echo "== graph API support probe: ResNet-50's convolutions, batch $batch (cuDNN backend API)"
    local probe=$bin/gconv_probe rc last
    if [ ! -x "$probe" ]; then
        if [ $dry = 1 ]; then
            row "graph API probe" "SKIPPED" "bin/gconv_probe not built (no CUDA backend)" ""
        else
            row "graph API probe" "MISSING" "bin/gconv_probe (bundle.sh collects it from the CUDA build)" ""
        fi
        return
    fi
    run gconv-probe 480 "$probe" "$batch" --budget 400
    rc=$?
    cat "$res/gconv-probe.out" 2>/dev/null
    last=$(tail -n 1 "$res/gconv-probe.out" 2>/dev/null)
    case $rc in
        0) row "graph API probe, batch $batch (table: gconv-probe.out)" ok "$last" "$last_cmd" ;;
        77) row "graph API probe" "SKIPPED" "no CUDA device visible" "$last_cmd" ;;
        *) row "graph API probe, batch $batch (table: gconv-probe.out)" "$(result_of $rc)" \
            "$last; $(why $rc gconv-probe)" "$last_cmd" ;;
    esac
}

torch_precision=""
case $part in
    1) part1 ;;
    2) part2 ;;
    3) part3 ;;
    4) part4 ;;
    5) part5 ;;
    6) part6 ;;
    all) part1; part2; part3; part4; part5; part6 ;;
esac

# ---- the table ------------------------------------------------------------------

{
    echo
    echo "== summary: ${gpu}, driver ${driver}, $ngpu GPU(s) visible"
    echo "   precision: fp32, TF32 off (ours: CUDNN_FMA_MATH + CUBLAS_DEFAULT_MATH; PyTorch: ${torch_precision:-fp32_precision ieee / allow_tf32 False}), except rows marked tf32 or bf16 (ours precision: bf16; PyTorch torch.autocast bf16); NVIDIA_TF32_OVERRIDE=$tf32_env"
    echo "   ours: convolution algorithms measured per shape (PP_CUDNN_CACHE=$res/cudnn-algos.txt) unless a row says heuristic"
    echo "   batch $batch, ${size}x$size, SGD; tutorial batch $tut_batch, ${tut_size}x$tut_size; medians over timed steps (CUDA events)"
    echo "   commands run from the bundle folder; results in $res"
    [ $dry = 1 ] && echo "   DRY RUN ON THE CPU: the figures mean nothing"
    printf '%-6s  %-52s %-16s %s\n' "part" "what" "result" "figure"
    prev=""
    while IFS=$'\t' read -r p what result figure cmd; do
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

if [ -n "$copy_to" ]; then
    mkdir -p "$copy_to" && cp -r "$res" "$copy_to/" && echo "copied to $copy_to/$(basename "$res")"
fi
[ "$failures" -eq 0 ]
