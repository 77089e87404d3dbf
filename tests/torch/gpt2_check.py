"""gpt2_check.py - pipeline-run's GPT-2 against a GPT-2 written here in PyTorch.

Usage: /usr/bin/python3 gpt2_check.py PIPELINE_RUN [--keep DIR] [--device-map MAP]

--device-map MAP goes to pipeline-run: cpu:*=cuda:0 runs both stages on
one GPU (tests/gpu/run-all.sh --part gpt2), the tied embedding split there.
PyTorch float32's runs (the yardstick below) then run on that GPU too,
TF32 off: our GPU's sums are held to what PyTorch's fp32 error is on the
CPU or on that GPU (cuBLAS's own sums), whichever is larger.

The model: 4 blocks, n_embd 128, 4 heads, 64 positions, a vocabulary of 256
(tied head, and untied) and of 50257 (tied), Hugging Face's GPT2LMHeadModel
layout and names (Conv1D weights (in, out), `transformer.` before every
tensor but the untied head's; a tied head has no tensor of its own). The
plan: two stages (wte, wpe, h.0, h.1 | h.2, h.3, ln_f, lm_head: the tied
embedding on the first stage and its head on the last), 1F1B, batch 4 in
two micro-batches, nanoGPT's recipe: AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on matrices and embeddings, none on biases and layer
norms: our default decay groups) with clip_grad_norm, windows of 65 tokens
read in order from an llm.c .bin file written here (random tokens). The
clip (0.5) is below every run's gradient norm, so it clips. PyTorch runs the
same semantics: micro-batches one after the other, each loss the
cross-entropy summed over its tokens / (batch x 64), gradients accumulated,
torch.nn.utils.clip_grad_norm_ over the parameters (a tied weight once), one
torch.optim.AdamW step over two parameter groups (decay, no decay); in
float32 and in float64.

For each model:
  - the initialisation is made here (normal weights, every tensor random so
    that each matters) and given to pipeline-run with --load;
  - the loss of step 1 (--json losses[0]) against float64 PyTorch's forward;
  - step 1, and step 2 resumed from our step-1 checkpoint (weights and AdamW
    state: exp_avg, exp_avg_sq, step): each tensor's error max|ours - ref64|
    / max|ref64 - before| (AdamW's moments against max|ref64|) within FACTOR
    x PyTorch float32's own error against the same reference, plus a floor
    for tensors at rounding level. AdamW divides each gradient element by its
    own magnitude, so which tensor holds an element whose rounding is
    magnified is chance (the key third of attn.c_attn.bias has a gradient of
    exactly 0 in exact arithmetic: softmax ignores a shift that is the same
    for every key, so its update is lr x rounding / (|rounding| + eps) in
    every float run): PyTorch float32's error is the largest over its plain
    run and four runs from the weights moved one ulp each (as recipe_check.py
    does), on the CPU and on the GPU the device map names; and a weight's
    elements whose float64 AdamW denominator sqrt(v-hat) is above 0 and
    under EPS_BAND (100) x eps are left out of both errors (counted in the
    line): their update g / (sqrt(v-hat) + eps) carries g's absolute
    rounding error times lr eps / (sqrt(v-hat) + eps)^2, up to lr / (4 eps),
    each run's own chance (0: no gradient at all, as for the rows of wte no
    token used, is kept). Those elements are checked in two parts instead:
    their gradients in AdamW's moments above (each moment's error against
    max|ref64|, every element), and
  - each weight against float64 AdamW applied to our own moments (exp_avg,
    exp_avg_sq, step) from the weights before the step: the update's own
    arithmetic, well conditioned (the same moments on both sides), within
    UPDATE_UNITS units of ulp(w) + lr 2^-21 at every element;
  - the gradient norm of --json (grad_norms, before clipping) against the
    value torch.nn.utils.clip_grad_norm_ returns in float64, within FACTOR of
    float32's error (1e-6 relative at least), and above the clip;
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

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_model  # noqa: E402
import adamw_state  # noqa: E402
import check_args  # noqa: E402
import st  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

LAYERS, HEADS, EMBD, POSITIONS = 4, 4, 128, 64
BATCH, MICRO = 4, 2
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 0.5
FACTOR = 3.0
FLOOR = 1e-6   # absolute allowance for tensors whose error is at rounding level
# The weights' errors leave out elements whose AdamW denominator sqrt(v-hat) is under
# EPS_BAND x eps (see the docstring): there an update is up to lr / (4 eps) times its
# gradient's rounding, each run's chance (the fifth and sixth GPU runs' failures: 0.32,
# 7e-4, 1e-12, 1.13 and 1.91 eps). From 100 eps on the sensitivity eps / sqrt(v-hat)^2 is
# under 1e-4 / eps and the weight's own rounding dominates.
EPS_BAND = 100.0
UPDATE_UNITS = 4.0  # our update against float64 AdamW on our own moments
LOSS_RTOL = 2e-5
PREFIXES = adamw_state.PREFIXES

PLAN = """\
model: {{name: gpt2, n_layer: {layers}, n_head: {heads}, n_embd: {embd}, vocab_size: {vocab},
        block_size: {positions}, tie_embeddings: {tied}}}
