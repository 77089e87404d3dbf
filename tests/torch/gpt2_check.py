"""gpt2_check.py - pipeline-run's GPT-2 against a GPT-2 written here in PyTorch.

Usage: /usr/bin/python3 gpt2_check.py PIPELINE_RUN [--keep DIR] [--device-map MAP]

--device-map MAP goes to pipeline-run: cpu:*=cuda:0 runs both stages on
one GPU (tests/gpu/run-all.sh --part gpt2), the tied embedding split there.

The model: 4 blocks, n_embd 128, 4 heads, 64 positions, a vocabulary of 256
(tied head, and untied) and of 50257 (tied), Hugging Face's GPT2LMHeadModel
layout and names (Conv1D weights (in, out), `transformer.` before every
tensor but the untied head's; a tied head has no tensor of its own). The
plan: two stages (wte, wpe, h.0, h.1 | h.2, h.3, ln_f, lm_head: the tied
embedding on the first stage and its head on the last), 1F1B, batch 4 in
two micro-batches, SGD (lr, momentum 0.9, weight decay), windows of 65
tokens read in order from an llm.c .bin file written here (random tokens).
PyTorch runs the same semantics: micro-batches one after the other, each
loss the cross-entropy summed over its tokens / (batch x 64), gradients
accumulated, one torch.optim.SGD step; in float32 and in float64.

For each model:
  - the initialisation is made here (normal weights, every tensor random so
    that each matters) and given to pipeline-run with --load;
  - the loss of step 1 (--json losses[0]) against float64 PyTorch's forward;
  - step 1 and step 2 (momentum in use, from our step-1 weights and momentum
    buffers): each tensor's error max|ours - ref64| / max|ref64 - before|
    (what the step changed; momentum buffers against max|ref64|) within
    FACTOR x PyTorch float32's own error against the same reference, plus a
    floor for tensors at rounding level;
  - our --weights-only checkpoint loads into the PyTorch model with
    load_state_dict(strict=True) (every name, shape and dtype), and its
    logits on the next batch give (float64) the loss our run printed for
    step 2, which it computed from the same weights;
  - a checkpoint in Hugging Face's published layout (GPT2Model's names, no
    `transformer.`, with the attention-mask buffers h.K.attn.bias) loads with
    --load and trains the same bits as our own names.

Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/numpy).
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

LAYERS, HEADS, EMBD, POSITIONS = 4, 4, 128, 64
BATCH, MICRO = 4, 2
LR, MOMENTUM, WD = 0.05, 0.9, 0.01
FACTOR = 3.0
FLOOR = 1e-6   # absolute allowance for tensors whose error is at rounding level
LOSS_RTOL = 2e-5
MOM_PREFIX = "optimizer.momentum."

PLAN = """\
model: {{name: gpt2, n_layer: {layers}, n_head: {heads}, n_embd: {embd}, vocab_size: {vocab},
        block_size: {positions}, tie_embeddings: {tied}}}
batch: {{size: {batch}, micro_batches: {micro}}}
schedule: 1f1b
optimizer: {{type: sgd, lr: {lr}, momentum: {momentum}, weight_decay: {wd}}}
data: {{format: tokens, file: tokens.bin, shuffle: false}}
seed: 1
steps: 1
stages:
  - {{device: cpu:0, layers: [wte, wpe, h.0, h.1]}}
  - {{device: cpu:1, layers: [h.2, h.3, ln_f, lm_head]}}
