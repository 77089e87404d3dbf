#!/usr/bin/env python3
"""End-to-end tests of the pipeline-run program's training runs: checkpoints
(--save, --load, --weights-only, bad files), SIGINT, a NaN loss, data formats (IDX,
CIFAR-10, gzip), memory caps, epochs with evaluation, periodic checkpoints and --resume,
--steps on an epochs plan, precision tf32 on CPU devices. Usage: test_cli_training.py
PIPELINE_RUN SOURCE_ROOT"""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True  # importing the shared helpers leaves no __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_common import (BIN, DELAY, ROOT, TINY, TMP, check, idx_bytes,  # noqa: E402
                        jload, run, run_tests, short_data, write)


def test_memory_cap():
    capped = write("capped.yaml", open(TINY).read().replace(
        "  - device: cpu:1\n", "  - device: cpu:1\n    memory: 8MiB\n"))
    # predicted over the cap: refused before anything runs, at the cap
    r = run(capped, "--steps", "1")
    check(r.returncode == 2 and re.search(r"capped.yaml:\d+:13: stage 1 \(cpu:1\): predicted peak "
                                          r".* exceeds the memory cap of cpu:1, 8.0 MiB "
                                          r"\(8388608 bytes\); would fit: ", r.stderr) is not None,
          f"a stage's memory cap, predicted: exit {r.returncode} {r.stderr}")
    # without the prediction the cap holds at run time
    r = run(capped, "--steps", "1", env={**os.environ, "PP_MEMORY_CHECK": "off"})
    check(r.returncode == 1 and re.search(r"stage 1 \(cpu:1\): .*cpu:1: out of memory allocating "
                                          r"\d+ bytes .*limit 8388608", r.stderr) is not None,
          f"a stage's memory cap at run time: exit {r.returncode} {r.stderr}")
    roomy = write("roomy.yaml", open(TINY).read().replace(
        "  - device: cpu:1\n", "  - device: cpu:1\n    memory: 4GiB\n"))
    check(run(roomy, "--steps", "1").returncode == 0, "a generous memory cap runs")


def test_data_formats():
    data = os.path.join(ROOT, "tests", "plan", "data")
    idx = os.path.join(ROOT, "tests", "plan", "resnet50_idx.yaml")
    # micro-batches of one 28x28 image leave 1x1 planes at layer4, where batch norm cannot
    # train (PyTorch refuses too): the plan is refused at its batch section, naming the layer
    r = run(write("idx1.yaml", open(idx).read().replace("micro_batches: 1", "micro_batches: 2")
                  .replace("data/", os.path.join(data, ""))), "--device-map", "cuda:*=cpu")
    check(r.returncode == 2 and re.search(r"idx1\.yaml:7:3: batch 2 split into 2 gives a "
                                          r"micro-batch of 1 sample, and layer 'layer4\.0' \(batch "
                                          r"norm over one value per channel per sample\) needs at "
                                          r"least 2", r.stderr) is not None,
          f"idx plan with 1-sample micro-batches: exit {r.returncode} {r.stderr}")
    r = run(write("idx.yaml", open(idx).read().replace("data/", os.path.join(data, ""))),
            "--device-map", "cuda:*=cpu", "--steps", "1", "--json")
    check(r.returncode == 0, f"idx plan: exit {r.returncode} {r.stderr}")
    cifar = write("cifar.yaml", f"""\
model: {{name: resnet18, num_classes: 10, stem: cifar}}
batch: {{size: 2, split_size: 1}}
data: {{format: cifar10, files: [{data}/data_batch_1.bin, {data}/data_batch_2.bin],
        mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""")
    r = run(cifar, "--steps", "2", "--json")
    check(r.returncode == 0 and len(json.loads(r.stdout or "{}").get("losses", [])) == 2,
          f"cifar10 plan: exit {r.returncode} {r.stderr}")
    # a corrupt data file is bad input naming the file, not a crash
    bad = os.path.join(TMP, "bad_batch.bin")
    open(bad, "wb").write(b"\x07" * 100)
    r = run(write("badcifar.yaml", open(cifar).read().replace(f"{data}/data_batch_2.bin", bad)),
            "--steps", "1")
    check(r.returncode == 2 and "bad_batch.bin" in r.stderr, f"corrupt cifar file: {r.stderr}")