batch: {{size: {batch}, micro_batches: {micro}}}
schedule: 1f1b
optimizer: {{type: adamw, lr: {lr}, betas: [{beta1}, {beta2}], eps: {eps}, weight_decay: {wd},
            clip_grad_norm: {clip}}}
data: {{format: tokens, file: tokens.bin, shuffle: false}}
seed: 1
steps: 1
stages:
  - {{device: cpu:0, layers: [wte, wpe, h.0, h.1]}}
  - {{device: cpu:1, layers: [h.2, h.3, ln_f, lm_head]}}
"""


CHECKS = Checks(verbose=True, stream=sys.stdout)
check = CHECKS.check


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


def param_groups(m):
    """Our default AdamW groups: decay on matrices and embeddings, none on
    biases and layer norms (nanoGPT's rule: tensors of 2 dimensions decay)."""
    decay = [p for p in m.parameters() if p.ndim >= 2]
    rest = [p for p in m.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}]


def torch_step(state, vocab, tied, dtype, x, y, device="cpu"):
    """One step of our semantics from state (and its AdamW state, when it
    holds optimizer.*) on device. Returns (state after it in float64, with
    the AdamW state under our names; the loss; the gradient norm before
    clipping)."""
    m = build(state, vocab, tied, dtype).to(device)
    opt = torch.optim.AdamW(param_groups(m), lr=LR, betas=BETAS, eps=EPS)
    names = {p: n for n, p in m.named_parameters()}
    adamw_state.load(opt, names, state, dtype)
    opt.zero_grad(set_to_none=True)
    xt, yt = torch.from_numpy(x).long().to(device), torch.from_numpy(y).long().to(device)
    total = 0.0
    per = BATCH // MICRO
    for i in range(0, BATCH, per):
        logits = m(xt[i:i + per])
        loss = F.cross_entropy(logits.reshape(-1, vocab), yt[i:i + per].reshape(-1),
                               reduction="sum") / (BATCH * POSITIONS)
        loss.backward()
        total += float(loss.detach())
    norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP))
    opt.step()
    out = {k: v.detach().cpu().numpy().astype(np.float64) for k, v in m.state_dict().items()}
    adamw_state.save(out, opt, names)
    return out, total, norm


def moved(state, seed):
    """state with every weight moved one ulp of float32, up or down at random"""
    rng = np.random.default_rng(seed)
    out = dict(state)
    for k, v in state.items():
        if v.dtype == np.float32 and not k.startswith("optimizer."):
            out[k] = np.nextafter(v, np.where(rng.random(v.shape) < 0.5, np.inf, -np.inf),
                                  dtype=np.float32)
    return out


