"""gpt2_bf16_check.py - pipeline-run's GPT-2 in bf16 mixed precision against
PyTorch's torch.autocast("cpu", dtype=torch.bfloat16), both measured against
float64.

Usage: /usr/bin/python3 gpt2_bf16_check.py PIPELINE_RUN [--keep DIR] [--device-map MAP]

The model of gpt2_check.py (gpt2_model.py: 4 blocks, n_embd 128, 4 heads, 64
positions, a vocabulary of 256, the head tied to the token embedding) with
`precision: bf16`, AdamW (lr 1e-3, betas [0.9, 0.95], eps 1e-8, weight decay
0.1 on matrices and embeddings, none on biases and layer norms) and
clip_grad_norm, batch 4 in two micro-batches, windows of 65 tokens read in
order from an llm.c .bin file written here (random tokens):

- one stage and two stages (wte, wpe, h.0, h.1 | h.2, h.3, ln_f, lm_head:
  the tied embedding split) save bitwise equal checkpoints after steps 1 and
  2, with the AdamW state;
- step 1 from a random initialisation, and step 2 from our step-1 weights
  and AdamW state, are compared with the same step in PyTorch float64 (the
  reference) and in PyTorch float32 under bf16 autocast. The error of a
  tensor is max|x - ref64| / max|ref64 - before| (the error of what the step
  changed; the AdamW state: / max|ref64|), the maximum over each group (a
  tensor kind: wte, wpe, ln_f's, and each kind of the blocks' tensors over
  the blocks). Ours must be within FACTOR (3) of PyTorch bf16's error in
  every group, plus FLOOR for groups at fp32 rounding level. AdamW's first
  step moves each element by lr x the sign of its gradient, so a group's
  error at step 1 is that of the element whose gradient bf16 rounding flips,
  a matter of chance: PyTorch bf16's error is the largest of its run and of
  NUDGES runs from the weights nudged by 2^-8 relative (half a bf16 step,
  each element up or down at random: the spread that bf16 rounding alone
  gives), as tests/torch/bf16_check.py does for the loss (a nudged run's
  weights count by what its step changed: the nudge itself is taken off);
- the loss of --json within FACTOR of PyTorch bf16's error plus LOSS_FLOOR
  (2^-7 relative, one bf16 step: a single scalar's error is dominated by
  chance); the gradient norm likewise, and clipping is active at step 1.

--device-map MAP goes to pipeline-run (cpu:*=cuda:0 runs the stages on one
GPU); there bitwise equality of the stage counts is not required (their
largest difference is printed). The last line names the worst ratio of ours
to PyTorch bf16's error.

Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/torchvision/numpy).
"""

import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crosscheck as cc  # noqa: E402  (check, CHECKS, rel_err)
import gpt2_model  # noqa: E402
import check_args  # noqa: E402
import st  # noqa: E402

LAYERS, HEADS, EMBD, POSITIONS, VOCAB = 4, 4, 128, 64, 256
BATCH, MICRO = 4, 2
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 0.5
FACTOR = 3.0
FLOOR = 1e-5
LOSS_FLOOR = 2.0 ** -7
NUDGES = 3
PREFIXES = ("optimizer.exp_avg.", "optimizer.exp_avg_sq.", "optimizer.step.")

PLAN = """\
model: {{name: gpt2, n_layer: {layers}, n_head: {heads}, n_embd: {embd}, vocab_size: {vocab},
        block_size: {positions}}}
batch: {{size: {batch}, micro_batches: {micro}}}
schedule: 1f1b
precision: bf16
optimizer: {{type: adamw, lr: {lr}, betas: [{b1}, {b2}], eps: {eps}, weight_decay: {wd},
            clip_grad_norm: {clip}}}
data: {{format: tokens, file: tokens.bin, shuffle: false}}
seed: 1
steps: 1
stages:
{stages}"""

STAGES = {
    1: "  - {device: cpu:0, layers: [wte, wpe, h, ln_f, lm_head]}\n",
    2: "  - {device: cpu:0, layers: [wte, wpe, h.0, h.1]}\n"
       "  - {device: cpu:1, layers: [h.2, h.3, ln_f, lm_head]}\n",
}

worst_all = [0.0, ""]
check = cc.check
rel_err = cc.rel_err


def make_init(seed):
    """Every tensor random (layer norms and biases too, so that each matters)."""
    torch.manual_seed(seed)
    m = gpt2_model.GPT2(VOCAB, LAYERS, HEADS, EMBD, POSITIONS, True)
    out = {}
    for name, p in m.state_dict().items():
        base = 1.0 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0
        scale = 0.1 if base else 0.02
        out[name] = (base + scale * torch.randn(p.shape)).numpy().astype(np.float32)
    return out


