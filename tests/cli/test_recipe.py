#!/usr/bin/env python3
"""The training recipe through the pipeline-run program: AdamW, gradient
clipping, label smoothing, weight-decay groups and deferred batch norm,
all on.

- Bitwise: a ResNet-18 (cifar stem, 16x16 synthetic images, batch 8 in
  micro-batches of 2) trained 2 steps saves the same bits in 1 stage; 2
  stages under gpipe, 1f1b and zbh1 (split backward); 4 stages under 1f1b,
  with recompute always, and as interleaved 1F1B and ZB-V on 2 devices; and
  --json's losses and gradient norms are the same numbers.
- Resume: the step-1 checkpoint (AdamW state) resumed for one step saves the
  bits of the 2-step run; --verify names the AdamW state; an SGD plan with
  momentum refuses to resume from it (no momentum state, exit 2, naming the
  AdamW state it holds) and --verify under that plan says so (exit 3); a
  weights-only file refused by --resume under the AdamW plan, and skipped by
  --resume auto saying why.
- The report: the summary's grad norm line, the progress line's norm, the
  --metrics grad_norm column on step rows (the top5_accuracy column on
  evaluation rows, with the eval line's top-5), --json's grad_norms.
- SGD with clipping: one step moves the weights as SGD without it at lr
  times the coefficient (to rounding).
- Memory: --memory --json counts two state tensors per parameter for AdamW
  (twice SGD-with-momentum's optimizer bytes).

Usage: test_recipe.py PIPELINE_RUN"""
import atexit
import csv
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="pp-recipe-")
atexit.register(shutil.rmtree, TMP, True)

LAYERS = ["conv1", "bn1", "relu", "maxpool", "layer1.0", "layer1.1", "layer2.0", "layer2.1",
          "layer3.0", "layer3.1", "layer4.0", "layer4.1", "avgpool", "fc"]


CHECKS = Checks()
check = CHECKS.check


def run(*args, env=None):
    e = dict(os.environ, PP_CPU_THREADS="1", **(env or {}))
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600, env=e)


def plan(name, stages, schedule="1f1b", extra="", optimizer=None):
    opt = optimizer or ("{type: adamw, lr: 0.002, betas: [0.9, 0.95], weight_decay: 0.05, "
                        "bias_weight_decay: 0.0, clip_grad_norm: 0.5}")
    text = (f"model: {{name: resnet18, num_classes: 10, in_channels: 3, stem: cifar}}\n"
            f"batch: {{size: 8, split_size: 2, deferred_batch_norm: true}}\n"
            f"schedule: {schedule}\noptimizer: {opt}\nloss: {{label_smoothing: 0.1}}\n"
            f"data: {{format: synthetic, image_size: [16, 16]}}\nseed: 3\nsteps: 2\n{extra}"
            f"stages:\n")
    for dev, cut in stages:
        text += f"  - {{device: cpu:{dev}, layers: [{', '.join(cut)}]}}\n"
    p = os.path.join(TMP, name + ".yaml")
    with open(p, "w") as f:
        f.write(text)
    return p


def cuts(bounds):
    return [LAYERS[a:b] for a, b in zip([0] + bounds, bounds + [len(LAYERS)])]


def read(p):
    with open(p, "rb") as f:
        return f.read()


def train(name, stages, *args, **kw):
    out = os.path.join(TMP, name + ".safetensors")
    r = run(plan(name, stages, **kw), "--json", "--save", out, *args)
    check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-400:]}")
    return (json.loads(r.stdout) if r.returncode == 0 else {}), out, r


def progress_line(p):
    """stderr of a 1-step run on a terminal (where the progress line is drawn)"""
    master, slave = pty.openpty()
    e = dict(os.environ, PP_CPU_THREADS="1")
    proc = subprocess.Popen([BIN, p, "--steps", "1"], stdout=subprocess.DEVNULL, stderr=slave,
                            env=e)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=600)
    os.close(master)
    return out.decode(errors="replace")


