#!/usr/bin/env python3
"""Checkpoint integrity and long-run robustness of the pipeline-run program:
damaged files refused naming the tensor (4 bytes changed in one tensor, NaN
in a weight), files written the way the safetensors library writes them still
load, --verify (exit 3 for a file that loads but does not resume: weights
alone, another batch size), SIGTERM and SIGINT a few steps in (exit 143 / 130, a
checkpoint of the step reached, --resume auto ending bitwise where a run that
never stopped ends), a second signal during a save, kill -9 during saves
(repeated: every file verifies or is absent, no temporary left once the next
run starts), and the checks of --resume (another batch size refused naming
batch.size, a finished run's summary and JSON, an epoch's line after a
mid-epoch resume equal to the uninterrupted run's).

Usage: test_checkpoints.py PIPELINE_RUN"""
import atexit
import gzip
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])


CHECKS = Checks()
check = CHECKS.check


def run(*args, timeout=300, **kw):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, **kw)


TMP = tempfile.mkdtemp(prefix="pp-ckpt-")
atexit.register(shutil.rmtree, TMP, True)


def path(*names):
    return os.path.join(TMP, *names)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def read(p):
    with open(p, "rb") as f:
        return f.read()


# ---- safetensors, by the format's spec ---------------------------------------

def st_load(p):
    """(header dict without __metadata__, metadata dict, data bytes, data start)"""
    b = read(p)
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return h, meta, b[8 + n:], 8 + n


def st_tensors(p):
    h, _, data, _ = st_load(p)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in h.items()}


DTYPE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32",
               "U32", "F32", "F64", "I64", "U64"]


