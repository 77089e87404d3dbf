"""gpt2_text.py - the byte-level GPT-2 of examples/plans/gpt2-fortunes.yaml trained
for real, optionally beside the same recipe in PyTorch.

Usage: python3 gpt2_text.py PIPELINE_RUN SOURCE_ROOT [--epochs N] [--torch]
           [--max-final-loss L] [--threads N] [--sample FILE]

Ours: the plan (its epochs replaced) with --metrics, which gives the training
loss of every step and the validation loss after every epoch. With --torch,
tests/torch/gpt2_model.py with the same recipe: the same sizes and
initialisation rule (normal 0.02, the blocks' output projections 0.02 /
sqrt(2 n_layer), layer norms 1 and 0, biases 0), windows of 65 bytes drawn
uniformly from the training file, batch 16 (an epoch's last batch the rest of
its (N - 1) / 64 windows), AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on matrices and embeddings, none on biases and layer norms)
after clip_grad_norm_ to 1.0, the loss the mean cross-entropy per token; the validation file's windows in order after every
epoch. The two sides draw different initial weights and windows from their
seeds, so their curves agree within the run-to-run spread, not bit for bit.

Prints per epoch the mean training loss and the validation loss of each side,
then (--sample) a generated sample of our model into FILE. Checks (exit 1):
our last validation loss at most --max-final-loss (default: report only), and
with --torch, each epoch's validation loss within 10% of PyTorch's. Exit 77
without Debian's fortunes package or, with --torch, without PyTorch.
"""
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

TRAIN = "/usr/share/games/fortunes/songs-poems"
VALID = "/usr/share/games/fortunes/love"
LAYERS, HEADS, EMBD, T, BATCH = 4, 4, 128, 64, 16
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def ours(exe, root, epochs, work):
    text = open(os.path.join(root, "examples", "plans", "gpt2-fortunes.yaml")).read()
    text = re.sub(r"(?m)^epochs: \d+$", f"epochs: {epochs}", text)
    plan = os.path.join(work, "plan.yaml")
    with open(plan, "w") as f:
        f.write(text)
    metrics, ckpt = os.path.join(work, "metrics.csv"), os.path.join(work, "ours.safetensors")
    t0 = time.time()
    r = subprocess.run([exe, plan, "--metrics", metrics, "--save", ckpt], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(1)
    secs = time.time() - t0
    train, valid = {}, []
    with open(metrics) as f:
        for row in csv.DictReader(f):
            if row["kind"] == "step":
                train.setdefault(int(row["epoch"]), []).append(float(row["loss"]))
            elif row["kind"] == "eval":
                valid.append(float(row["loss"]))
    return [sum(v) / len(v) for _, v in sorted(train.items())], valid, secs, plan, ckpt


def theirs(epochs, threads, seed=1):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
    import gpt2_model
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    m = gpt2_model.GPT2(256, LAYERS, HEADS, EMBD, T)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * LAYERS))
            elif p.ndim == 2:
                p.normal_(0.0, 0.02)
            elif "ln_" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    opt = torch.optim.AdamW([{"params": [p for p in m.parameters() if p.ndim >= 2],
                              "weight_decay": WD},
                             {"params": [p for p in m.parameters() if p.ndim < 2],
                              "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    data = torch.tensor(list(open(TRAIN, "rb").read()), dtype=torch.long)
    val = torch.tensor(list(open(VALID, "rb").read()), dtype=torch.long)
    windows = (len(data) - 1) // T
    vw = (len(val) - 1) // T
    vx = torch.stack([val[i * T:i * T + T] for i in range(vw)])
    vy = torch.stack([val[i * T + 1:i * T + T + 1] for i in range(vw)])
    train, valid = [], []
    t0 = time.time()
    for _ in range(epochs):
        losses = []
        for b0 in range(0, windows, BATCH):
            n = min(BATCH, windows - b0)
            starts = torch.randint(0, len(data) - T, (n,))
            x = torch.stack([data[s:s + T] for s in starts])
            y = torch.stack([data[s + 1:s + T + 1] for s in starts])
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP)
            opt.step()
            losses.append(float(loss))
        train.append(sum(losses) / len(losses))
        with torch.no_grad():
            total = sum(float(F.cross_entropy(m(vx[i:i + 64]).reshape(-1, 256),
                                              vy[i:i + 64].reshape(-1), reduction="sum"))
                        for i in range(0, vw, 64))
        valid.append(total / (vw * T))
    return train, valid, time.time() - t0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    if not os.path.exists(TRAIN) or not os.path.exists(VALID):
        print("skip: Debian's fortunes package is not installed")
        return 77
    exe, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    epochs = int(arg("--epochs", "6"))
    threads = int(arg("--threads", "2"))
    limit = float(arg("--max-final-loss", "inf"))
    with_torch = "--torch" in sys.argv
    if with_torch:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            print(f"skip: {e}")
            return 77
    failures = []
    with tempfile.TemporaryDirectory(prefix="pp-gpt2-text-") as work:
        tr, va, secs, plan, ckpt = ours(exe, root, epochs, work)
        sample = arg("--sample", None)
        if sample:
            r = subprocess.run([exe, plan, "--load", ckpt, "--generate", "The ", "--tokens",
                                "400", "--temperature", "0.8", "--seed", "1"],
                               capture_output=True)
            with open(sample, "wb") as f:
                f.write(r.stdout)
    th = theirs(epochs, threads) if with_torch else None
    print(f"byte-level GPT-2 ({LAYERS} x {EMBD}, {T} positions) on {TRAIN}, validated on "
          f"{VALID}: {epochs} epochs")
    print(f"{'epoch':>5}  {'ours train':>10}  {'ours valid':>10}" +
          (f"  {'torch train':>11}  {'torch valid':>11}" if th else ""))
    for e in range(epochs):
        line = f"{e + 1:5d}  {tr[e]:10.4f}  {va[e]:10.4f}"
        if th:
            line += f"  {th[0][e]:11.4f}  {th[1][e]:11.4f}"
            if abs(va[e] - th[1][e]) > 0.1 * th[1][e]:
                failures.append(f"epoch {e + 1}: validation loss {va[e]:.4f} vs PyTorch's "
                                f"{th[1][e]:.4f}")
        print(line)
    print(f"seconds: ours {secs:.0f}" + (f", PyTorch {th[2]:.0f}" if th else ""))
    if va[-1] > limit:
        failures.append(f"last validation loss {va[-1]:.4f} above {limit}")
    for f_ in failures:
        print("FAIL: " + f_)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