def torch32(state, vocab, tied, x, y):
    """PyTorch float32's runs: plain and from the weights moved one ulp, four
    ways, on each of TORCH_DEVICES (the states after the step, the gradient
    norms; the CPU's plain run's loss)"""
    runs = [torch_step(s, vocab, tied, torch.float32, x, y, dev) for dev in TORCH_DEVICES
            for s in [state] + [moved(state, seed) for seed in (5, 6, 7, 8)]]
    return [r[0] for r in runs], [r[2] for r in runs], runs[0][1]


def check_norm(title, ours, ref64, norms32):
    """the gradient norm within FACTOR of PyTorch float32's largest error
    (1e-6 relative at least), and above the clip"""
    err32 = max(abs(n - ref64) for n in norms32)
    check(abs(ours - ref64) <= FACTOR * err32 + 1e-6 * ref64,
          f"{title}: gradient norm {ours:.7f}, torch clip_grad_norm_ fp64 {ref64:.7f} "
          f"(rel. error {abs(ours - ref64) / ref64:.1e}, torch fp32's {err32 / ref64:.1e})")
    check(ref64 > CLIP, f"{title}: the clip clips (norm {ref64:.4f} > {CLIP})")


def torch_loss(state, vocab, tied, x, y):
    m = build(state, vocab, tied, torch.float64)
    with torch.no_grad():
        logits = m(torch.from_numpy(x).long())
        return float(F.cross_entropy(logits.reshape(-1, vocab), torch.from_numpy(y).long()
                                     .reshape(-1), reduction="sum") / (BATCH * POSITIONS))


def rel_err(x, ref, before, keep=None):
    d = np.abs(x.astype(np.float64) - ref)
    if keep is not None:
        d = d[keep]
    diff = float(np.max(d)) if d.size else 0.0
    scale = float(np.max(np.abs(ref - before))) if before is not None else 0.0
    if scale == 0.0:
        scale = float(np.max(np.abs(ref)))
    return diff / scale if scale > 0 else diff


def eps_dominated(ref64, name):
    """The elements of a weight whose update turns on the rounding of their
    gradient: AdamW's denominator sqrt(v-hat) above 0 and under eps in
    float64, so that the update g / (sqrt(v-hat) + eps) is about g / eps and
    carries g's absolute rounding error times lr / eps. Where g is itself
    rounding (the key third of attn.c_attn.bias, exactly 0 in exact
    arithmetic) each float run's error there is its own chance, larger in
    one run than another: the fifth GPU run's failures were all such
    elements (sqrt(v-hat) 0.32, 7e-4 and 1e-12 eps). None where name has no
    AdamW state."""
    v, t = ref64.get(PREFIXES[1] + name), ref64.get(PREFIXES[2] + name)
    if v is None or t is None:
        return None
    r = np.sqrt(v / (1.0 - BETAS[1] ** int(t)))
    return (r > 0) & (r < EPS_BAND * EPS)  # 0: no gradient (rows of wte no token used)


def adamw_scale(ref64, name, ours, keep):
    """Where a weight's worst element is (its largest |ours - ref64|) and
    AdamW's denominator there, sqrt(v-hat) in units of eps: near 1 the update
    g / (sqrt(v-hat) + eps) turns on the rounding of g itself, whichever
    backend rounds it"""
    v, t = ref64.get(PREFIXES[1] + name), ref64.get(PREFIXES[2] + name)
    if v is None or t is None:
        return ""
    d = np.abs(ours[name].astype(np.float64) - ref64[name])
    k = int(np.argmax(np.where(keep, d, -1.0) if keep is not None else d))
    vhat = float(v.reshape(-1)[k]) / (1.0 - BETAS[1] ** int(t))
    return f"; its element {k}: sqrt(v-hat) {np.sqrt(vhat):.1e} = {np.sqrt(vhat) / EPS:.3g} eps"


