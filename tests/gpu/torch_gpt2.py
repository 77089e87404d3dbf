#!/usr/bin/env python3
"""torch_gpt2.py - PyTorch training steps of GPT-2, the reference pipeline-run's
GPT-2 throughput is compared with (run-all.sh --part gpt2).

The model is tests/torch/gpt2_model.py's (Hugging Face's layout, tied head),
its attention through F.scaled_dot_product_attention(is_causal=True) (the
fused kernels PyTorch picks on a GPU) where this PyTorch has it, else the
masked softmax; positions and masks on the model's device. One process, one
device: SGD (lr 0.01, momentum 0.9, as ours), cross-entropy over every
token, a fixed random batch of windows resident on the device. Precision:
fp32 with TF32 off, on with --precision tf32, or --precision bf16: forward
and loss under torch.autocast(DEVICE_TYPE, dtype=torch.bfloat16), fp32
master weights and optimizer. --compile runs the model through
torch.compile (compiled during the warm-up steps, at least 2; the first
step's time is reported as compile_s). After --warmup steps, each of
--steps steps is timed alone (CUDA events on CUDA, perf_counter on the CPU);
prints a human line and, last, one JSON line:
  {"tokens_per_s", "step_ms": {"median", "min"}, "batch", "positions",
   "layers", "embd", "heads", "vocab", "precision", "compile", "compile_s",
   "attention", "peak_gib", "device", "torch"}
When torch.compile is unavailable or fails, the last stderr line says why,
the JSON line carries "error" and the exit status is 3.

Usage: torch_gpt2.py [--layers 12] [--heads 12] [--embd 768] [--vocab 50257]
                     [--positions 1024] [--batch 8] [--steps 10] [--warmup 3]
                     [--device cuda:0] [--precision fp32|tf32|bf16] [--compile]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # importing the helpers leaves no __pycache__
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "torch"))  # the source tree's and the bundle's
import gpt2_model  # noqa: E402
from torch_common import CompileFailed, failed, precision_name, time_training  # noqa: E402

SDPA = hasattr(F, "scaled_dot_product_attention")


def block_forward(self, x):
    """gpt2_model.Block's forward, its attention fused where PyTorch can."""
    n, t, c = x.shape
    q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
    hs = c // self.n_head
    q, k, v = (z.view(n, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
    if SDPA:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        y = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
    y = y.transpose(1, 2).contiguous().view(n, t, c)
    x = x + self.attn.c_proj(y)
    return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


def model_forward(self, idx):
    """gpt2_model.GPT2's forward with the positions on idx's device."""
    tr = self.transformer
    x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1], device=idx.device))
    for b in tr.h:
        x = b(x)
    return F.linear(tr.ln_f(x), tr.wte.weight)


def fail(a, what, err):
    """A failure (torch.compile): exit status 3 (torch_common.failed)."""
    return failed(torch, "torch_gpt2.py", {
        "batch": a.batch, "positions": a.positions, "precision": a.precision,
        "compile": a.compile, "device": a.device}, what, err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()

    precision = precision_name(torch, a.precision)
    dev = torch.device(a.device)
    torch.manual_seed(1)
    gpt2_model.Block.forward = block_forward
    gpt2_model.GPT2.forward = model_forward
    model = gpt2_model.GPT2(a.vocab, a.layers, a.heads, a.embd, a.positions).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randint(0, a.vocab, (a.batch, a.positions), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.positions), device=dev)
    loss = lambda net: F.cross_entropy(net(x).reshape(-1, a.vocab).float(),  # noqa: E731
                                       y.reshape(-1))
    try:
        med, mn, compile_s, peak = time_training(torch, model, opt, loss, a)
    except CompileFailed as e:
        return fail(a, *e.args)
    tokens = a.batch * a.positions
    attention = "scaled_dot_product_attention" if SDPA else "masked softmax"
    print("torch %s, %s, GPT-2 %d x %d (%d heads), %d positions, vocabulary %d, %s, %s%s" % (
        torch.__version__, a.device, a.layers, a.embd, a.heads, a.positions, a.vocab,
        precision, attention,
        ", torch.compile (first step %.1f s)" % compile_s if a.compile else ""))
    print("%.1f ms/step (min %.1f), %.0f tokens/s, peak %.2f GiB" % (
        med, mn, tokens * 1000.0 / med, peak))
    print(json.dumps({"tokens_per_s": tokens * 1000.0 / med,
                      "step_ms": {"median": med, "min": mn}, "batch": a.batch,
                      "positions": a.positions, "layers": a.layers, "embd": a.embd,
                      "heads": a.heads, "vocab": a.vocab, "precision": precision,
                      "compile": a.compile, "compile_s": compile_s, "attention": attention,
                      "peak_gib": peak, "device": a.device, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