def st_save_like_library(p, tensors, metadata):
    """Writes name -> (dtype, shape, bytes) as the safetensors library's serialize
    does: tensors by dtype (its enum order, largest first), then name; compact
    JSON with __metadata__ first and fields dtype, shape, data_offsets; spaces
    pad the header so the data starts at a multiple of 8."""
    order = sorted(tensors, key=lambda k: (-DTYPE_ORDER.index(tensors[k][0]), k))
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for k in order:
        dtype, shape, data = tensors[k]
        header[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def same_tensors(a, b):
    return st_tensors(a) == st_tensors(b)


# ---- plans ---------------------------------------------------------------------

# resnet18 with the cifar stem on 8x8 images: about 45 MB of parameters, so a
# checkpoint (with momentum) takes long enough to be caught while it is written.
# The stage list leaves the stem's identity maxpool out; image_size: 8 is [8, 8].
def plan_text(steps=12, every=1, keep=3, ckdir="ck", extra=""):
    return f"""\
model: {{name: resnet18, num_classes: 10, stem: cifar}}
batch: {{size: 4, split_size: 2}}
schedule: 1f1b
optimizer: {{type: sgd, lr: 0.01, momentum: 0.9}}
data: {{format: synthetic, image_size: 8}}
seed: 3
steps: {steps}
checkpoint: {{every: {every}, path: '{path(ckdir)}/ck-{{step}}.safetensors', keep: {keep}}}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
{extra}"""


def ckfiles(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def temporaries(d):
    return [f for f in os.listdir(d) if ".tmp-" in f]


def wait_for(pred, timeout=120, step=0.002):
    end = time.time() + timeout
    while time.time() < end:
        r = pred()
        if r:
            return r
        time.sleep(step)
    return None


def verify_all(d):
    files = [os.path.join(d, f) for f in ckfiles(d)]
    if not files:
        return True, ""
    r = run("--verify", *files)
    return r.returncode == 0 and r.stdout.count(": ok:") == len(files), r.stdout + r.stderr


# ---- 1. integrity ----------------------------------------------------------------

def test_integrity():
    plan = write("int.yaml", plan_text(steps=2, ckdir="int-ck"))
    os.makedirs(path("int-ck"), exist_ok=True)
    good = path("good.safetensors")
    r = run(plan, "--save", good)
    check(r.returncode == 0, f"save: {r.stderr}")
    h, meta, data, start = st_load(good)
    check(all(f"checksum.{k}" in meta for k in h) and "checksum.__header__" in meta,
          "a checksum per tensor and the header's in __metadata__")
    check(meta.get("pipeline-run.plan.batch.size") == "4" and meta.get("pipeline-run.steps") == "2",
          f"the plan and the steps recorded: {sorted(k for k in meta if 'checksum' not in k)}")
    r = run("--verify", good, plan)
    check(r.returncode == 0 and "checksums verified, step 2, loads into" in r.stdout,
          f"--verify with the plan: {r.stdout} {r.stderr}")

    # 4 bytes changed inside one tensor: refused by --load, --resume and --verify, exit 2
    b = bytearray(read(good))
    lo, hi = h["layer3.0.conv1.weight"]["data_offsets"]
    at = start + (lo + hi) // 2
    b[at:at + 4] = bytes(x ^ 0xA5 for x in b[at:at + 4])
    bad = path("bad.safetensors")
    open(bad, "wb").write(bytes(b))
    for args in (("--load", bad), ("--resume", bad)):
        r = run(plan, *args, "--steps", "1")
        check(r.returncode == 2 and "bad.safetensors" in r.stderr and
              "tensor 'layer3.0.conv1.weight': checksum mismatch" in r.stderr,
              f"{args[0]} of a changed tensor: exit {r.returncode} {r.stderr[-400:]}")
    r = run("--verify", good, bad)
    check(r.returncode == 2 and "good.safetensors: ok" in r.stdout and
          "layer3.0.conv1.weight': checksum mismatch" in r.stderr and
          "1 of 2 files failed" in r.stderr, f"--verify good bad: {r.stdout} {r.stderr}")

    # files as the safetensors library writes them: no checksums; they load
    tensors = st_tensors(good)
    plain_meta = {"format": "pt", "pipeline-run.steps": "2"}
    lib = path("library.safetensors")
    st_save_like_library(lib, tensors, plain_meta)
    a, b2 = path("from-good.safetensors"), path("from-lib.safetensors")
    ra = run(plan, "--load", good, "--steps", "1", "--save", a)
    rb = run(plan, "--load", lib, "--steps", "1", "--save", b2)
    check(ra.returncode == 0 and rb.returncode == 0, f"--load library file: {rb.stderr[-400:]}")
    check(rb.returncode == 0 and read(a) == read(b2),
          "a file of the library's layout loads to the same state (bitwise the same next save)")
    r = run("--verify", lib)
    check(r.returncode == 0 and "no checksums (values checked)" in r.stdout, f"--verify: {r.stdout}")

    # weights alone (as --weights-only, torch or Hugging Face write them): they load, and
    # --resume refuses them; --verify with the plan says so, exit 3
    weights = path("weights.safetensors")
    st_save_like_library(weights, {k: v for k, v in tensors.items()
                                   if not k.startswith("optimizer.")}, {})
    r = run(plan, "--resume", weights)
    check(r.returncode == 2, f"--resume of weights alone: {r.returncode} {r.stderr[-300:]}")
    r = run("--verify", weights, plan)
    check(r.returncode == 3 and "weights.safetensors: ok: 122 tensors" in r.stdout and
          f"; no optimizer state; --resume refuses it: no SGD momentum, which {plan}'s "
          "optimizer resumes from (--load takes it)\n" in r.stdout and
          "1 of 1 file would not resume under" in r.stderr,
          f"--verify of weights alone with the plan: {r.returncode} {r.stdout!r} {r.stderr!r}")
    r = run("--verify", good, weights, plan)
    check(r.returncode == 3 and r.stdout.count("--resume refuses it") == 1 and
          r.stdout.startswith(f"{good}: ok:") and "; SGD momentum\n" in r.stdout,
          f"--verify of a good file and weights alone: {r.returncode} {r.stdout!r}")
    r = run("--verify", weights)
    check(r.returncode == 0 and "--resume" not in r.stdout + r.stderr,
          f"--verify of weights alone without a plan: {r.returncode} {r.stdout!r}")
    # another batch size: the file loads, and its steps mean something else
    b8 = write("b8.yaml", open(plan).read().replace("size: 4, split", "size: 8, split"))
    r = run("--verify", good, b8)
    check(r.returncode == 3 and "batch.size: 4 in the checkpoint, 8 in the plan" in r.stderr and
          "--resume refuses it: its steps mean something else under" in r.stdout,
          f"--verify under another batch size: {r.returncode} {r.stdout!r} {r.stderr!r}")

    # NaN inside a weight (a file without checksums, as torch would write it): exit 2
    dtype, shape, raw = tensors["layer1.0.conv2.weight"]
    raw = bytearray(raw)
    raw[40:44] = struct.pack("<f", float("nan"))
    tensors_nan = dict(tensors)
    tensors_nan["layer1.0.conv2.weight"] = (dtype, shape, bytes(raw))
    nan = path("nan.safetensors")
    st_save_like_library(nan, tensors_nan, plain_meta)
    r = run(plan, "--load", nan, "--steps", "1")
    check(r.returncode == 2 and "nan.safetensors: tensor 'layer1.0.conv2.weight'" in r.stderr and
          "holds NaN or Inf (element 10)" in r.stderr, f"NaN weight: {r.returncode} {r.stderr}")
    # Inf in optimizer state
    dtype, shape, raw = tensors["optimizer.momentum.fc.bias"]
    tensors_inf = dict(tensors)
    tensors_inf["optimizer.momentum.fc.bias"] = (dtype, shape,
                                                 struct.pack("<f", float("inf")) + raw[4:])
    inf = path("inf.safetensors")
    st_save_like_library(inf, tensors_inf, plain_meta)
    r = run(plan, "--resume", inf)
    check(r.returncode == 2 and "tensor 'optimizer.momentum.fc.bias'" in r.stderr and
          "NaN or Inf" in r.stderr, f"Inf momentum: {r.returncode} {r.stderr}")
    r = run("--verify", nan, inf)
    check(r.returncode == 2 and r.stderr.count("holds NaN or Inf") == 2, f"--verify NaN: {r.stderr}")
    # --verify against a plan of another model: the tensors do not fit
    r34 = write("r34.yaml", open(plan).read().replace("resnet18", "resnet34"))
    r = run("--verify", good, r34)
    check(r.returncode == 2 and "model.name: resnet18 in the checkpoint, resnet34 in the plan"
          in r.stderr, f"--verify with another model: {r.stderr}")
    r = run("--verify", lib, r34)
    check(r.returncode == 2 and "library.safetensors: tensor" in r.stderr,
          f"--verify of a file without a plan against resnet34: {r.stderr}")


# ---- 2. preemption --------------------------------------------------------------

def test_signals():
    """SIGTERM (and SIGINT) a few steps in: 143 (130), the checkpoint of the step reached,
    and --resume auto ends bitwise as the run that never stopped."""
    ref_dir = path("ref-ck")
    os.makedirs(ref_dir)
    ref = path("ref.safetensors")
    r = run(write("ref.yaml", plan_text(steps=12, every=5, ckdir="ref-ck")), "--save", ref)
    check(r.returncode == 0, f"uninterrupted run: {r.stderr[-500:]}")
    check(ckfiles(ref_dir) == ["ck-10.safetensors", "ck-12.safetensors", "ck-5.safetensors"],
          f"periodic files and the last step's: {ckfiles(ref_dir)}")
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        name = sig.name.lower()
        d = path(f"{name}-ck")
        os.makedirs(d)
        plan = write(f"{name}.yaml", plan_text(steps=12, every=5, ckdir=f"{name}-ck"))
        p = subprocess.Popen([BIN, plan], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        check(wait_for(lambda: "ck-5.safetensors" in ckfiles(d)) is not None, "ck-5 appears")
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        m = re.search(r"interrupted after (\d+) steps? by (\w+) \(the run is at step (\d+)\): "
                      r"saved (\S+)", err)
        check(p.returncode == code and m is not None and m.group(2) == sig.name,
              f"{sig.name}: exit {p.returncode}, {err[-600:]}")
        if not m:
            continue
        step = int(m.group(3))
        check(5 <= step < 12 and m.group(4) == os.path.join(d, f"ck-{step}.safetensors"),
              f"{sig.name}: the checkpoint of the step reached ({step}): {m.group(4)}")
        ok, why = verify_all(d)
        check(ok and not temporaries(d), f"{sig.name}: files verify: {why}")
        r = run(plan, "--resume", "auto", "--save", path(f"{name}-end.safetensors"), "--json")
        check(r.returncode == 0 and f"resuming {os.path.join(d, f'ck-{step}.safetensors')} "
              f"after step {step}" in r.stderr, f"--resume auto: {r.stderr[-500:]}")
        out = json.loads(r.stdout or "{}")
        check(out.get("resumed_from") == step and out.get("steps_done") == 12 and
              out.get("steps") == 12 - step and out.get("steps_left") == 0,
              f"JSON of the resumed run: { {k: out.get(k) for k in ('steps', 'steps_done')} }")
        check(read(path(f"{name}-end.safetensors")) == read(ref),
              f"{sig.name} + --resume auto: the same bits as the run that never stopped")
        check(read(os.path.join(d, "ck-12.safetensors")) == read(os.path.join(ref_dir,
                                                                               "ck-12.safetensors")),
              f"{sig.name}: the series' last file too")
        # keep 3 counts the files of the run resumed from: 5, step, 10, 12 -> the newest 3
        want = sorted({f"ck-{n}.safetensors" for n in sorted({5, step, 10, 12})[-3:]})
        check(ckfiles(d) == want, f"{sig.name}: keep 3 across the resume: {ckfiles(d)}")
    # --resume auto with nothing to resume: a fresh start, said so
    d = path("fresh-ck")
    os.makedirs(d)
    r = run(write("fresh.yaml", plan_text(steps=2, ckdir="fresh-ck")), "--resume", "auto")
    check(r.returncode == 0 and "no checkpoint to resume from" in r.stderr and
          "starting from step 0" in r.stderr, f"--resume auto, fresh: {r.stderr[-300:]}")
    # the newest file damaged: skipped with a warning, the one before is used
    b = bytearray(read(os.path.join(d, "ck-2.safetensors")))
    b[-100] ^= 0xFF
    open(os.path.join(d, "ck-2.safetensors"), "wb").write(bytes(b))
    r = run(path("fresh.yaml"), "--resume", "auto", "--steps", "1")
    check(r.returncode == 0 and "warning: --resume auto skips" in r.stderr and
          "ck-2.safetensors" in r.stderr and "checksum mismatch" in r.stderr and
          "after step 1" in r.stderr, f"--resume auto skips a damaged file: {r.stderr[-600:]}")
    r = run(write("noseries.yaml", plan_text(steps=2).split("checkpoint:")[0] +
                  "stages:" + plan_text(steps=2).split("stages:")[1]), "--resume", "auto")
    check(r.returncode == 2 and "--resume auto needs a checkpoint: section" in r.stderr,
          f"--resume auto without a series: {r.stderr}")


def test_second_signal():
    """A second signal while the final checkpoint is written: the program ends at once, the
    save abandoned, nothing partial left; the files on disk all verify. One signal delivered
    twice at once (to the process and its group) counts once."""
    d = path("twice-ck")
    os.makedirs(d)
    plan = write("twice.yaml", plan_text(steps=100000, every=1000, ckdir="twice-ck"))
    metrics = path("twice.csv")

    def started():  # a step has run (--metrics writes a row per step)
        return os.path.exists(metrics) and open(metrics).read().count("\nstep,") >= 1

    p = subprocess.Popen([BIN, plan, "--metrics", metrics], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    check(wait_for(started, timeout=120, step=0.01), "the first step ran")
    p.send_signal(signal.SIGTERM)
    seen = wait_for(lambda: temporaries(d), timeout=60, step=0.0002)
    t0 = time.time()
    p.send_signal(signal.SIGINT)  # the other kind: at once
    out, err = p.communicate(timeout=60)
    check(p.returncode == 143, f"SIGTERM then SIGINT: exit {p.returncode} {err[-400:]}")
    check(seen and "save was abandoned" in err, f"the save was abandoned: {err[-400:]}")
    check(not temporaries(d) and ckfiles(d) == [], f"no file, no temporary: {os.listdir(d)}")
    print(f"second signal: ended {time.time() - t0:.3f} s after it", file=sys.stderr)
    # one SIGTERM delivered twice: one stop, the checkpoint written
    os.unlink(metrics)
    p = subprocess.Popen([BIN, plan, "--metrics", metrics], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    check(wait_for(started, timeout=120, step=0.01), "the first step ran")
    p.send_signal(signal.SIGTERM)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    m = re.search(r"the run is at step (\d+)\): saved (\S+)", err)
    check(p.returncode == 143 and m is not None and os.path.exists(m.group(2)),
          f"SIGTERM twice at once: {p.returncode} {err[-400:]}")
    ok, why = verify_all(d)
    check(ok and not temporaries(d), f"every file verifies: {why}")


def test_kill9():
    """kill -9 while checkpoints are written, five times: every file verifies or is absent,
    the next start removes the temporary left (and says so), and the run resumed each time
    ends bitwise as the run that never stopped."""
    steps = 10
    ref_dir, d = path("k9-ref"), path("k9-ck")
    os.makedirs(ref_dir)
    os.makedirs(d)
    ref = path("k9-ref.safetensors")
    r = run(write("k9-ref.yaml", plan_text(steps=steps, keep=2, ckdir="k9-ref")), "--save", ref)
    check(r.returncode == 0, f"k9 reference: {r.stderr[-300:]}")
    plan = write("k9.yaml", plan_text(steps=steps, keep=2, ckdir="k9-ck"))
    caught, cleaned = 0, 0
    for attempt in range(5):
        before = temporaries(d)
        p = subprocess.Popen([BIN, plan, "--resume", "auto"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        # a temporary of this run (not one a previous kill left)
        tmp = wait_for(lambda: [t for t in temporaries(d) if t not in before] or
                       (p.poll() is not None), timeout=120, step=0.0005)
        p.kill()
        _, err = p.communicate(timeout=60)
        cleaned += err.count("(the temporary file of a save that did not finish)")
        if isinstance(tmp, list):
            caught += 1
        ok, why = verify_all(d)
        check(ok, f"kill -9 #{attempt}: every checkpoint on disk verifies: {why}")
    check(caught >= 3, f"kill -9 landed during a save {caught} of 5 times")
    left = temporaries(d)
    r = run(plan, "--resume", "auto", "--save", path("k9-end.safetensors"))
    check(r.returncode == 0, f"k9 final resume: {r.stderr[-400:]}")
    cleaned += r.stderr.count("(the temporary file of a save that did not finish)")
    check(not temporaries(d), f"no temporary file left: {os.listdir(d)}")
    check(cleaned >= 1 and (cleaned >= len(left)), f"stale temporaries removed and said: {cleaned}")
    check(read(path("k9-end.safetensors")) == read(ref),
          "resumed after five kill -9: the same bits as the run that never stopped")
    ok, why = verify_all(d)
    check(ok and len(ckfiles(d)) <= 2, f"keep 2 at the end: {ckfiles(d)} {why}")


# ---- 3. what --resume checks ----------------------------------------------------

def idx_bytes(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(x.to_bytes(4, "big") for x in dims) + bytes(data)


def test_resume_checks():
    # another batch size: refused naming the key and both values
    d = path("chk-ck")
    os.makedirs(d)
    plan = write("chk.yaml", plan_text(steps=3, every=3, ckdir="chk-ck"))
    r = run(plan, "--save", path("chk.safetensors"))
    check(r.returncode == 0, f"chk run: {r.stderr[-300:]}")
    other = write("chk8.yaml", open(plan).read().replace("size: 4, split_size: 2",
                                                        "size: 8, split_size: 2")
                  .replace("seed: 3", "seed: 4"))
    r = run(other, "--resume", path("chk.safetensors"))
    check(r.returncode == 2 and "batch.size: 4 in the checkpoint, 8 in the plan" in r.stderr and
          "seed: 3 in the checkpoint, 4 in the plan" in r.stderr,
          f"--resume with another batch size: {r.returncode} {r.stderr}")
    check("--load reads the same weights, optimizer state and step under any plan, without "
          "this check" in r.stderr, f"and says what --load does: {r.stderr}")
    r = run(other, "--resume", "auto")
    check(r.returncode == 2 and "batch.size" in r.stderr, f"--resume auto too: {r.stderr}")
    # --load takes the file under any plan, and its step: --steps 1 is step 4
    r = run(other, "--load", path("chk.safetensors"), "--steps", "1", "--json")
    check(r.returncode == 0 and json.loads(r.stdout or "{}").get("steps_done") == 4,
          f"--load continues from the file's step: {r.stderr[-300:]}")
    # what does not change a step's meaning may change: stages, schedule, lr, steps
    moved = write("chk-moved.yaml", open(plan).read().replace("schedule: 1f1b", "schedule: gpipe")
                  .replace("lr: 0.01", "lr: 0.005").replace("steps: 3", "steps: 4")
                  .replace("layers: [conv1, bn1, relu, layer1, layer2]",
                           "layers: [conv1, bn1, relu, maxpool, layer1]")
                  .replace("layers: [layer3,", "layers: [layer2, layer3,"))
    r = run(moved, "--resume", path("chk.safetensors"), "--json")
    check(r.returncode == 0 and json.loads(r.stdout or "{}").get("steps") == 1,
          f"resume under another partition, schedule and lr: {r.stderr[-400:]}")
    # a finished run: its summary and JSON say no steps were left
    r = run(plan, "--resume", path("chk.safetensors"), "--json")
    out = json.loads(r.stdout or "{}")
    check(r.returncode == 0 and "no steps left: the run had finished (step 3)" in r.stderr,
          f"finished run's summary: {r.returncode} {r.stderr[-400:]}")
    check(out.get("steps") == 0 and out.get("losses") == [] and out.get("steps_done") == 3 and
          out.get("steps_left") == 0 and out.get("resumed_from") == 3 and
          out.get("interrupted") is None and out.get("ranks") == 1, f"finished run's JSON: {out}")
    r = run(plan, "--resume", "auto")
    check(r.returncode == 0 and "no steps left" in r.stdout, f"auto, finished: {r.stdout[-300:]}")

    # an epoch's line after a mid-epoch resume covers the whole epoch
    n = 40
    lab = [(i * 7 + 1) % 4 for i in range(n)]
    img = [(180 if k % 12 < 3 * (lab[i] + 1) else 40) + (i * 31 + k * 17) % 50
           for i in range(n) for k in range(144)]
    for kind, dims, data in (("images", [n, 12, 12], img), ("labels", [n], lab)):
        with gzip.open(path(f"ep-{kind}.gz"), "wb") as f:
            f.write(idx_bytes(dims, data))
    ep_text = f"""\
model: {{name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}}
batch: {{size: 8, split_size: 4}}
optimizer: {{lr: 0.05, momentum: 0.9}}
data: {{format: idx, images: {path('ep-images.gz')}, labels: {path('ep-labels.gz')}, shuffle: true}}
epochs: 2
checkpoint: {{every: 1, path: '{path('ep-ck')}/ep-{{epoch}}.safetensors'}}
stages:
  - {{device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2]}}
  - {{device: cpu:1, layers: [layer3, layer4, avgpool, fc]}}
"""
    os.makedirs(path("ep-ck"))
    ep = write("ep.yaml", ep_text)

    def lines(err):
        return re.findall(r"^(epoch \d/2  train loss [\d.]+  train acc [\d.]+)", err, re.M)

    full = run(ep, "--save", path("ep-full.safetensors"))
    check(full.returncode == 0 and len(lines(full.stderr)) == 2, f"epochs run: {full.stderr[-300:]}")
    part = run(ep, "--steps", "7", "--save", path("ep-part.safetensors"))  # 5 steps an epoch
    check(part.returncode == 0 and lines(part.stderr) == lines(full.stderr)[:1],
          f"7 steps: {part.stderr[-300:]}")
    h, meta, _, _ = st_load(path("ep-part.safetensors"))
    check(meta.get("pipeline-run.epoch.samples") == "16", f"epoch sums saved: {meta.get('pipeline-run.epoch.samples')}")
    rest = run(ep, "--resume", path("ep-part.safetensors"), "--save", path("ep-rest.safetensors"))
    check(rest.returncode == 0 and lines(rest.stderr) == lines(full.stderr)[1:],
          f"the epoch's line after a mid-epoch resume equals the uninterrupted run's: "
          f"{lines(rest.stderr)} vs {lines(full.stderr)}")
    check(read(path("ep-rest.safetensors")) == read(path("ep-full.safetensors")),
          "mid-epoch resume: the same final bits")
    # a mid-epoch stop names its file E+S
    shutil.rmtree(path("ep-ck"))
    os.makedirs(path("ep-ck"))
    slow = write("ep-slow.yaml", ep_text.replace("epochs: 2", "epochs: 1000"))
    p = subprocess.Popen([BIN, slow], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: os.path.exists(path("ep-ck", "ep-1.safetensors")))
    time.sleep(0.3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    m = re.search(r"saved (\S+/ep-(\d+)(\+(\d+))?\.safetensors)\n", err)
    check(p.returncode == 143 and m is not None, f"epochs SIGTERM: {p.returncode} {err[-300:]}")
    if m and m.group(3):
        e, s = int(m.group(2)), int(m.group(4))
        h, meta, _, _ = st_load(m.group(1))
        check(0 < s < 5 and meta.get("pipeline-run.steps") == str(e * 5 + s),
              f"mid-epoch name E+S: {m.group(1)} {meta.get('pipeline-run.steps')}")
    r = run(slow, "--resume", "auto", "--steps", "1")
    check(r.returncode == 0 and "resuming" in r.stderr, f"auto from E+S: {r.stderr[-300:]}")


for t in (test_integrity, test_signals, test_second_signal, test_kill9, test_resume_checks):
    t0 = time.time()
    t()
    print(f"{t.__name__}: {time.time() - t0:.1f} s", file=sys.stderr)
CHECKS.summary("checkpoints")
sys.exit(CHECKS.exit_code())