def compare(title, ours, ref64, runs32, before):
    """Each tensor: ours and torch fp32 (the largest error of its runs)
    against ref64; ours within FACTOR."""
    bad, worst, left_out = [], (0.0, ""), 0
    for name in sorted(ref64):
        if name.startswith(PREFIXES[2]):
            continue
        b = None if name.startswith("optimizer.") else before[name].astype(np.float64)
        if name not in ours:
            check(False, f"{title}: {name} missing from our checkpoint")
            continue
        low = None if b is None else eps_dominated(ref64, name)
        keep = None if low is None else ~low
        left_out += 0 if low is None else int(np.count_nonzero(low))
        eo = rel_err(ours[name], ref64[name], b, keep)
        et = max(rel_err(r[name], ref64[name], b, keep) for r in runs32)
        ratio = eo / et if et > 0 else 0.0
        if ratio > worst[0]:
            worst = (ratio, f"{name}: {eo:.2e} vs torch fp32 {et:.2e}"
                     + ("" if b is None else adamw_scale(ref64, name, ours, keep)))
        if eo > FACTOR * et + FLOOR:
            bad.append(f"{name}: {eo:.2e} vs {et:.2e}")
    n = sum(1 for k in ref64 if not k.startswith(PREFIXES[2]))
    check(not bad, f"{title}: {n} tensors within {FACTOR:g}x torch fp32's error "
                   f"(+{FLOOR:g}; {left_out} weight elements left out, where 0 < sqrt(v-hat) "
                   f"< {EPS_BAND:g} eps); worst ratio {worst[0]:.2f} ({worst[1]})"
          + "".join("; " + b for b in bad[:5]))


def check_update(title, ours, before):
    """Each weight against float64 AdamW (torch's formula: decoupled decay,
    then lr m-hat / (sqrt(v-hat) + eps)) applied to our own moments from the
    weights before the step: the update's arithmetic alone, in units of
    ulp(w) + lr 2^-21 per element"""
    worst, bad, n = (0.0, ""), [], 0
    for name in sorted(before):
        m, v = ours.get(PREFIXES[0] + name), ours.get(PREFIXES[1] + name)
        t = ours.get(PREFIXES[2] + name)
        if m is None or v is None or t is None or name not in ours:
            continue
        n += 1
        t = int(t)
        w0 = before[name].astype(np.float64)
        decay = WD if w0.ndim >= 2 else 0.0
        mhat = m.astype(np.float64) / (1.0 - BETAS[0] ** t)
        vhat = v.astype(np.float64) / (1.0 - BETAS[1] ** t)
        want = w0 * (1.0 - LR * decay) - LR * mhat / (np.sqrt(vhat) + EPS)
        unit = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) + LR * 2.0 ** -21
        d = np.abs(ours[name].astype(np.float64) - want) / unit
        k = int(np.argmax(d))
        if d.reshape(-1)[k] > worst[0]:
            worst = (float(d.reshape(-1)[k]), f"{name} element {k}")
        if d.reshape(-1)[k] > UPDATE_UNITS:
            bad.append(f"{name} element {k}: {d.reshape(-1)[k]:.1f} units")
    check(n > 0 and not bad,
          f"{title}: {n} weights within {UPDATE_UNITS:g} units (ulp(w) + lr 2^-21) of float64 "
          f"AdamW on our own moments; worst {worst[0]:.2f} ({worst[1]})"
          + "".join("; " + b for b in bad[:5]))


def check_steps(title, ours, n_params, want):
    steps = {k: int(v) for k, v in ours.items() if k.startswith(PREFIXES[2])}
    check(len(steps) == n_params and set(steps.values()) == {want},
          f"{title}: {len(steps)} AdamW step counts, all {want}")


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


DEVICE_MAP = []  # ["--device-map", MAP] when given
TORCH_DEVICES = ["cpu"]  # where PyTorch's float32 runs: the CPU, and the GPU the map names