"""

failures = []


def check(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        failures.append(msg)


def GPT2(vocab, tied):
    return gpt2_model.GPT2(vocab, LAYERS, HEADS, EMBD, POSITIONS, tied)


def make_init(vocab, tied, seed):
    """Every tensor random (layer norms and biases too, so that each matters)."""
    torch.manual_seed(seed)
    m = GPT2(vocab, tied)
    out = {}
    for name, p in m.state_dict().items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                name.endswith("ln_f.weight"):
            v = 1.0 + 0.1 * torch.randn(p.shape)
        elif p.ndim == 1:
            v = 0.02 * torch.randn(p.shape)
        else:
            v = 0.02 * torch.randn(p.shape)
        out[name] = v.numpy().astype(np.float32)
    return out


def build(state, vocab, tied, dtype):
    m = GPT2(vocab, tied)
    m.load_state_dict({k: torch.from_numpy(np.asarray(state[k]).copy())
                       for k in m.state_dict()}, strict=True)
    return m.to(dtype).train()


def torch_step(state, vocab, tied, dtype, x, y):
    """One step of our semantics from state (and its momentum buffers, when it
    holds optimizer.momentum.*). Returns (state after it in float64, with its
    momentum buffers, and the loss)."""
    m = build(state, vocab, tied, dtype)
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for name, p in m.named_parameters():
        if MOM_PREFIX + name in state:
            opt.state[p]["momentum_buffer"] = torch.from_numpy(
                state[MOM_PREFIX + name].copy()).to(dtype)
    opt.zero_grad(set_to_none=True)
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()
    total = 0.0
    per = BATCH // MICRO
    for i in range(0, BATCH, per):
        logits = m(xt[i:i + per])
        loss = F.cross_entropy(logits.reshape(-1, vocab), yt[i:i + per].reshape(-1),
                               reduction="sum") / (BATCH * POSITIONS)
        loss.backward()
        total += float(loss.detach())
    opt.step()
    out = {k: v.detach().numpy().astype(np.float64) for k, v in m.state_dict().items()}
    for name, p in m.named_parameters():
        out[MOM_PREFIX + name] = opt.state[p]["momentum_buffer"].numpy().astype(np.float64)
    return out, total


def torch_loss(state, vocab, tied, x, y):
    m = build(state, vocab, tied, torch.float64)
    with torch.no_grad():
        logits = m(torch.from_numpy(x).long())
        return float(F.cross_entropy(logits.reshape(-1, vocab), torch.from_numpy(y).long()
                                     .reshape(-1), reduction="sum") / (BATCH * POSITIONS))


def rel_err(x, ref, before):
    diff = float(np.max(np.abs(x.astype(np.float64) - ref)))
    scale = float(np.max(np.abs(ref - before))) if before is not None else 0.0
    if scale == 0.0:
        scale = float(np.max(np.abs(ref)))
    return diff / scale if scale > 0 else diff


def compare(title, ours, ref64, ref32, before):
    """Each tensor: ours and torch fp32 against ref64; ours within FACTOR."""
    bad, worst = [], (0.0, "")
    for name in sorted(ref64):
        b = None if name.startswith(MOM_PREFIX) else before[name].astype(np.float64)
        if name not in ours:
            check(False, f"{title}: {name} missing from our checkpoint")
            continue
        eo = rel_err(ours[name], ref64[name], b)
        et = rel_err(ref32[name], ref64[name], b)
        ratio = eo / et if et > 0 else 0.0
        if ratio > worst[0]:
            worst = (ratio, f"{name}: {eo:.2e} vs torch fp32 {et:.2e}")
        if eo > FACTOR * et + FLOOR:
            bad.append(f"{name}: {eo:.2e} vs {et:.2e}")
    check(not bad, f"{title}: {len(ref64)} tensors within {FACTOR:g}x torch fp32's error "
                   f"(+{FLOOR:g}); worst ratio {worst[0]:.2f} ({worst[1]})"
          + "".join("; " + b for b in bad[:5]))


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


DEVICE_MAP = []  # ["--device-map", MAP] when given


def run(exe, work, load, steps, save, weights_only):
    cmd = [exe, os.path.join(work, "plan.yaml"), "--load", load, "--steps", str(steps), "--save",
           save, "--json"] + DEVICE_MAP
    if weights_only:
        cmd.append("--weights-only")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("command failed:", " ".join(cmd))
        print(r.stderr)
        raise SystemExit(1)
    tensors, _ = st.load(save)
    return json.loads(r.stdout), tensors


def check_model(exe, work, vocab, tied):
    title = f"vocab {vocab}, {'tied' if tied else 'untied'}"
    path = lambda name: os.path.join(work, name)  # noqa: E731
    rng = np.random.default_rng(vocab + tied)
    n_tokens = 2 * BATCH * POSITIONS + 1
    tokens = rng.integers(0, vocab, size=n_tokens)
    write_tokens(path("tokens.bin"), tokens)
    with open(path("plan.yaml"), "w") as f:
        f.write(PLAN.format(layers=LAYERS, heads=HEADS, embd=EMBD, vocab=vocab,
                            positions=POSITIONS, tied="true" if tied else "false", batch=BATCH,
                            micro=MICRO, lr=LR, momentum=MOMENTUM, wd=WD))
    win = lambda s: np.stack([tokens[i * POSITIONS:i * POSITIONS + POSITIONS + 1]  # noqa: E731
                              for i in range(s * BATCH, (s + 1) * BATCH)])
    w0, w1 = win(0), win(1)
    x0, y0, x1, y1 = w0[:, :-1], w0[:, 1:], w1[:, :-1], w1[:, 1:]
    init = make_init(vocab, tied, vocab)
    st.save(path("init.safetensors"), init)

    j1, ours1 = run(exe, work, path("init.safetensors"), 1, path("step1.safetensors"), False)
    ref64, loss64 = torch_step(init, vocab, tied, torch.float64, x0, y0)
    ref32, loss32 = torch_step(init, vocab, tied, torch.float32, x0, y0)
    check(sorted(ours1) == sorted(ref64),
          f"{title}: step-1 checkpoint holds the {len(init)} tensors of the PyTorch model and "
          f"{len(ref64) - len(init)} momentum buffers")
    rel = abs(j1["losses"][0] - loss64) / loss64
    rel32 = abs(loss32 - loss64) / loss64
    check(rel <= LOSS_RTOL, f"{title}: step-1 loss {j1['losses'][0]:.7f}, torch fp64 "
                            f"{loss64:.7f} (rel. error {rel:.1e}, torch fp32 {rel32:.1e})")
    compare(f"{title}, step 1", ours1, ref64, ref32, init)

    j2, ours2 = run(exe, work, path("init.safetensors"), 2, path("step2.safetensors"), True)
    ref64b, _ = torch_step(ours1, vocab, tied, torch.float64, x1, y1)
    ref32b, _ = torch_step(ours1, vocab, tied, torch.float32, x1, y1)
    ref64b = {k: v for k, v in ref64b.items() if not k.startswith(MOM_PREFIX)}
    compare(f"{title}, step 2 (from our step-1 weights and momentum)", ours2, ref64b, ref32b,
            ours1)

    # our checkpoint in the PyTorch model: strict, and its logits give our loss
    _, wts = run(exe, work, path("init.safetensors"), 1, path("weights.safetensors"), True)
    try:
        GPT2(vocab, tied).load_state_dict({k: torch.from_numpy(v.copy()) for k, v in wts.items()},
                                          strict=True)
        check(True, f"{title}: our --weights-only checkpoint loads with "
                    f"load_state_dict(strict=True) ({len(wts)} tensors)")
    except RuntimeError as e:
        check(False, f"{title}: load_state_dict(strict=True): {e}")
    l64 = torch_loss(wts, vocab, tied, x1, y1)
    rel = abs(l64 - j2["losses"][1]) / l64
    check(rel <= LOSS_RTOL, f"{title}: our step-1 weights' logits in PyTorch give loss "
                            f"{l64:.7f} on the next batch; ours printed {j2['losses'][1]:.7f} "
                            f"(rel {rel:.1e})")

    # Hugging Face's published layout: no transformer. scope, mask buffers beside
    if tied:
        hf = {k[len("transformer."):]: v for k, v in init.items()}
        for i in range(LAYERS):
            hf[f"h.{i}.attn.bias"] = np.tril(np.ones((POSITIONS, POSITIONS), dtype=np.float32))
        st.save(path("hf.safetensors"), hf)
        _, from_hf = run(exe, work, path("hf.safetensors"), 1, path("hf-step1.safetensors"),
                         False)
        same = all(from_hf[k].tobytes() == ours1[k].tobytes() for k in ours1)
        check(same and sorted(from_hf) == sorted(ours1),
              f"{title}: --load of Hugging Face's published names (mask buffers ignored) trains "
              "the bits of our own names")


def main():
    args = sys.argv[2:]
    opts = dict(zip(args[::2], args[1::2]))
    if len(sys.argv) < 2 or len(args) % 2 or any(k not in ("--keep", "--device-map")
                                                 for k in opts):
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if "--device-map" in opts:
        DEVICE_MAP.extend(["--device-map", opts["--device-map"]])
    tmp = None
    if "--keep" in opts:
        work = opts["--keep"]
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="pp-gpt2-")
        work = tmp.name
    for vocab, tied in ((256, True), (256, False), (50257, True)):
        check_model(exe, work, vocab, tied)
    return 1 if failures else 0


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        print(f"\n{len(failures)} failure(s)" if rc else "\nall checks passed")
    sys.exit(rc)
