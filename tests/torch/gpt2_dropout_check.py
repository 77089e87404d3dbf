"""gpt2_dropout_check.py - pipeline-run's GPT-2 dropout against PyTorch's, in
distribution (the two draw different masks, so no bit or tolerance check can
hold step by step).

Usage: /usr/bin/python3 gpt2_dropout_check.py PIPELINE_RUN

A byte-level GPT-2 (2 blocks, width 64, 4 heads, 32 positions, tied head) on
a text of sentences made of a small word list, from one initialisation made
here, SGD with momentum, batch 8, 40 steps, windows read in order: ours on
two stages with model.dropout 0.2 and 0, PyTorch (gpt2_model.py with
F.dropout at nanoGPT's places) with 0.2 under three torch seeds and with 0.
The mean training loss of the last 15 steps:
  - without dropout, ours and PyTorch's within 1% (the same computation);
  - with dropout, ours within max(5%, 2 x the spread of PyTorch's three
    seeds) of PyTorch's mean;
  - dropout moves the loss the same way in both, in ours by more than the
    spread of PyTorch's seeds (at this early stage of training it lowers it:
    measured, ours 4.0690 -> 3.1218, PyTorch 4.0690 -> 3.1759, seeds 3.1221,
    3.2779, 3.1277).
Exit status: 0 pass, 1 fail, 77 skip (no torch/numpy).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402
import st  # noqa: E402
from gpt2_check import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

LAYERS, HEADS, EMBD, T, VOCAB, BATCH, STEPS, LR, P = 2, 4, 64, 32, 256, 8, 40, 0.1, 0.2
PLAN = """\
model: {{name: gpt2, n_layer: {layers}, n_head: {heads}, n_embd: {embd}, vocab_size: {vocab},
        block_size: {t}, dropout: {p}}}
batch: {{size: {batch}, micro_batches: 2}}
schedule: 1f1b
optimizer: {{type: sgd, lr: {lr}, momentum: 0.9}}
data: {{format: tokens, file: tokens.bin, shuffle: false}}
seed: 3
steps: {steps}
stages:
  - {{device: cpu:0, layers: [wte, wpe, h.0]}}
  - {{device: cpu:1, layers: [h.1, ln_f, lm_head]}}
"""


CHECKS = Checks(verbose=True, stream=sys.stdout)
check = CHECKS.check


def corpus(n):
    words = ("the pipeline passes tokens from stage to stage and every mask is drawn "
             "again from its hash so that one stage and many agree").split()
    rng = np.random.default_rng(7)
    out = bytearray()
    while len(out) < n:
        out += (" ".join(rng.choice(words, size=rng.integers(4, 9))) + ". ").encode()
    return np.frombuffer(bytes(out[:n]), dtype=np.uint8).astype(np.int64)


def make_init():
    torch.manual_seed(1)
    m = gpt2_model.GPT2(VOCAB, LAYERS, HEADS, EMBD, T)
    return {k: v.detach().numpy().astype(np.float32) for k, v in m.state_dict().items()}


def ours(exe, work, p):
    with open(os.path.join(work, "plan.yaml"), "w") as f:
        f.write(PLAN.format(layers=LAYERS, heads=HEADS, embd=EMBD, vocab=VOCAB, t=T, p=p,
                            batch=BATCH, lr=LR, steps=STEPS))
    r = subprocess.run([exe, os.path.join(work, "plan.yaml"), "--load",
                        os.path.join(work, "init.safetensors"), "--json"],
                       capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(1)
    return json.loads(r.stdout)["losses"]


def theirs(init, tokens, p, seed):
    torch.manual_seed(seed)
    m = gpt2_model.GPT2(VOCAB, LAYERS, HEADS, EMBD, T, dropout=p)
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in init.items()}, strict=True)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=0.9)
    losses = []
    for s in range(STEPS):
        w = np.stack([tokens[i * T:i * T + T + 1] for i in range(s * BATCH, (s + 1) * BATCH)])
        x, y = torch.from_numpy(w[:, :-1]), torch.from_numpy(w[:, 1:])
        opt.zero_grad()
        loss = F.cross_entropy(m(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def tail(losses):
    return float(np.mean(losses[-15:]))


def main():
    exe = os.path.abspath(sys.argv[1])
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="pp-dropout-") as work:
        tokens = corpus(STEPS * BATCH * T + 1)
        write_tokens(os.path.join(work, "tokens.bin"), tokens)
        init = make_init()
        st.save(os.path.join(work, "init.safetensors"), init)
        o0, op = tail(ours(exe, work, 0.0)), tail(ours(exe, work, P))
    t0 = tail(theirs(init, tokens, 0.0, 0))
    tp = [tail(theirs(init, tokens, P, seed)) for seed in (1, 2, 3)]
    mean, spread = float(np.mean(tp)), float(np.max(tp) - np.min(tp))
    print(f"last 15 steps' mean loss: ours {o0:.4f} (dropout 0), {op:.4f} (dropout {P}); "
          f"PyTorch {t0:.4f} (0), {mean:.4f} (dropout {P}, seeds {', '.join(f'{v:.4f}' for v in tp)})")
    check(abs(o0 - t0) <= 0.01 * t0, f"without dropout: ours {o0:.4f}, PyTorch {t0:.4f}")
    tol = max(0.05 * mean, 2 * spread)
    check(abs(op - mean) <= tol, f"dropout {P}: ours {op:.4f}, PyTorch {mean:.4f} (within "
                                 f"{tol:.4f})")
    check(abs(op - o0) > spread and (op > o0) == (mean > t0),
          f"dropout moves the loss the same way: ours {o0:.4f} -> {op:.4f}, PyTorch "
          f"{t0:.4f} -> {mean:.4f}")
    CHECKS.summary("gpt2_dropout_check")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
