#!/usr/bin/env python3
"""cli_embed.py — `ember embed` on the real all-MiniLM-L6-v2 (bert, F16,
../shared/models): the 12 texts of ../shared/golden/embeddings (one per
line of a file, and one as --text) give the embeddings sentence-transformers
computes from the original weights (cosine >= 0.999, unit length) after
the Hugging Face tokenizer's token counts; --pooling cls and --no-normalize
change the vector as they say; the GPU (the default, Vulkan) and the CPU
reference (--backend cpu) agree (cosine >= 0.99999); a decoder (SmolLM2,
when present) gives vectors of its width, the same on both backends (mean
and last-token pooling); every error path exits 2 with one "ember: " line.

Usage: cli_embed.py [SMOLLM2.gguf]   ($EMBER_BIN, $EMBER_SHARED)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

BIN = os.environ["EMBER_BIN"]
SHARED = os.environ.get("EMBER_SHARED", "/nonexistent")
SMOL = sys.argv[1] if len(sys.argv) > 1 else ""
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2-F16.gguf")
fails = checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what)


def embed(*args):
    r = subprocess.run([BIN, "embed"] + list(args), capture_output=True, text=True, timeout=600)
    return r.returncode, [json.loads(line) for line in r.stdout.splitlines() if line.strip()], r.stderr


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


if not os.path.exists(MINILM):
    print("SKIP: %s is absent" % MINILM)
    sys.exit(77)
gold = json.load(open(os.path.join(SHARED, "golden", "embeddings", "all-MiniLM-L6-v2.json")))
with tempfile.TemporaryDirectory() as d:
    texts = os.path.join(d, "texts.txt")
    with open(texts, "w") as f:
        f.write("\n".join(g["text"] for g in gold) + "\n\n")   # (the blank line is skipped)
    rc, out, err = embed("--model", MINILM, "--file", texts)
    check(rc == 0 and len(out) == len(gold), "12 lines from the file: rc %d, %d lines, %s" % (rc, len(out), err))
    worst = 1.0
    for g, o in zip(gold, out):
        want = json.loads(g["embedding"]) if isinstance(g["embedding"], str) else g["embedding"]
        ids = json.loads(g["ids"]) if isinstance(g["ids"], str) else g["ids"]
        c = cos(o["embedding"], want)
        worst = min(worst, c)
        check(c >= 0.999, "%r: cosine %.6f" % (g["text"], c))
        check(o["tokens"] == len(ids), "%r: %d tokens, the tokenizer's %d" % (g["text"], o["tokens"], len(ids)))
        check(abs(sum(x * x for x in o["embedding"]) - 1) < 1e-5, "%r: unit length" % g["text"])
    print("cli-embed: 12 texts, worst cosine %.6f to sentence-transformers'" % worst)
    rc, ref, err = embed("--model", MINILM, "--file", texts, "--backend", "cpu")
    check(rc == 0 and len(ref) == len(out), "--backend cpu: rc %d, %s" % (rc, err))
    agree = min([cos(a["embedding"], b["embedding"]) for a, b in zip(out, ref)] or [0])
    check(agree >= 0.99999, "the GPU and the CPU reference: worst cosine %.7f" % agree)
    print("cli-embed: GPU vs CPU reference, worst cosine %.7f" % agree)
    rc, one, _ = embed("--model", MINILM, "--text", gold[0]["text"], "--text", gold[1]["text"])
    check(rc == 0 and [o["index"] for o in one] == [0, 1] and one[0]["embedding"] == out[0]["embedding"],
          "--text twice: the file's first vector")
    rc, cls, _ = embed("--model", MINILM, "--text", gold[0]["text"], "--pooling", "cls", "--no-normalize")
    check(rc == 0 and cos(cls[0]["embedding"], out[0]["embedding"]) < 0.99 and
          abs(sum(x * x for x in cls[0]["embedding"]) - 1) > 1e-3, "--pooling cls --no-normalize: another vector")
    if os.path.exists(SMOL):
        rc, dec, err = embed("--model", SMOL, "--text", "Hello world")
        check(rc == 0 and len(dec[0]["embedding"]) == 576, "a decoder's vector: %s" % err)
        for pool in ("mean", "last"):
            text = " ".join(g["text"] for g in gold[:3])
            rc, g_, err = embed("--model", SMOL, "--text", text, "--pooling", pool)
            rc2, c_, err2 = embed("--model", SMOL, "--text", text, "--pooling", pool, "--backend", "cpu")
            c = cos(g_[0]["embedding"], c_[0]["embedding"]) if rc == 0 and rc2 == 0 else 0
            check(c >= 0.9999, "a decoder, %s pooling: GPU vs CPU cosine %.6f %s %s" % (pool, c, err, err2))
    for args, what in ((["--model", MINILM], "no input"),
                       (["--model", MINILM, "--text", "a", "--file", texts], "both"),
                       (["--text", "a"], "no model"),
                       (["--model", MINILM, "--text", "a", "--pooling", "max"], "a bad pooling"),
                       (["--model", MINILM, "--text", "a", "--backend", "metal"], "a bad backend"),
                       (["--model", MINILM, "--text", "word " * 600], "past the encoder's 512 positions"),
                       (["--model", os.path.join(d, "none.gguf"), "--text", "a"], "a missing model"),
                       (["--model", MINILM, "--file", os.path.join(d, "none.txt")], "a missing file")):
        rc, _, err = embed(*args)
        check(rc == 2 and err.count("\n") == 1 and err.startswith("ember: "), "%s: rc %d %r" % (what, rc, err))
print("cli-embed: %d of %d checks passed" % (checks - fails, checks))
sys.exit(1 if fails else 0)