def test_checkpoints():
    a, b = os.path.join(TMP, "a.safetensors"), os.path.join(TMP, "b.safetensors")
    r = run(TINY, "--save", a, "--json")
    check(r.returncode == 0 and os.path.exists(a), f"--save: {r.returncode} {r.stderr}")
    loss_a = json.loads(r.stdout)["losses"]
    r = run(TINY, "--load", a, "--save", b, "--json", "--steps", "1")
    check(r.returncode == 0, f"--load: {r.returncode} {r.stderr}")
    with open(a, "rb") as f:
        header = json.loads(f.read(8 + int.from_bytes(open(a, "rb").read(8), "little"))[8:])
    check("layer3.1.bn2.running_var" in header and header["bn1.num_batches_tracked"]["dtype"]
          == "I64", "torchvision names and I64 num_batches_tracked")
    check(any(k.startswith("optimizer.momentum.") for k in header), "optimizer state saved")
    w = os.path.join(TMP, "w.safetensors")
    check(run(TINY, "--save", w, "--weights-only", "--steps", "1").returncode == 0,
          "--weights-only")
    hw = json.loads(open(w, "rb").read()[8:8 + int.from_bytes(open(w, "rb").read(8), "little")])
    check(not any(k.startswith("optimizer.") for k in hw), "--weights-only has no optimizer")
    # corrupt, truncated and mismatching files: exit 2 naming the file
    data = open(a, "rb").read()
    bad = {"trunc.safetensors": data[: len(data) // 2],
           "hdr.safetensors": data[:8] + b"{not json" + data[17:],
           "len.safetensors": (10 ** 12).to_bytes(8, "little") + data[8:]}
    for name, content in bad.items():
        path = os.path.join(TMP, name)
        open(path, "wb").write(content)
        r = run(TINY, "--load", path, "--steps", "1")
        check(r.returncode == 2 and name in r.stderr, f"{name}: exit {r.returncode} {r.stderr}")
    r34 = write("r34.yaml", open(TINY).read().replace("resnet18", "resnet34"))
    r = run(r34, "--load", a, "--steps", "1")
    check(r.returncode == 2 and "a.safetensors" in r.stderr and "tensor" in r.stderr,
          f"resnet18 file into resnet34: {r.stderr}")
    check(loss_a and all(x > 0 for x in loss_a), "losses positive")


def test_sigint():
    path = os.path.join(TMP, "int.safetensors")
    slow = write("slow.yaml", open(DELAY).read().replace("steps: 3", "steps: 100000"))
    p = subprocess.Popen([BIN, slow, "--save", path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 130, f"SIGINT: exit {p.returncode} {err}")
    check(os.path.exists(path) and "interrupted" in err, "SIGINT saves a checkpoint first")
    r = run(DELAY, "--load", path, "--steps", "1")
    check(r.returncode == 0, f"the interrupted checkpoint loads: {r.stderr}")


def test_nan_loss():
    nan = write("nan.yaml", open(TINY).read().replace("lr: 0.05", "lr: 1.0e+10")
                .replace("steps: 2", "steps: 6"))
    r = run(nan)
    check(r.returncode == 1, f"NaN loss: exit {r.returncode}")
    check(re.search(r"stage 1 \(cpu:1\) micro-batch \d+: the loss is (NaN|infinite)", r.stderr)
          is not None, f"NaN loss message: {r.stderr!r}")


def test_epochs_eval():
    """epochs with evaluation on gzip IDX data: a line per epoch, --metrics, JSON epochs,
    --eval-only of the saved checkpoint; bad data files are exit 2 naming the file."""
    import gzip

    def labels(n, seed):
        return [(i * 7 + seed) % 4 for i in range(n)]

    def images(n, seed):
        lab = labels(n, seed)
        return [(180 if k % 12 < 3 * (lab[i] + 1) else 40) + (i * 31 + k * 17 + seed) % 50
                for i in range(n) for k in range(144)]

    files = {}
    for name, n, seed in (("train", 40, 1), ("test", 20, 2)):
        for kind, dims, data in (("images", [n, 12, 12], images(n, seed)),
                                 ("labels", [n], labels(n, seed))):
            path = os.path.join(TMP, f"{name}-{kind}.idx.gz")
            with gzip.open(path, "wb") as f:
                f.write(idx_bytes(dims, data))
            files[f"{name}_{kind}"] = path
    plan_text = f"""\
model: {{name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}}
batch: {{size: 16, split_size: 8}}
schedule: 1f1b
optimizer: {{lr: 0.05, momentum: 0.9, lr_schedule: {{type: cosine, warmup: 1}}}}
data: {{format: idx, images: {files["train_images"]}, labels: {files["train_labels"]}, shuffle: true}}
epochs: 2
eval: {{images: {files["test_images"]}, labels: {files["test_labels"]}, batch_size: 6}}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""
    plan = write("epochs.yaml", plan_text)
    metrics = os.path.join(TMP, "metrics.csv")
    ckpt = os.path.join(TMP, "epochs.safetensors")
    plot = os.path.join(TMP, "training.svg")
    r = run(plan, "--json", "--metrics", metrics, "--save", ckpt, "--plot", plot)
    check(r.returncode == 0, f"epochs plan: exit {r.returncode} {r.stderr}")
    check(len(re.findall(r"^epoch [12]/2 +train loss [\d.]+ +train acc [\d.]+ +test loss [\d.]+ +"
                         r"test acc [\d.]+", r.stderr, re.M)) == 2, f"epoch lines: {r.stderr}")
    check("(2 epochs of 3)" in r.stderr, "steps per epoch announced")
    svg = ET.parse(plot).getroot() if os.path.exists(plot) else None
    lines = [e for e in (svg.iter() if svg is not None else []) if e.tag.endswith("polyline")]
    check(len(lines) == 3 and all(len(e.get("points", "").split()) == 2 for e in lines),
          "--plot: train loss, test loss and test accuracy over 2 epochs")
    out = json.loads(r.stdout or "{}")
    eps = out.get("epochs", [])
    check(len(eps) == 2 and all(set(e) >= {"epoch", "train_loss", "test_loss", "test_acc",
                                         "seconds"} for e in eps), f"JSON epochs: {eps}")
    check(len(out.get("losses", [])) == 6 and "eval" in out, "JSON losses (6 steps) and eval")
    rows = list(csv.DictReader(open(metrics)))
    kinds = [row["kind"] for row in rows]
    check(kinds == ["step"] * 3 + ["eval"] + ["step"] * 3 + ["eval"], f"metrics rows: {kinds}")
    check([int(row["batch"]) for row in rows if row["kind"] == "step"] == [16, 16, 8] * 2,
          "the last batch of an epoch holds the rest (40 = 16 + 16 + 8)")
    lrs = [float(row["lr"]) for row in rows if row["kind"] == "step"]
    check(abs(lrs[0] - 0.05 / 3) < 1e-9 and abs(lrs[3] - 0.05) < 1e-9,
          f"cosine warm-up: lr per epoch {lrs}")
    # the checkpoint evaluates to the run's last test figures
    r = run(plan, "--eval-only", "--load", ckpt, "--json")
    ev = json.loads(r.stdout or "{}").get("eval", {})
    check(r.returncode == 0 and ev.get("loss") == out.get("eval", {}).get("loss") and
          ev.get("accuracy") == out.get("eval", {}).get("accuracy"),
          f"--eval-only reproduces the last evaluation: {r.returncode} {r.stderr} {ev}")
    r = run(plan, "--eval-only")
    check(r.returncode == 2 and "--eval-only needs --load" in r.stderr, "--eval-only without --load")
    # periodic checkpoints and --resume: 1 epoch + resume 1 epoch is bitwise 2 epochs straight
    ckdir = os.path.join(TMP, "ck")
    os.makedirs(ckdir, exist_ok=True)
    ck_text = plan_text + f"checkpoint: {{every: 1, path: '{ckdir}/ck-{{epoch}}.safetensors', keep: 2}}\n"
    straight = os.path.join(TMP, "straight.safetensors")
    r = run(write("ck.yaml", ck_text), "--save", straight)
    check(r.returncode == 0 and sorted(os.listdir(ckdir)) == ["ck-1.safetensors", "ck-2.safetensors"],
          f"checkpoint every epoch: {r.returncode} {os.listdir(ckdir)} {r.stderr}")
    resumed = os.path.join(TMP, "resumed.safetensors")
    r = run(write("ck2.yaml", plan_text), "--resume", os.path.join(ckdir, "ck-1.safetensors"),
            "--save", resumed, "--json")
    check(r.returncode == 0 and "resuming" in r.stderr and "epoch 2/2" in r.stderr and
          "epoch 1/2" not in r.stderr, f"--resume after epoch 1: {r.returncode} {r.stderr}")
    same = os.path.exists(resumed) and open(resumed, "rb").read() == open(straight, "rb").read()
    check(same, "resumed run saves the bitwise same checkpoint as the uninterrupted one")
    check(open(os.path.join(ckdir, "ck-2.safetensors"), "rb").read() == open(straight, "rb").read(),
          "the epoch-2 checkpoint equals the final save")
    for f in os.listdir(ckdir):
        os.unlink(os.path.join(ckdir, f))
    r = run(write("ck3.yaml", ck_text.replace("keep: 2", "keep: 1")))
    check(r.returncode == 0 and os.listdir(ckdir) == ["ck-2.safetensors"], f"keep 1: {os.listdir(ckdir)}")
    weights = os.path.join(TMP, "weights.safetensors")
    run(plan, "--steps", "1", "--save", weights, "--weights-only")
    r = run(plan, "--resume", weights)
    check(r.returncode == 2 and "no optimizer state" in r.stderr, f"--resume of weights: {r.stderr}")
    r = run(write("ck4.yaml", plan_text + "checkpoint: {path: nowhere.safetensors}\n"))
    check(r.returncode == 2 and "must contain {epoch}" in r.stderr, f"checkpoint path: {r.stderr}")
    # bad data files: exit 2, naming them
    cut = os.path.join(TMP, "cut.idx.gz")
    open(cut, "wb").write(open(files["train_images"], "rb").read()[:300])
    notidx = os.path.join(TMP, "notidx.idx")
    open(notidx, "wb").write(b"\x12\x34\x56\x78" + bytes(100))
    short = os.path.join(TMP, "short-labels.idx")
    open(short, "wb").write(idx_bytes([10], labels(10, 1)))
    for what, text, name in (
            ("truncated gzip", plan_text.replace(files["train_images"], cut), "cut.idx.gz"),
            ("wrong IDX magic", plan_text.replace(files["train_images"], notidx), "notidx.idx"),
            ("label count", plan_text.replace(files["train_labels"], short), "short-labels.idx"),
            ("label range", plan_text.replace("num_classes: 4", "num_classes: 3"),
             "train-labels.idx.gz")):
        r = run(write("bad-data.yaml", text), "--steps", "1")
        check(r.returncode == 2 and name in r.stderr, f"{what}: exit {r.returncode} {r.stderr}")
    r = run(write("both.yaml", plan_text.replace("epochs: 2", "epochs: 2\nsteps: 3")))
    check(r.returncode == 2 and re.search(r"both.yaml:\d+:\d+: give steps or epochs, not both",
                                          r.stderr) is not None, f"steps and epochs: {r.stderr}")


def tensors_of(path):
    """A safetensors file's tensors (their header entries and bytes), without its metadata
    (which records the plan's precision)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return header, blob[8 + n:]


def test_tf32_on_cpu():
    """precision tf32 is accepted, round-trips through --validate, and on CPU devices says once
    that it computes fp32: the run equals the fp32 one bitwise"""
    tf32 = write("tf32.yaml", open(TINY).read().replace("schedule: gpipe", "schedule: gpipe\nprecision: tf32"))
    r = run(tf32, "--validate")
    check(r.returncode == 0 and "precision: tf32" in r.stdout, f"tf32 --validate: {r.stderr}")
    a, b = os.path.join(TMP, "fp32.safetensors"), os.path.join(TMP, "tf32.safetensors")
    run(TINY, "--steps", "2", "--save", a)
    r = run(tf32, "--steps", "2", "--save", b)
    check(r.returncode == 0 and r.stderr.count("precision tf32: stages on CPU devices compute in "
                                              "IEEE fp32") == 1, f"tf32 note once: {r.stderr}")
    check(os.path.exists(b) and tensors_of(a) == tensors_of(b),
          "tf32 on the CPU backend equals fp32 bitwise")


def test_steps_on_epochs():
    """--steps on an epochs plan: the header says what runs, the partial epoch gets its line,
    row and the evaluation at the end; copies are medians (the short last batch of an epoch
    does not set them); a plan with neither steps nor epochs says it runs one step"""
    img, lab = short_data(40, h=12, name="e")
    timg, tlab = short_data(10, h=12, name="et")
    plan = write("e.yaml", f"""\
model: {{name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}}
batch: {{size: 16, split_size: 8}}
data: {{format: idx, images: {img}, labels: {lab}}}
epochs: 3
eval: {{images: {timg}, labels: {tlab}}}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""")
    metrics = os.path.join(TMP, "e.csv")
    r = run(plan, "--steps", "2", "--json", "--metrics", metrics)
    o = jload(r.stdout)
    check(r.returncode == 0 and "2 steps (--steps 2: 2 of the 3 steps of epoch 1 of 3, then the "
          "test set)" in r.stderr, f"header: {r.returncode} {r.stderr}")
    check(re.search(r"^epoch 1/3 \(2 of 3 steps\)  train loss [\d.]+  train acc [\d.]+  test loss",
                    r.stderr, re.M) is not None, f"partial epoch line: {r.stderr}")
    check(o.get("eval", {}).get("samples") == 10 and o.get("epochs", [{}])[0].get("partial") is True
          and o["epochs"][0].get("steps") == 2, f"JSON eval and epochs: {o.get('epochs')}")
    kinds = [row["kind"] for row in csv.DictReader(open(metrics))] if os.path.exists(metrics) else []
    check(kinds == ["step", "step", "eval"], f"metrics rows: {kinds}")
    # batches 16, 16, 8, 16, 16, 8: the last step's copies are half the others'
    full = jload(run(plan, "--steps", "1", "--json").stdout).get("copies", {})
    six = jload(run(plan, "--steps", "6", "--json").stdout).get("copies", {})
    check(full.get("bytes", 0) > 0 and six.get("bytes") == full.get("bytes"),
          f"copies are the median step's: {six} against one full batch's {full}")
    check("epochs 1 to 2 of 3, 3 steps each)" in run(plan, "--steps", "6").stderr, "--steps 6 header")
    neither = write("neither.yaml", open(DELAY).read().replace("steps: 3\n", ""))
    r = run(neither)
    check(r.returncode == 0 and "1 step (the plan gives neither steps nor epochs: one step)" in
          r.stderr, f"neither steps nor epochs: {r.stderr}")
    check("gives neither" not in run(neither, "--steps", "2").stderr,
          "--steps says what runs itself")


run_tests("cli_training", [
    test_memory_cap,
    test_data_formats,
    test_checkpoints,
    test_sigint,
    test_nan_loss,
    test_epochs_eval,
    test_tf32_on_cpu,
    test_steps_on_epochs,
])