def test_bitwise():
    one = [(0, LAYERS)]
    j1, f1, r1 = train("one", one)
    check(len(j1.get("grad_norms", [])) == 2 and all(n > 0.5 for n in j1["grad_norms"]),
          f"one stage: two gradient norms above clip_grad_norm 0.5: {j1.get('grad_norms')}")
    check("grad norm" in r1.stderr, f"the summary's grad norm line: {r1.stderr[-500:]}")
    line = progress_line(plan("one", one))
    check("| norm " in line, f"the progress line's norm: {line[-300:]!r}")
    two, four = cuts([7]), cuts([5, 8, 11])
    variants = [
        ("2 stages gpipe", list(enumerate(two)), "gpipe", ""),
        ("2 stages 1f1b", list(enumerate(two)), "1f1b", ""),
        ("2 stages zbh1", list(enumerate(two)), "zbh1", ""),
        ("4 stages 1f1b recompute", list(enumerate(four)), "1f1b", "recompute: always\n"),
        ("4 stages interleaved on 2 devices", [(s % 2, c) for s, c in enumerate(four)],
         "interleaved1f1b", ""),
        ("4 stages zbv on 2 devices", [(0, four[0]), (1, four[1]), (1, four[2]), (0, four[3])],
         "zbv", ""),
    ]
    for i, (title, stages, sched, extra) in enumerate(variants):
        j, f, _ = train(f"v{i}", stages, schedule=sched, extra=extra)
        check(os.path.exists(f) and read(f) == read(f1), f"{title}: the 1-stage run's bits")
        check(j.get("losses") == j1.get("losses") and j.get("grad_norms") == j1.get("grad_norms"),
              f"{title}: losses and gradient norms {j.get('grad_norms')} vs {j1.get('grad_norms')}")
    return f1


def test_resume(f2):
    one = [(0, LAYERS)]
    s1 = os.path.join(TMP, "s1.safetensors")
    r = run(plan("one", one), "--steps", "1", "--save", s1)
    check(r.returncode == 0, f"step 1: {r.stderr[-300:]}")
    back = os.path.join(TMP, "back.safetensors")
    r = run(plan("one", one), "--resume", s1, "--save", back)
    check(r.returncode == 0 and read(back) == read(f2),
          f"resumed from the step-1 checkpoint: the 2-step run's bits ({r.stderr[-300:]})")
    r = run("--verify", s1, plan("one", one))
    check(r.returncode == 0 and r.stdout.rstrip().endswith("; AdamW state"),
          f"--verify names the AdamW state: {r.stdout!r} {r.stderr!r}")
    sgd = plan("sgd", one, optimizer="{type: sgd, lr: 0.1, momentum: 0.9}")
    r = run(sgd, "--resume", s1)
    check(r.returncode == 2 and f"s1.safetensors: no SGD momentum, which {sgd}'s optimizer "
          "resumes from (the file holds AdamW state); --resume needs it" in r.stderr,
          f"an SGD plan with momentum refuses AdamW's state: {r.returncode} {r.stderr[-300:]}")
    r = run("--verify", s1, sgd)
    check(r.returncode == 3 and "; AdamW state; --resume refuses it: no SGD momentum" in r.stdout,
          f"--verify under the SGD plan says --resume refuses it: {r.returncode} {r.stdout!r}")
    w = os.path.join(TMP, "w.safetensors")
    run(plan("one", one), "--steps", "1", "--save", w, "--weights-only")
    r = run(plan("one", one), "--resume", w)
    check(r.returncode == 2 and "w.safetensors: no AdamW state, which" in r.stderr and
          "(the file holds no optimizer state: saved with --weights-only?)" in r.stderr,
          f"--resume of a weights-only file under AdamW: {r.returncode} {r.stderr[-300:]}")
    auto = os.path.join(TMP, "auto.safetensors")  # (the run then saves over it)
    shutil.copyfile(w, auto)
    r = run(plan("one", one), "--resume", "auto", "--save", auto, "--steps", "1")
    check(r.returncode == 0 and f"--resume auto skips {auto}: no AdamW state, which" in r.stderr
          and "(the file holds no optimizer state: saved with --weights-only?)\n" in r.stderr,
          f"--resume auto says why it skips a weights-only file: {r.stderr[-400:]}")