def param_groups(m):
    """decay on matrices and embeddings, none on biases and layer norms"""
    decay = [p for p in m.parameters() if p.ndim >= 2]
    rest = [p for p in m.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}]


def torch_step(state, x, y, autocast):
    """One step of our semantics from state (weights, and AdamW state when it
    holds optimizer.*): float64, or float32 under bf16 autocast. Returns (the
    state after it in float64 with the AdamW state under our names, the loss,
    the gradient norm before clipping)."""
    dtype = torch.float32 if autocast else torch.float64
    m = gpt2_model.GPT2(VOCAB, LAYERS, HEADS, EMBD, POSITIONS, True)
    m.load_state_dict({k: torch.from_numpy(np.asarray(state[k], dtype=np.float32).copy())
                       for k in m.state_dict()}, strict=True)
    m = m.to(dtype).train()
    opt = torch.optim.AdamW(param_groups(m), lr=LR, betas=BETAS, eps=EPS)
    names = {p: n for n, p in m.named_parameters()}
    for p, n in names.items():
        if PREFIXES[0] + n in state:
            opt.state[p] = {"step": torch.tensor(float(state[PREFIXES[2] + n])),
                            "exp_avg": torch.from_numpy(state[PREFIXES[0] + n].copy()).to(dtype),
                            "exp_avg_sq": torch.from_numpy(state[PREFIXES[1] + n].copy())
                            .to(dtype)}
    opt.zero_grad(set_to_none=True)
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()
    total = 0.0
    per = BATCH // MICRO
    for i in range(0, BATCH, per):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = m(xt[i:i + per])
        z = logits.float() if autocast else logits  # the loss in fp32, as ours
        loss = F.cross_entropy(z.reshape(-1, VOCAB), yt[i:i + per].reshape(-1),
                               reduction="sum") / (BATCH * POSITIONS)
        loss.backward()
        total += float(loss.detach())
    norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP))
    opt.step()
    out = {k: v.detach().numpy().astype(np.float64) for k, v in m.state_dict().items()}
    for p, n in names.items():
        s = opt.state[p]
        out[PREFIXES[0] + n] = s["exp_avg"].numpy().astype(np.float64)
        out[PREFIXES[1] + n] = s["exp_avg_sq"].numpy().astype(np.float64)
    return out, total, norm


def group_of(name):
    state = next((p for p in PREFIXES if name.startswith(p)), "")
    base = name[len(state):].replace("transformer.", "")
    if base.startswith("h."):
        base = "h.*." + base.split(".", 2)[2]
    return (state.split(".")[1] + " " if state else "") + base


def nudged(state, seed):
    """state's weights moved by 2^-8 relative, each element up or down at random"""
    rng = np.random.default_rng(seed)
    return {k: (v * (1.0 + np.where(rng.random(v.shape) < 0.5, 1.0, -1.0) * 2.0 ** -8))
            .astype(np.float32) if not k.startswith("optimizer.") else v
            for k, v in state.items()}


def torch_bf16(state, x, y):
    """PyTorch bf16 autocast's runs from state and from NUDGES nudged copies:
    (state after, loss, norm, the state it started from) each"""
    starts = [state] + [nudged(state, k) for k in range(1, NUDGES + 1)]
    return [torch_step(s, x, y, True) + (s,) for s in starts]


def compare(title, ours, ref64, refbfs, before):
    """per group: ours within FACTOR x PyTorch bf16's largest error (+ FLOOR)"""
    eo, et = {}, {}
    for name in ref64:
        if name.startswith(PREFIXES[2]):
            continue
        if name not in ours:
            check(False, f"{title}: {name} missing from our checkpoint")
            continue
        b = None if name.startswith("optimizer.") else before[name].astype(np.float64)
        g = group_of(name)
        eo[g] = max(eo.get(g, 0.0), rel_err(ours[name], ref64[name], b))
        # a nudged run's weights: what its step changed, from before
        et[g] = max([et.get(g, 0.0)] + [
            rel_err(r[name] if b is None else r[name] - start[name] + b, ref64[name], b)
            for r, start in refbfs])
    bad, worst = [], (0.0, "")
    for g in sorted(eo):
        ratio = eo[g] / et[g] if et[g] > 0 else 0.0
        if ratio > worst[0]:
            worst = (ratio, f"{g}: {eo[g]:.2e} vs torch bf16 {et[g]:.2e}")
        if eo[g] > FACTOR * et[g] + FLOOR:
            bad.append(f"{g}: {eo[g]:.2e} vs {et[g]:.2e}")
    if worst[0] > worst_all[0]:
        worst_all[:] = [worst[0], f"{title}, {worst[1]}"]
    check(not bad, f"{title}: {len(eo)} groups within {FACTOR:g}x torch bf16 autocast's error "
                   f"(+{FLOOR:g}); worst ratio {worst[0]:.2f} ({worst[1]})"
          + "".join("; " + b for b in bad[:5]))


