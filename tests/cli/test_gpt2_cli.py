#!/usr/bin/env python3
"""GPT-2 through the pipeline-run program. Usage: test_gpt2_cli.py PIPELINE_RUN

- bad input, each its exact message and exit 2: n_embd not divisible by
  n_head, an unknown preset, dropout of 1 and below 0, a token id at or above vocab_size (the
  file and position), a token file shorter than one window, a truncated and a
  foreign llm.c header, a data.block_size above the model's positions, token
  data for an image model and image data for gpt2, a stage list leaving out
  lm_head, --generate on a ResNet plan, a prompt id outside the vocabulary,
  an empty text prompt and a prompt byte past a vocabulary of 64,
  bad --tokens/--temperature/--top-k/--seed values;
- --validate prints the resolved plan, which validates again as the same;
  --simulate, --memory and stages: auto (FLOPs) run on a GPT-2 plan, and auto
  moves blocks off the last stage to balance the head;
- training prints tokens/s and the evaluation's loss per token, perplexity and
  next-token accuracy (also in --json), --eval-only too;
- --generate: greedy (temperature 0) and sampled text repeat for a seed, and
  a checkpoint trained on 2 stages generates the same text on 1 and on 3;
  a checkpoint of 3 blocks is refused by a plan of 2 (--load, --eval-only,
  --generate, --verify); on text without a tokenizer and a vocabulary of
  300, an id past the bytes prints as <|290|>;
- --dump-data STEP and eval:K write a step's `inputs` and `targets` (i32, N x
  T): in order, step 3's windows are the text's bytes from 24 x 32 on, the
  targets the inputs shifted by one; shuffled, each window is the text's 33
  bytes at some offset and a second dump is the same file; eval:0 reads the
  validation text; --show-data writes the first windows as ids and text;
  windows of block_size 1 are token data too (inputs and targets; text).
- dropout 0.1: training runs and its losses differ from dropout 0's; the
  evaluation and --generate of a checkpoint are those of dropout 0 (dropout
  off); 2 replicas in one process give the first step's loss of 1 replica
  bit for bit (each replica draws its own samples' masks).
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import struct

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_raw  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="pp-gpt2-cli-")


CHECKS = Checks()
check = CHECKS.check


def run(*args, timeout=240, text=True):
    return subprocess.run([BIN, *args], capture_output=True, text=text, timeout=timeout, cwd=TMP)


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def llmc(tokens, magic=20240520, version=1, count=None, cut=0):
    head = struct.pack("<3i", magic, version, len(tokens) if count is None else count)
    body = head + bytes(1024 - 12) + struct.pack(f"<{len(tokens)}H", *tokens)
    return body[:len(body) - cut] if cut else body


SENTENCE = "A byte-level model reads every character as a token. "
CORPUS = "".join(SENTENCE[i % len(SENTENCE)] for i in range(8000))
write("corpus.txt", CORPUS)
write("valid.txt", CORPUS[:2000])

PLAN = """\
model: {{name: gpt2, n_layer: 3, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 32{model}}}
batch: {{size: 8, micro_batches: 2}}
schedule: 1f1b
optimizer: {{type: sgd, lr: 0.3, momentum: 0.9}}
data: {{format: text, file: corpus.txt, shuffle: true{data}}}
eval: {{file: valid.txt}}
seed: 4
steps: {steps}
{stages}"""
TWO = ("stages:\n  - {device: cpu:0, layers: [wte, wpe, h.0, h.1]}\n"
       "  - {device: cpu:1, layers: [h.2, ln_f, lm_head]}\n")
ONE = "stages:\n  - {device: cpu:0, layers: [wte, wpe, h, ln_f, lm_head]}\n"
THREE = ("stages:\n  - {device: cpu:0, layers: [wte, wpe]}\n"
         "  - {device: cpu:1, layers: [h]}\n  - {device: cpu:2, layers: [ln_f, lm_head]}\n")


def plan(name, model="", data="", steps=4, stages=TWO, swap=None):
    """The plan written to name; swap: (old, new) replaced in its text."""
    text = PLAN.format(model=model, data=data, steps=steps, stages=stages)
    return write(name, text.replace(*swap) if swap else text)


def refused(name, path, want, *extra):
    r = run(path, "--validate", *extra) if not extra else run(path, *extra)
    check(r.returncode == 2 and want in r.stderr,
          f"{name}: want exit 2 and {want!r}: got {r.returncode} {r.stderr!r}")


def test_bad_input():
    tokens = [(i * 7) % 300 for i in range(600)]
    write("big.bin", llmc([t % 256 for t in tokens[:299]] + [300] + tokens[300:]))
    write("short.bin", llmc(list(range(20))))
    write("trunc.bin", llmc(list(range(200)), cut=10))
    write("llama.bin", llmc(list(range(200)), magic=20240801, version=7))
    write("hdr.bin", llmc([])[:100])
    cases = [
        ("n_embd % n_head", plan("a.yaml", swap=("n_head: 2", "n_head: 3")),
         "a.yaml:1:41: model.n_embd 32 is not divisible by model.n_head 3"),
        ("preset", plan("b.yaml", model=", preset: 7B"),
         "b.yaml:1:97: unknown model.preset '7B' (expected 124M, 350M, 774M or 1558M)"),
        ("dropout 1", plan("c.yaml", model=", dropout: 1"),
         "c.yaml:1:98: model.dropout must be below 1 (1 drops every value), got 1"),
        ("dropout < 0", plan("c2.yaml", model=", dropout: -0.1"),
         "c2.yaml:1:98: model.dropout must not be negative, got -0.1"),
        ("id above vocab", plan("d.yaml", data=", block_size: 16",
                                swap=("format: text, file: corpus.txt",
                                      "format: tokens, file: big.bin")),
         "d.yaml:5:30: data.file: " + os.path.realpath(os.path.join(TMP, "big.bin")) +
         ": token 300 at position 299 is not below the vocabulary size 256"),
        ("short file", plan("e.yaml", swap=("format: text, file: corpus.txt",
                                            "format: tokens, file: short.bin")),
         "short.bin: 20 tokens are fewer than one window of block_size + 1 = 33"),
        ("truncated tokens", plan("f.yaml", swap=("format: text, file: corpus.txt",
                                                  "format: tokens, file: trunc.bin")),
         "trunc.bin: the header counts 200 tokens but the file holds 390 bytes of tokens "
         "(truncated)"),
        ("truncated header", plan("g.yaml", swap=("format: text, file: corpus.txt",
                                                  "format: tokens, file: hdr.bin")),
         "hdr.bin: truncated llm.c header (100 of its 1024 bytes)"),
        ("foreign header", plan("h.yaml", swap=("format: text, file: corpus.txt",
                                                "format: tokens, file: llama.bin")),
         "llama.bin: an llm.c token file of another model (magic 20240801, version 7: uint32 "
         "tokens)"),
        ("block_size", plan("i.yaml", data=", block_size: 64"),
         "i.yaml:5:67: data.block_size 64 is above the model's block_size 32 (its positions)"),
        ("image data for gpt2", plan("j.yaml", swap=(
            "data: {format: text, file: corpus.txt, shuffle: true}\neval: {file: valid.txt}",
            "data: {format: synthetic}")),
         "j.yaml:5:7: model gpt2 reads tokens: data.format must be tokens or text, not synthetic"),
        ("tokens for resnet", write("k.yaml", "model: {name: resnet18}\nbatch: {size: 2, "
                                    "split_size: 1}\ndata: {format: text, file: corpus.txt}\n"
                                    "stages:\n  - {device: cpu:0, layers: [conv1, bn1, relu, "
                                    "maxpool, layer1, layer2, layer3, layer4, avgpool, fc]}\n"),
         "k.yaml:3:7: data format text feeds a language model (model gpt2), not resnet18"),
        ("no lm_head", plan("l.yaml", stages="stages:\n  - {device: cpu:0, layers: [wte, wpe, "
                                            "h, ln_f]}\n"),
         "lm_head is missing: stage 0 ends at ln_f"),
    ]
    for name, path, want in cases:
        refused(name, path, want)
    # dropout on a CUDA stage is a plan (the CUDA kernels draw the CPU's masks)
    r = run(plan("c3.yaml", model=", dropout: 0.1", swap=("device: cpu:1", "device: cuda:0")),
            "--validate")
    check(r.returncode == 0 and "dropout: 0.1" in r.stdout and "cuda:0" in r.stdout,
          f"dropout on cuda: want exit 0 and the plan: got {r.returncode} {r.stderr!r}")
    ck = os.path.join(TMP, "none.safetensors")
    refused("--generate on resnet", write("m.yaml", "model: {name: resnet18}\nbatch: {size: 2, "
                                          "split_size: 1}\nstages:\n  - {device: cpu:0, layers: "
                                          "[conv1, bn1, relu, maxpool, layer1, layer2, layer3, "
                                          "layer4, avgpool, fc]}\n"),
            "--generate continues text with a language model, and the plan's model is resnet18",
            "--load", ck, "--generate", "x")
    # a text prompt's bytes are its ids: empty, or a byte past a small vocabulary, is refused
    # before the checkpoint is read, and nothing is printed
    write("digits.txt", "".join(str(i % 10) for i in range(3000)))
    p64 = plan("v64.yaml", swap=("vocab_size: 256, block_size: 32",
                                 "vocab_size: 64, block_size: 32"))
    p64 = write("v64.yaml", open(p64).read().replace("corpus.txt", "digits.txt")
                .replace("valid.txt", "digits.txt"))
    for prompt, want in (("", "--generate: the prompt is empty"),
                         ("4a", "--generate: the prompt's byte 0x61 (at 1) is not below the "
                                "vocabulary size 64")):
        r = run(p64, "--load", ck, "--generate", prompt)
        check(r.returncode == 2 and want in r.stderr and r.stdout == "",
              f"--generate {prompt!r}: want exit 2, {want!r} and no output: {r.returncode} "
              f"{r.stdout!r} {r.stderr!r}")
    for opt, value, want in (("--tokens", "-1", "--tokens: '-1' is not a number of tokens"),
                             ("--temperature", "hot", "--temperature: 'hot' is not a number"),
                             ("--top-k", "1.5", "--top-k: '1.5' is not a count of tokens"),
                             ("--seed", "-3", "--seed: '-3' is not a non-negative integer"),
                             ("--tokens", "5", "--tokens needs --generate")):
        r = run(os.path.join(TMP, "a.yaml"), opt, value)
        check(r.returncode == 2 and want in r.stderr, f"{opt} {value}: {r.stderr!r}")


def test_describe():
    p = plan("d.yaml", model=", dropout: 0.1")
    r = run(p, "--validate")
    check(r.returncode == 0 and "name: gpt2" in r.stdout and "n_layer: 3" in r.stdout and
          "block_size: 32" in r.stdout and "tie_embeddings: true" in r.stdout and
          "dropout: 0.1\n" in r.stdout,
          f"--validate prints the resolved gpt2 plan: {r.returncode} {r.stdout[:400]!r}")
    again = write("resolved.yaml", r.stdout)
    r2 = run(again, "--validate")
    check(r2.returncode == 0 and r2.stdout == r.stdout, "the resolved plan validates as itself")
    for opt in ("--simulate", "--memory"):
        r = run(p, opt)
        check(r.returncode == 0, f"{opt} on a gpt2 plan: {r.returncode} {r.stderr[-300:]!r}")
    auto = plan("auto.yaml", stages="stages: auto\nbalance: flops\ndevices: [cpu:0, cpu:1]\n",
                swap=("n_layer: 3, n_head: 2, n_embd: 32, vocab_size: 256",
                      "n_layer: 6, n_head: 2, n_embd: 32, vocab_size: 8192"))
    r = run(auto, "--validate", "--json")
    try:
        o = json.loads(r.stdout)
        layers = [s["layers"] for s in o["stages"]]
    except (ValueError, KeyError):
        layers = []
    check(len(layers) == 2 and layers[1][-1] == "lm_head" and
          sum(1 for x in layers[1] if x.startswith("h")) < sum(1 for x in layers[0]
                                                               if x.startswith("h")),
          f"stages: auto keeps fewer blocks on the head's stage: {layers} {r.stderr[-300:]!r}")


def test_train_eval_generate():
    p2 = plan("two.yaml", steps=30)
    ck = os.path.join(TMP, "two.safetensors")
    r = run(p2, "--save", ck, "--json")
    try:
        o = json.loads(r.stdout)
    except ValueError:
        o = {}
    ev = o.get("eval", {})
    check(r.returncode == 0 and "tokens/s" in r.stderr and ev.get("perplexity") and
          abs(ev["perplexity"] - math.exp(ev["loss"])) < 1e-6 * ev["perplexity"],
          f"training: tokens/s and perplexity: {r.returncode} {ev} {r.stderr[-400:]!r}")
    # per token, as the top-1 accuracy: at least it and at most 1
    check(0 <= ev.get("accuracy", -1) <= ev.get("top5_accuracy", -1) <= 1,
          f"top-5 next-token accuracy per token: {ev}")
    check(re.search(r"test +loss \d+\.\d+, perplexity \d+\.\d+, next-token accuracy 0\.\d+ \(62 "
                    r"windows of 32 tokens", r.stderr) is not None, f"eval line: {r.stderr!r}")
    r = run(p2, "--load", ck, "--eval-only")
    check(r.returncode == 0 and "perplexity" in r.stdout, f"--eval-only: {r.stdout!r}")
    # a file of another model: its third block has no place in a model of two
    fewer = plan("fewer.yaml", stages=ONE, swap=("n_layer: 3", "n_layer: 2"))
    for extra in (["--eval-only"], ["--generate", "A", "--tokens", "3"], ["--steps", "1"]):
        r = run(fewer, "--load", ck, *extra)
        check(r.returncode == 2 and "tensors of the file have no place in the plan's model "
              "(transformer.h.2." in r.stderr, f"--load of 3 blocks into 2 {extra}: "
              f"{r.returncode} {r.stderr[-300:]!r}")
    r = run("--verify", ck, fewer)
    check(r.returncode == 2, f"--verify of 3 blocks against 2: {r.returncode} {r.stderr!r}")
    outs = {}
    for name, stages in (("one", ONE), ("two", TWO), ("three", THREE)):
        pp = plan(f"g-{name}.yaml", stages=stages)
        for mode, extra in (("greedy", ["--temperature", "0"]),
                            ("sampled", ["--temperature", "0.9", "--top-k", "20", "--seed",
                                         "3"])):
            r = run(pp, "--load", ck, "--generate", "A byte", "--tokens", "30", *extra,
                    text=False)
            check(r.returncode == 0 and r.stdout.startswith(b"A byte") and
                  len(r.stdout) == 6 + 30 + 1, f"--generate {mode} on {name}: {r.returncode} "
                  f"{r.stdout!r} {r.stderr[-300:]!r}")
            outs.setdefault(mode, []).append(r.stdout)
    for mode, texts in outs.items():
        check(len(set(texts)) == 1, f"--generate {mode}: 1, 2 and 3 stages print the same: "
                                    f"{texts}")
    r = run(plan("g-two.yaml", stages=TWO), "--load", ck, "--generate", "A", "--tokens", "5",
            "--seed", "4", "--temperature", "1.5", text=False)
    r2 = run(plan("g-two.yaml", stages=TWO), "--load", ck, "--generate", "A", "--tokens", "5",
             "--seed", "4", "--temperature", "1.5", text=False)
    check(r.stdout == r2.stdout and r.returncode == 0, "a seed repeats its sample")


def losses(r):
    try:
        return json.loads(r.stdout).get("losses", [])
    except ValueError:
        return []


def test_dropout():
    ck = os.path.join(TMP, "drop.safetensors")
    on, off = plan("drop.yaml", model=", dropout: 0.1"), plan("nodrop.yaml")
    r = run(on, "--save", ck, "--json")
    r0 = run(off, "--json")
    a, b = losses(r), losses(r0)
    check(r.returncode == 0 and len(a) == 4 and len(b) == 4 and a[0] != b[0],
          f"dropout 0.1 trains, other losses than dropout 0: {a} {b} {r.stderr[-400:]!r}")
    e1, e0 = run(on, "--load", ck, "--eval-only"), run(off, "--load", ck, "--eval-only")
    figures = [re.sub(r", [0-9.]+ tokens/s", "", e.stdout) for e in (e1, e0)]
    check(e1.returncode == 0 and "perplexity" in e1.stdout and figures[0] == figures[1],
          f"evaluation with dropout off: {e1.stdout!r} vs {e0.stdout!r}")
    gen = ("--load", ck, "--generate", "A", "--tokens", "12", "--seed", "2")
    g1, g0 = run(on, *gen, text=False), run(off, *gen, text=False)
    check(g1.returncode == 0 and g1.stdout == g0.stdout and len(g1.stdout) == 14,
          f"--generate with dropout off: {g1.stdout!r} vs {g0.stdout!r}")
    # micro-batches of 2 samples either way (split_size): the same losses to add
    split = ("micro_batches: 2", "split_size: 2")
    one = run(plan("drop-one.yaml", model=", dropout: 0.1", steps=1, swap=split), "--json")
    reps = plan("drop-reps.yaml", model=", dropout: 0.1", steps=1, swap=split, stages=(
        "replicas: 2\nstages:\n  - {device: [cpu:0, cpu:2], layers: [wte, wpe, h.0, h.1]}\n"
        "  - {device: [cpu:1, cpu:3], layers: [h.2, ln_f, lm_head]}\n"))
    r2 = run(reps, "--json")
    a, c = losses(one), losses(r2)
    check(r2.returncode == 0 and len(a) == 1 and c == a,
          f"2 replicas: the first loss of 1 replica: {c} vs {a} {r2.stderr[-400:]!r}")


def read_tokens(path):
    """A dump's metadata and its 2-D int32 tensors as lists of rows (others
    as one list of their 4-byte words)."""
    meta, raw = safetensors_raw.read(path)
    out = {}
    for name, (dtype, shape, body) in raw.items():
        ids = list(struct.unpack(f"<{len(body) // 4}i", body))
        out[name] = (dtype, [ids[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]
                     if len(shape) == 2 else ids)
    return meta, out


def test_dump_data():
    def dump(path, which, out):
        r = run(path, "--dump-data", which, "-o", out)
        check(r.returncode == 0 and f"wrote {out}" in r.stderr,
              f"--dump-data {which}: {r.returncode} {r.stderr!r}")
        return read_tokens(os.path.join(TMP, out)) if r.returncode == 0 else ({}, {})

    def shifted(t, what):
        x, y = t.get("inputs", (None, []))[1], t.get("targets", (None, []))[1]
        check(t.get("inputs", ("",))[0] == "I32" and t.get("targets", ("",))[0] == "I32" and
              len(x) == 8 and all(len(r) == 32 for r in x + y) and len(y) == 8 and
              all(a[1:] == b[:-1] for a, b in zip(x, y)),
              f"{what}: inputs and targets 8 x 32 i32, the targets the inputs shifted: {t}")
        return x, y

    data = CORPUS.encode()
    p = plan("dump-order.yaml", swap=("shuffle: true", "shuffle: false"))
    meta, t = dump(p, "3", "step3.st")
    x, y = shifted(t, "step 3 in order")
    want = [list(data[i * 32:i * 32 + 33]) for i in range(24, 32)]
    check([a + b[-1:] for a, b in zip(x, y)] == want and meta.get("step") == "3" and
          json.loads(meta.get("windows", "[]")) == list(range(24, 32)),
          f"step 3 in order: windows 24 to 31 of the text: {meta} {x[:1]}")
    p = plan("dump-shuffled.yaml")
    meta, t = dump(p, "2", "a.st")
    x, y = shifted(t, "step 2 shuffled")
    found = all(bytes(a + b[-1:]) in data for a, b in zip(x, y))
    check(found and [a + b[-1:] for a, b in zip(x, y)] != [list(data[i * 32:i * 32 + 33])
                                                           for i in range(16, 24)],
          f"step 2 shuffled: each window is 33 bytes of the text, not the in-order ones: {x[:1]}")
    dump(p, "2", "b.st")
    check(open(os.path.join(TMP, "a.st"), "rb").read() ==
          open(os.path.join(TMP, "b.st"), "rb").read(),
          "step 2 shuffled: a second dump writes the same bytes")
    meta, t = dump(p, "eval:0", "eval0.st")
    vx = t.get("inputs", (None, []))[1]
    check(meta.get("eval_batch") == "0" and len(vx) >= 1 and
          vx[0] == list(CORPUS[:2000].encode()[:32]),
          f"eval:0: the validation text's first windows: {meta} {len(vx)}")
    # --show-data: the first windows as text, a byte a token here (test_tokenizer_cli.py
    # has GPT-2's tokens): ids, tokens and text, each the window's 33 bytes
    out = os.path.join(TMP, "windows.txt")
    r = subprocess.run([BIN, p, "--show-data", "3", "-o", out], capture_output=True, text=True,
                       cwd=TMP)
    lines = open(out, encoding="utf-8").read().splitlines() if r.returncode == 0 else []
    ids = [[int(x) for x in line[5:].split()] for line in lines if line.startswith("ids: ")]
    texts = [line[6:] for line in lines if line.startswith("text: ")]
    x, y = shifted(dump(p, "0", "show.st")[1], "step 0 for --show-data")
    esc = (lambda s: s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
           .replace("\r", "\\r"))
    check(r.returncode == 0 and len(ids) == 3 and ids == [a + b[-1:] for a, b in zip(x, y)][:3]
          and texts == [esc(bytes(i).decode()) for i in ids] and
          any(line.startswith("window 2") for line in lines),
          f"--show-data 3 on text: the first step's windows as ids and text: {r.stderr[-300:]} "
          f"{lines[:4]}")

    # windows of one token (block_size 1) are token data still: inputs and
    # targets, and text
    p1 = plan("dump-t1.yaml", data=", block_size: 1")
    meta, t = dump(p1, "0", "t1.st")
    check(t.get("inputs", ("", []))[0] == "I32" and len(t.get("targets", ("", []))[1]) == 8 and
          "windows" in meta and "images" not in t,
          f"--dump-data at block_size 1: inputs and targets: {sorted(t)} {sorted(meta)}")
    out1 = os.path.join(TMP, "t1.txt")
    r = run(p1, "--show-data", "2", "-o", out1, text=False)
    head = open(out1, "rb").read(200) if r.returncode == 0 else b""
    check(head.startswith(b"# the first 2 training windows") and b"1 input each" in head,
          f"--show-data at block_size 1: text: {r.returncode} {head[:80]!r}")


def test_padded_vocabulary():
    """--generate on text without a tokenizer, a vocabulary of 300: an id past
    the bytes prints as <|ID|>, not as its low byte"""
    p = plan("v300.yaml", stages=ONE, steps=1, swap=("vocab_size: 256", "vocab_size: 300"))
    ck = os.path.join(TMP, "v300.safetensors")
    r = run(p, "--save", ck, "--weights-only")
    check(r.returncode == 0, f"vocabulary 300: training: {r.returncode} {r.stderr[-300:]!r}")
    if r.returncode:
        return
    # ln_f's output made all ones and id 290's row of the tied head all ones:
    # 290 has the largest logit; the file rewritten without checksums
    _, tensors = safetensors_raw.read(ck)
    c = 32
    ones = struct.pack(f"<{c}f", *[1.0] * c)
    tensors["transformer.ln_f.weight"] = ("F32", [c], struct.pack(f"<{c}f", *[0.0] * c))
    tensors["transformer.ln_f.bias"] = ("F32", [c], ones)
    dt, shape, raw = tensors["transformer.wte.weight"]
    tensors["transformer.wte.weight"] = (dt, shape, raw[:290 * c * 4] + ones +
                                         raw[291 * c * 4:])
    head, data = {}, b""
    for name, (dt, shape, raw) in sorted(tensors.items()):
        head[name] = {"dtype": dt, "shape": shape,
                      "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(head).encode()
    edited = write("v300-edited.safetensors", struct.pack("<Q", len(h)) + h + data)
    r = run(p, "--load", edited, "--generate", "Hi", "--tokens", "3", "--temperature", "0",
            text=False)
    check(r.returncode == 0 and r.stdout == b"Hi<|290|><|290|><|290|>\n",
          f"--generate with a vocabulary of 300: {r.returncode} {r.stdout!r} {r.stderr[-300:]!r}")


for t in (test_bad_input, test_describe, test_train_eval_generate, test_dump_data, test_dropout,
          test_padded_vocabulary):
    t()
shutil.rmtree(TMP, ignore_errors=True)
CHECKS.summary("gpt2 cli")
sys.exit(CHECKS.exit_code())