def write_idx(name, dims, data):
    with open(os.path.join(TMP, name), "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + struct.pack(">" + "I" * len(dims), *dims) + data)


def test_metrics():
    one = [(0, LAYERS)]
    write_idx("ti.idx", (20, 3, 16, 16), bytes((i * 37) % 251 for i in range(20 * 3 * 256)))
    write_idx("tl.idx", (20,), bytes(i % 10 for i in range(20)))
    p = plan("m", one, extra="eval: {images: ti.idx, labels: tl.idx, batch_size: 8}\n")
    m = os.path.join(TMP, "m.csv")
    r = run(p, "--metrics", m, "--steps", "2", "--json")
    check(r.returncode == 0, f"--metrics run: {r.stderr[-300:]}")
    with open(m) as f:
        rows = list(csv.DictReader(f))
    steps = [row for row in rows if row["kind"] == "step"]
    evals = [row for row in rows if row["kind"] == "eval"]
    check(len(steps) == 2 and all(float(row["grad_norm"]) > 0 and row["top5_accuracy"] == ""
                                  for row in steps),
          f"--metrics: each step row has grad_norm and no top5_accuracy: {steps[:1]}")
    top5 = json.loads(r.stdout)["eval"]["top5_accuracy"] if r.returncode == 0 else None
    check(len(evals) == 1 and evals[0]["grad_norm"] == "" and top5 is not None
          and float(evals[0]["top5_accuracy"]) == top5 and "top-5" in r.stderr,
          f"--metrics: the evaluation row's top5_accuracy is --json's {top5} and the "
          f"summary's: {evals}")


def st_floats(p):
    """name -> list of floats of a safetensors file's F32 tensors"""
    b = read(p)
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        if v["dtype"] == "F32":
            a, e = v["data_offsets"]
            out[k] = struct.unpack(f"<{(e - a) // 4}f", b[8 + n + a:8 + n + e])
    return out


def test_sgd_clip():
    """SGD (no momentum, no decay) with clipping moves the weights as SGD without
    clipping at lr times clip_grad_norm_'s coefficient, to rounding."""
    one = [(0, LAYERS)]
    lr = 0.1
    j, f, _ = train("sgdclip", one, "--steps", "1",
                    optimizer=f"{{type: sgd, lr: {lr}, clip_grad_norm: 0.5}}")
    norm = (j.get("grad_norms") or [0])[0]
    coef = min(1.0, 0.5 / (norm + 1e-6))
    _, g, _ = train("sgdlr", one, "--steps", "1", optimizer=f"{{type: sgd, lr: {lr * coef!r}}}")
    a, b = st_floats(f), st_floats(g)
    worst = max(abs(x - y) for k in ("conv1.weight", "fc.weight", "layer3.0.conv2.weight")
                for x, y in zip(a[k], b[k]))
    check(coef < 1 and worst <= 2e-6,
          f"SGD with clipping (norm {norm:.4f}, coefficient {coef:.6f}) moves the weights as "
          f"lr x coefficient without it: largest difference {worst:.2e}")


def test_memory():
    one = [(0, LAYERS)]
    got = {}
    for name, opt in (("adamw", None), ("sgdm", "{type: sgd, lr: 0.1, momentum: 0.9}")):
        r = run(plan("mem-" + name, one, optimizer=opt), "--memory", "--json")
        check(r.returncode == 0, f"--memory {name}: {r.stderr[-300:]}")
        try:
            got[name] = json.loads(r.stdout)["stages"][0]["optimizer"]
        except (ValueError, KeyError, IndexError):
            got[name] = None
    check(got.get("adamw") and got.get("adamw") == 2 * got.get("sgdm"),
          f"--memory: AdamW's optimizer bytes twice SGD momentum's: {got}")


def main():
    f2 = test_bitwise()
    test_resume(f2)
    test_metrics()
    test_sgd_clip()
    test_memory()
    CHECKS.summary("test_recipe")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
