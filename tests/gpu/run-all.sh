#!/usr/bin/env bash
# run-all.sh - one run on a GPU machine: check the libraries, run the CUDA test
# suite, benchmark pipeline-run against PyTorch eager ResNet-50 at the same
# batch size, image size and precision, and print a table last.
#
# Usage: run-all.sh BUNDLE [options]     (BUNDLE made by tests/gpu/bundle.sh)
#   --batch N        global batch (default 128)      --size N   image size (224)
#   --steps N        pipeline-run steps (default 20) --all      run every test suite
#   --torch-steps N  timed PyTorch steps (default 20, after 5 warm-up steps)
# Precision: fp32 everywhere, TF32 off (cuDNN FMA math, cuBLAS default math;
# torch.backends.{cuda.matmul,cudnn}.allow_tf32 = False).
# Writes logs and JSON under BUNDLE/results-<time>/. Never changes GPU
# settings (clocks, power, compute mode, MIG).
set -uo pipefail

bundle=${1:?usage: run-all.sh BUNDLE [--batch N] [--size N] [--steps N] [--torch-steps N] [--all]}
shift
batch=128 size=224 steps=20 tsteps=20 all=0
while [ $# -gt 0 ]; do
    case $1 in
        --batch) batch=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --torch-steps) tsteps=$2; shift 2 ;;
        --all) all=1; shift ;;
        *) echo "run-all.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
bundle=$(cd "$bundle" && pwd)
res=$bundle/results-$(date +%Y%m%d-%H%M%S)
mkdir -p "$res"
rows=()     # table rows: "what|result|detail"
row() { rows+=("$1|$2|$3"); }

echo "== machine"
gpu="none"
if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,power.limit \
        --format=csv
else
    echo "nvidia-smi not found"
fi
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -1
python3 - <<'PY' 2>&1 | tee "$res/python.txt"
try:
    import torch, torchvision
    print("torch", torch.__version__, "torchvision", torchvision.__version__,
          "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
except Exception as e:
    print("torch unavailable:", e)
PY

echo "== libraries"
libdirs=$bundle/lib
pylibs=$(python3 - 2>/dev/null <<'PY'
import os
dirs = []
for mod in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cuda_nvrtc",
            "nvidia.nvjitlink", "nvidia.cu13"):
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
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
missing=$(for f in "$bundle"/bin/*; do ldd "$f" | grep 'not found'; done | sort -u)
if [ -n "$missing" ]; then
    echo "missing libraries:"; echo "$missing"
    row "libraries" "MISSING" "$(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
else
    for l in libcudart libcudnn.so libcublas.so; do
        ldd "$bundle/bin/test_cuda_ops" | grep -m1 "$l" || true
    done
    row "libraries" "ok" "$(ldd "$bundle/bin/test_cuda_ops" | awk '/libcudnn.so/ {print $3}')"
fi

echo "== tests"
pass=0 fail=0 skip=0
while IFS=$'\t' read -r suite name exe timeout args; do
    [ "$all" = 1 ] || [ "$suite" = cuda ] || continue
    log=$res/test-$name.log
    # shellcheck disable=SC2086
    (cd "$bundle/bin" && timeout "$timeout" "./$exe" $args) >"$log" 2>&1
    rc=$?
    case $rc in
        0) pass=$((pass + 1)); r=PASS ;;
        77) skip=$((skip + 1)); r=SKIP ;;
        *) fail=$((fail + 1)); r="FAIL($rc)" ;;
    esac
    printf '%-8s %-24s %s\n' "$r" "$suite/$name" "$(tail -1 "$log")"
    row "test $suite/$name" "$r" "$(tail -1 "$log")"
done <"$bundle/tests.tsv"
echo "$pass passed, $fail failed, $skip skipped"

echo "== benchmark: pipeline-run (fp32, batch $batch, ${size}x$size, $steps steps)"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
plan_for() { # name stages-yaml split
    cat >"$res/$1.yaml" <<YAML
model: {name: resnet50, num_classes: 1000, in_channels: 3, stem: imagenet}
batch: {size: $batch, split_size: $3}
schedule: 1f1b
precision: fp32
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, weight_decay: 0.0001, nesterov: false}
data: {format: synthetic, image_size: [$size, $size]}
seed: 1
steps: $steps
stages:
$2
YAML
}
one="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}"
two="  - {device: cuda:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}
  - {device: cuda:1, layers: [layer3, layer4, avgpool, fc]}"
plan_for r50-1stage-full "$one" "$batch"
plan_for r50-1stage-split32 "$one" 32
plan_for r50-2stage-split32 "$two" 32
map=()
[ "$ngpu" -lt 2 ] && map=(--device-map cuda:1=cuda:0)
plans=("$res"/r50-*.yaml)
for p in "$bundle"/plans/*.yaml; do
    [ -e "$p" ] && grep -q 'cuda:' "$p" && grep -q resnet50 "$p" && plans+=("$p")
done
for p in "${plans[@]}"; do
    name=$(basename "$p" .yaml)
    "$bundle/bin/pipeline-run" "$p" --json --steps "$steps" "${map[@]}" \
        >"$res/pr-$name.json" 2>"$res/pr-$name.log"
    rc=$?
    if [ $rc -ne 0 ]; then
        row "pipeline-run $name" "FAIL($rc)" "$(tail -1 "$res/pr-$name.log")"
        continue
    fi
    summary=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
s = j.get("step_ms", {})
print("%.1f ms/step (min %.1f), %.0f img/s, split %s, bubble %.2f" % (s.get("median", 0),
      s.get("min", 0), j.get("images_per_s", 0), j.get("split_size"), j.get("bubble_frac", 0)))
' "$res/pr-$name.json" 2>&1)
    echo "$name: $summary"
    row "pipeline-run $name" "ok" "$summary"
done

echo "== benchmark: PyTorch eager torchvision resnet50 (fp32, TF32 off, batch $batch, ${size}x$size)"
for bench in 0 1; do
    out=$(python3 - "$batch" "$size" "$tsteps" "$bench" 2>&1 <<'PY'
import statistics, sys
import torch, torchvision
batch, size, steps, bench = (int(a) for a in sys.argv[1:5])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = bool(bench)
dev = torch.device("cuda:0")
torch.manual_seed(1)
model = torchvision.models.resnet50(num_classes=1000).to(dev).train()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(batch, 3, size, size, device=dev)
y = torch.randint(0, 1000, (batch,), device=dev)
def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss
for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(steps):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    step()
    b.record()
    b.synchronize()
    times.append(a.elapsed_time(b))
med = statistics.median(times)
print("%.1f ms/step (min %.1f), %.0f img/s, peak %.1f GiB" % (med, min(times),
      batch * 1000.0 / med, torch.cuda.max_memory_allocated() / 2**30))
PY
)
    rc=$?
    echo "cudnn.benchmark=$bench: $out" | tail -1
    if [ $rc -eq 0 ]; then
        row "torch eager cudnn.benchmark=$bench" "ok" "$(echo "$out" | tail -1)"
    else
        row "torch eager cudnn.benchmark=$bench" "FAIL($rc)" "$(echo "$out" | tail -1)"
    fi
done

echo
echo "== summary: $gpu; fp32, TF32 off; batch $batch, ${size}x$size; medians over timed steps"
printf '%-40s %-9s %s\n' "what" "result" "detail"
for r in "${rows[@]}"; do
    IFS='|' read -r a b c <<<"$r"
    printf '%-40s %-9s %s\n' "$a" "$b" "$c"
done | tee "$res/summary.txt"
[ "$fail" -eq 0 ]