def check_scalar(title, what, ours, ref64, runs, at, floor):
    """runs[k][at]: PyTorch bf16's values of the scalar; the largest error counts"""
    eo, et = abs(ours - ref64), max(abs(r[at] - ref64) for r in runs)
    check(eo <= FACTOR * et + floor * abs(ref64),
          f"{title}: {what} {ours:.6f}, torch fp64 {ref64:.6f} (error {eo / abs(ref64):.1e}, "
          f"torch bf16's {et / abs(ref64):.1e})")


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


DEVICE_MAP = []  # ["--device-map", MAP] when given


def run(exe, work, stages, load, steps, save):
    plan = os.path.join(work, f"plan{stages}.yaml")
    with open(plan, "w") as f:
        f.write(PLAN.format(layers=LAYERS, heads=HEADS, embd=EMBD, vocab=VOCAB,
                            positions=POSITIONS, batch=BATCH, micro=MICRO, lr=LR, b1=BETAS[0],
                            b2=BETAS[1], eps=EPS, wd=WD, clip=CLIP, stages=STAGES[stages]))
    cmd = [exe, plan, "--load", load, "--steps", str(steps), "--save", save,
           "--json"] + DEVICE_MAP
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print("command failed:", " ".join(cmd))
        print(r.stderr)
        raise SystemExit(1)
    tensors, _ = st.load(save)
    return json.loads(r.stdout), tensors


def check_stages(title, a, b):
    same = sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    if DEVICE_MAP:
        diff = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a
                   if a[k].dtype != np.int64)
        print(f"info  {title}: 1 and 2 stages differ by at most {diff:.2e}")
        return
    check(same, f"{title}: 1 and 2 stages (the tied embedding split) save the same bits "
                f"({len(a)} tensors)")


def main():
    a = check_args.parse(sys.argv, __doc__, "pp-gpt2-bf16-")
    if a is None:
        return 2
    exe, work = a.exe, a.work
    DEVICE_MAP.extend(a.device_map)
    path = lambda name: os.path.join(work, name)  # noqa: E731
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, VOCAB, size=2 * BATCH * POSITIONS + 1)
    write_tokens(path("tokens.bin"), tokens)
    win = lambda s: np.stack([tokens[i * POSITIONS:i * POSITIONS + POSITIONS + 1]  # noqa: E731
                              for i in range(s * BATCH, (s + 1) * BATCH)])
    w0, w1 = win(0), win(1)
    init = make_init(VOCAB)
    st.save(path("init.safetensors"), init)

    j1, ours1 = run(exe, work, 2, path("init.safetensors"), 1, path("s2-step1.safetensors"))
    _, one1 = run(exe, work, 1, path("init.safetensors"), 1, path("s1-step1.safetensors"))
    j2, ours2 = run(exe, work, 2, path("init.safetensors"), 2, path("s2-step2.safetensors"))
    _, one2 = run(exe, work, 1, path("init.safetensors"), 2, path("s1-step2.safetensors"))
    check_stages("step 1", one1, ours1)
    check_stages("step 2", one2, ours2)

    ref64, loss64, norm64 = torch_step(init, w0[:, :-1], w0[:, 1:], False)
    bf = torch_bf16(init, w0[:, :-1], w0[:, 1:])
    check(norm64 > CLIP, f"step 1 clips: the gradient norm {norm64:.4f} is above {CLIP}")
    check_scalar("step 1", "loss", j1["losses"][0], loss64, bf, 1, LOSS_FLOOR)
    check_scalar("step 1", "gradient norm", j1["grad_norms"][0], norm64, bf, 2, LOSS_FLOOR)
    compare("step 1", ours1, ref64, [(r[0], r[3]) for r in bf], init)

    ref64b, loss64b, norm64b = torch_step(ours1, w1[:, :-1], w1[:, 1:], False)
    bf = torch_bf16(ours1, w1[:, :-1], w1[:, 1:])
    check_scalar("step 2", "loss", j2["losses"][1], loss64b, bf, 1, LOSS_FLOOR)
    check_scalar("step 2", "gradient norm", j2["grad_norms"][1], norm64b, bf, 2, LOSS_FLOOR)
    compare("step 2 (from our step-1 weights and AdamW state)", ours2, ref64b,
            [(r[0], r[3]) for r in bf], ours1)
    print(f"worst ratio to torch bf16 autocast's error: {worst_all[0]:.2f} ({worst_all[1]})")
    return cc.CHECKS.exit_code()


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        cc.CHECKS.summary("gpt2_bf16_check")
    sys.exit(rc)
