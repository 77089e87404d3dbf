"""gpt2_vs_torch.py - a GPT-2 training step on the CPU backend against PyTorch's on
the same model, batch and threads. Prints figures, asserts nothing.

Usage: /usr/bin/python3 gpt2_vs_torch.py PIPELINE_RUN [--threads N] [--steps N]
           [--layers L] [--embd C] [--heads H] [--positions T] [--vocab V] [--batch B]

Both run one stage on one device: the same GPT-2 (tests/torch/gpt2_model.py,
tied head), windows of T + 1 tokens, SGD with momentum. pipeline-run runs
with PP_CPU_THREADS=N (its worker pool), PyTorch with torch.set_num_threads(N).
Each side's median step time over --steps steps, after one warm-up step; the
ratio ours / PyTorch's (the goal: at most 1.0). pipeline-run's time is its
step (the executor's run, the gradient sums and the optimizer), PyTorch's
zero_grad, forward, loss, backward and step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import gpt2_model  # noqa: E402

PLAN = """\
model: {{name: gpt2, n_layer: {layers}, n_head: {heads}, n_embd: {embd}, vocab_size: {vocab},
        block_size: {positions}}}
batch: {{size: {batch}, micro_batches: 1}}
schedule: gpipe
optimizer: {{type: sgd, lr: 0.01, momentum: 0.9}}
data: {{format: tokens, file: tokens.bin, shuffle: true}}
seed: 1
steps: {steps}
stages:
  - {{device: cpu:0, layers: [wte, wpe, h, ln_f, lm_head]}}
"""


def ours(exe, a, work):
    tokens = np.random.default_rng(1).integers(0, a.vocab, size=a.batch * a.positions * 8 + 1)
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(os.path.join(work, "tokens.bin"), "wb") as f:
        f.write(header.tobytes() + tokens.astype("<u2").tobytes())
    with open(os.path.join(work, "plan.yaml"), "w") as f:
        f.write(PLAN.format(**dict(vars(a), steps=a.steps + 1)))
    env = dict(os.environ, PP_CPU_THREADS=str(a.threads))
    r = subprocess.run([exe, os.path.join(work, "plan.yaml"), "--json"], capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(1)
    j = json.loads(r.stdout)
    return j["step_ms"]["median"], j


def theirs(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = gpt2_model.GPT2(a.vocab, a.layers, a.heads, a.embd, a.positions).train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randint(0, a.vocab, (a.batch, a.positions))
    y = torch.randint(0, a.vocab, (a.batch, a.positions))
    times = []
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x).reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        if i:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pp-gpt2-bench-") as work:
        ms, j = ours(os.path.abspath(a.exe), a, work)
    tms = theirs(a)
    tokens = a.batch * a.positions
    print(f"GPT-2 {a.layers} layers x {a.embd} ({a.heads} heads), {a.positions} positions, "
          f"vocabulary {a.vocab}, batch {a.batch}, {a.threads} threads, {a.steps} steps")
    print(f"  pipeline-run  {ms:9.1f} ms per step  {tokens / ms * 1e3:9.0f} tokens/s")
    print(f"  PyTorch       {tms:9.1f} ms per step  {tokens / tms * 1e3:9.0f} tokens/s  "
          f"(torch {torch.__version__})")
    print(f"  ratio         {ms / tms:9.2f}  (ours / PyTorch's; goal <= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
