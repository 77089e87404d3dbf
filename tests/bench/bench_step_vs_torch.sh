#!/bin/sh
# bench_step_vs_torch.sh - one ResNet-50 training step on the CPU, ours and
# PyTorch's, side by side in one run on the same machine.
#
# Usage: tests/bench/bench_step_vs_torch.sh BENCH_STEP [STEPS [THREADS]]
#   BENCH_STEP  the built bench_step executable (BUILD/tests/torch/bench_step)
#   STEPS       timed steps after 2 warm-up steps (default 10)
#   THREADS     threads for both sides (default 2): PP_CPU_THREADS for
#               ours, torch.set_num_threads for PyTorch
#
# Both run batch 16, 3x64x64, 1000 classes, ResNet-50 with the imagenet stem,
# SGD lr 0.01 momentum 0.9 weight decay 1e-4, BN in training mode, on
# synthetic data; each reports the median of the timed steps. The two
# alternate (ours, PyTorch, ours, PyTorch) ROUNDS times and the figures are
# the medians over rounds, so background load hits both alike. Prints both
# figures and the ratio ours / PyTorch (< 1: ours is faster). Needs Debian's
# /usr/bin/python3 with python3-torch and python3-torchvision; exits 77
# without them.
set -eu

bench=${1:?usage: $0 BENCH_STEP [STEPS [THREADS]]}
steps=${2:-10}
threads=${3:-2}
rounds=${ROUNDS:-2}
py=/usr/bin/python3

if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "skip: PyTorch/torchvision not importable by $py"
    exit 77
fi

torch_bench() {
    "$py" - "$steps" "$threads" <<'PYEOF'
import sys, time, statistics
import torch, torchvision
steps, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(1)
m = torchvision.models.resnet50(num_classes=1000).train()
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
x = torch.rand(16, 3, 64, 64)
y = torch.randint(0, 1000, (16,))
times = []
for i in range(2 + steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    if i >= 2:
        times.append((time.perf_counter() - t0) * 1e3)
print(f"torch {torch.__version__}, {threads} threads, mkldnn {torch.backends.mkldnn.is_available()}")
print(f"median_ms {statistics.median(times):.3f}")
PYEOF
}

ours_all=""
torch_all=""
r=0
while [ "$r" -lt "$rounds" ]; do
    o=$(PP_CPU_THREADS=$threads "$bench" "$steps" | awk '/^median_ms/ {print $2}')
    t=$(torch_bench | awk '/^median_ms/ {print $2}')
    echo "round $((r + 1)): ours $o ms, pytorch $t ms"
    ours_all="$ours_all $o"
    torch_all="$torch_all $t"
    r=$((r + 1))
done

median() { printf '%s\n' $1 | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
o=$(median "$ours_all")
t=$(median "$torch_all")
echo "resnet50 CPU training step, batch 16, 3x64x64, 1000 classes, SGD momentum, $threads threads:"
echo "  pipeline-run (OpenBLAS)  $o ms"
echo "  PyTorch (oneDNN)         $t ms"
awk -v o="$o" -v t="$t" 'BEGIN {printf "  ratio ours/pytorch      %.2f\n", o / t}'