def gpu_of(device_map):
    """The CUDA device a --device-map MAP sends stages to ("cuda:N" after an
    "="), when PyTorch sees it, with float32 matmuls kept IEEE (TF32 off);
    else None."""
    rules = device_map[1].split(",") if len(device_map) > 1 else []
    targets = [r.split("=", 1)[1].strip() for r in rules if "=" in r]
    gpus = [t for t in targets if t.startswith("cuda")]
    if not gpus or not torch.cuda.is_available():
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
    import torch_common  # noqa: E402  (tests/gpu, the bundle's gpu/: TF32 off on any PyTorch)
    print(f"PyTorch float32's runs on cpu and {gpus[0]}: {torch_common.ieee_fp32(torch)}")
    return gpus[0]


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
                            micro=MICRO, lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, wd=WD,
                            clip=CLIP))
    win = lambda s: np.stack([tokens[i * POSITIONS:i * POSITIONS + POSITIONS + 1]  # noqa: E731
                              for i in range(s * BATCH, (s + 1) * BATCH)])
    w0, w1 = win(0), win(1)
    x0, y0, x1, y1 = w0[:, :-1], w0[:, 1:], w1[:, :-1], w1[:, 1:]
    init = make_init(vocab, tied, vocab)
    st.save(path("init.safetensors"), init)

    j1, ours1 = run(exe, work, path("init.safetensors"), 1, path("step1.safetensors"), False)
    ref64, loss64, norm64 = torch_step(init, vocab, tied, torch.float64, x0, y0)
    runs32, norms32, loss32 = torch32(init, vocab, tied, x0, y0)
    check(sorted(ours1) == sorted(ref64),
          f"{title}: step-1 checkpoint holds the {len(init)} tensors of the PyTorch model and "
          f"AdamW's state under optimizer.exp_avg., optimizer.exp_avg_sq., optimizer.step. "
          f"({len(ref64)} in all)")
    rel = abs(j1["losses"][0] - loss64) / loss64
    rel32 = abs(loss32 - loss64) / loss64
    check(rel <= LOSS_RTOL, f"{title}: step-1 loss {j1['losses'][0]:.7f}, torch fp64 "
                            f"{loss64:.7f} (rel. error {rel:.1e}, torch fp32 {rel32:.1e})")
    check_norm(f"{title}, step 1", j1["grad_norms"][0], norm64, norms32)
    compare(f"{title}, step 1", ours1, ref64, runs32, init)
    check_update(f"{title}, step 1", ours1, init)
    check_steps(f"{title}, step 1", ours1, len(init), 1)

    j2, ours2 = run(exe, work, path("step1.safetensors"), 1, path("step2.safetensors"), False)
    ref64b, _, norm64b = torch_step(ours1, vocab, tied, torch.float64, x1, y1)
    runs32b, norms32b, _ = torch32(ours1, vocab, tied, x1, y1)
    check_norm(f"{title}, step 2", j2["grad_norms"][0], norm64b, norms32b)
    compare(f"{title}, step 2 (resumed from our step-1 weights and AdamW state)", ours2,
            ref64b, runs32b, ours1)
    check_update(f"{title}, step 2", ours2, ours1)
    check_steps(f"{title}, step 2", ours2, len(init), 2)

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
    rel = abs(l64 - j2["losses"][0]) / l64
    check(rel <= LOSS_RTOL, f"{title}: our step-1 weights' logits in PyTorch give loss "
                            f"{l64:.7f} on the next batch; ours printed {j2['losses'][0]:.7f} "
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
    a = check_args.parse(sys.argv, __doc__, "pp-gpt2-")
    if a is None:
        return 2
    exe, work = a.exe, a.work
    DEVICE_MAP.extend(a.device_map)
    gpu = gpu_of(DEVICE_MAP)
    if gpu:
        TORCH_DEVICES.append(gpu)
    for vocab, tied in ((256, True), (256, False), (50257, True)):
        check_model(exe, work, vocab, tied)
    return CHECKS.exit_code()


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        CHECKS.summary("gpt2_check")
    sys.exit(rc)
