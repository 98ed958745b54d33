#!/usr/bin/env python3
"""cli_vram.py — `ember vram` against figures computed here by hand from the
models' published shapes (written out below, not read from ember): weight
bytes by type, KV bytes per token and per sequence (f16 and q8_0), the
scratch of ember's forward pass, how many sequences fit in --mem-gb and the
largest context for --users, for the shared models, SmolLM2-135M and
Llama-3-8B by shape; the device's heap when --mem-gb is absent; --json
parsed; and every error path (exit 2, one "ember: vram: " line; exit 1 when
the plan does not fit).

Usage: cli_vram.py [SMOLLM2.gguf]   ($EMBER_BIN, $EMBER_SHARED)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

BIN = os.environ["EMBER_BIN"]
SHARED = os.environ.get("EMBER_SHARED", "/nonexistent")
SMOL = sys.argv[1] if len(sys.argv) > 1 else ""
fails = 0
checks = 0

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
BLOCK = 16                # positions per KV block
STEP_TOKENS = 512         # ember serve's tokens per step
PARALLEL_GPU = 64         # ember serve's sequences at once on a GPU (and with --mem-gb)
STAGING = 64 * MIB
MARGIN = 256 * MIB
SPLIT = 16                # decode attention's split count bound (attention partials)


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what)


def run(*args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([BIN, "vram", *args], capture_output=True, text=True, env=e)
    return p.returncode, p.stdout, p.stderr


def vram_json(*args, status=0, env=None):
    rc, out, err = run(*args, "--json", env=env)
    check(rc == status, f"{args}: exit {rc}, expected {status}: {err}")
    try:
        return json.loads(out)
    except ValueError:
        check(False, f"{args}: not JSON: {out[:200]}")
        return None


def eq(label, got, want):
    check(got == want, f"{label}: {got}, expected {want}")


def r32(v):
    return (v + 31) // 32 * 32


def kv_token(layers, kv_heads, head_dim, q8=False):
    """layers x KV heads x head dim x 2 (K and V) x element size (q8_0: 34 B per 32)"""
    n = layers * kv_heads * head_dim * 2
    return n * 34 // 32 if q8 else n * 2


def scratch(s, seqs, ctx):
    """the buffers ember's forward pass allocates for 512-token steps"""
    T, E, H, Hk, D, F, V = STEP_TOKENS, s["embd"], s["heads"], s["kv_heads"], s["head_dim"], s["ff"], s["vocab"]
    x = T * r32(E) * 4                       # residual stream
    qkv = T * r32(H * D + 2 * Hk * D) * 4
    att = T * r32(H * D) * 4
    hf = T * r32(F) * 4
    gu = T * r32(2 * F) * 4
    part = T * H * SPLIT * (D + 2) * 4       # split attention partials
    logits = seqs * V * 4
    # choosing tokens on the device (topk.comp): per row a header, a grammar's mask and room for 2048
    # penalty and logit_bias ids (3 words each) in; max, sums, 64 candidates out
    steer = seqs * (4 + -(-V // 32) + 3 * 2048) * 4
    cand = seqs * (8 + 2 * 64) * 4
    # tokens, positions, slots, gather, decode and tile pairs, block tables, pooled spans, token types
    step = (8 * T + seqs + 2 * seqs + seqs * -(-ctx // BLOCK)) * 4
    pooled = seqs * r32(E) * 4               # pooled rows (embeddings) read back
    return x + qkv + att + hf + gu + part + 256 + logits + steer + cand + step + pooled


def pool_blocks(mem, weights, s, seqs, ctx, block):
    """what ember serve keeps for the KV pool: 80% of the memory less the rest"""
    used = weights + (scratch(s, seqs, ctx) if s else 0) + STAGING + MARGIN
    left = mem * 8 // 10 - used
    return max(left, 0) // block


def max_ctx(mem, weights, s, users, block):
    best = 0
    for b in range(1, (1 << 20) // BLOCK + 1):
        if users * b > pool_blocks(mem, weights, s, users, b * BLOCK, block):
            break
        best = b * BLOCK
    return best


# ---- Llama-3-8B by shape: 32 layers, 8 KV heads of 128 (32 heads, width 4096,
# FFN 14336, vocabulary 128256) --------------------------------------------
L3 = dict(layers=32, kv_heads=8, head_dim=128, heads=32, embd=4096, ff=14336, vocab=128256)
shape = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128"]
eq("llama3 f16 per token", kv_token(32, 8, 128), 128 * KIB)

d = vram_json(*shape, "--params", "8B", "--bits", "16", "--ctx", "8192", "--mem-gb", "80")
if d:
    eq("llama3 bytes/token", d["kv"]["bytes_per_token"], 128 * KIB)
    eq("llama3 bytes/sequence", d["kv"]["bytes_per_sequence"], 1 * GIB)
    eq("llama3 weights 8B x 16 bits", d["weights"]["device_bytes"], 16 * 10**9)
    eq("llama3 memory", d["memory"]["bytes"], 80 * GIB)
    eq("llama3 memory source", d["memory"]["source"], "--mem-gb")
    check(d["scratch"] is None, "llama3 without --heads etc.: scratch not counted")
    want = pool_blocks(80 * GIB, 16 * 10**9, None, 64, 8192, 2 * MIB)
    eq("llama3 f16 80 GiB blocks", d["pool"]["blocks"], want)
    eq("llama3 f16 80 GiB sequences", d["pool"]["sequences"], want // 512)
    eq("llama3 f16 80 GiB sequences (by hand: (64 GiB - 16e9 - 320 MiB) / 1 GiB)", d["pool"]["sequences"], 48)
    check(d["fits"] is True, "llama3 fits")

d = vram_json(*shape, "--params", "8e9", "--bits", "16", "--ctx", "8192", "--mem-gb", "80", "--kv-type", "q8_0")
if d:
    eq("llama3 q8_0 bytes/token", d["kv"]["bytes_per_token"], 128 * KIB * 34 // 64)
    eq("llama3 q8_0 bytes/sequence", d["kv"]["bytes_per_sequence"], GIB * 34 // 64)
    eq("llama3 q8_0 80 GiB sequences", d["pool"]["sequences"],
       pool_blocks(80 * GIB, 16 * 10**9, None, 64, 8192, 2 * MIB * 34 // 64) // 512)

# with the full shape the scratch counts; --users sizes it for N at once
full = shape + ["--heads", "32", "--embd", "4096", "--ff", "14336", "--vocab", "128256"]
for gb, kvt, bits, users in ((80, "f16", "4.5", 16), (141, "f16", "16", 64), (141, "q8_0", "16", 32)):
    weights = -(-8 * 10**9 * int(float(bits) * 2) // 16)   # 8e9 x bits / 8, rounded up
    block = 2 * MIB if kvt == "f16" else 2 * MIB * 34 // 32 // 2
    d = vram_json(*full, "--params", "8B", "--bits", bits, "--ctx", "8192", "--mem-gb", str(gb),
                  "--kv-type", kvt, "--users", str(users))
    if not d:
        continue
    lab = f"llama3 {gb} GiB {kvt} {bits} bits {users} users"
    eq(lab + " weights", d["weights"]["device_bytes"], weights)
    eq(lab + " scratch", d["scratch"]["bytes"], scratch(L3, users, 8192))
    eq(lab + " scratch sequences", d["scratch"]["sequences"], users)
    eq(lab + " blocks", d["pool"]["blocks"], pool_blocks(gb * GIB, weights, L3, users, 8192, block))
    eq(lab + " largest context", d["users"]["max_ctx"], max_ctx(gb * GIB, weights, L3, users, block))
    check(d["users"]["max_ctx"] % BLOCK == 0, lab + ": context in whole blocks")

# the text form says the same
rc, out, err = run(*shape, "--params", "8B", "--bits", "16", "--ctx", "8192", "--mem-gb", "80")
check(rc == 0 and "131072 B per token" in out and "1073741824 B" in out and "= 48 sequences of 8192" in out,
      f"llama3 text: {out}{err}")

# does not fit: exit 1, the numbers in the one error line, the report still printed
rc, out, err = run(*shape, "--params", "70B", "--bits", "16", "--ctx", "8192", "--mem-gb", "80")
check(rc == 1 and err.count("\n") == 1 and err.startswith("ember: vram: the model does not fit")
      and "130.4 GiB" in err and "64.0 GiB" in err and "KV pool" in out, f"70B on 80 GiB: {rc} {err}")
d = vram_json(*shape, "--params", "70B", "--bits", "16", "--ctx", "8192", "--mem-gb", "80", status=1)
if d:
    check(d["fits"] is False and d["pool"]["sequences"] == 0, "70B: fits false")
# one sequence too long for what is left
rc, out, err = run(*shape, "--params", "8B", "--bits", "16", "--ctx", "1048576", "--mem-gb", "80")
check(rc == 1 and "one sequence of 1048576 tokens does not fit" in err and err.count("\n") == 1,
      f"1M context on 80 GiB: {rc} {err}")
# users that do not fit even one block each: (4.8 GiB - 4e9 - 320 MiB) / 2 MiB = 390 blocks
eq("390 blocks", pool_blocks(6 * GIB, 4 * 10**9, None, 1, 16, 2 * MIB), 390)
rc, out, err = run(*shape, "--params", "8B", "--bits", "4", "--ctx", "16", "--mem-gb", "6", "--users", "1024")
check(rc == 1 and "1024 sequences do not fit" in err and "390 blocks" in err and err.count("\n") == 1,
      f"1024 users in 6 GiB: {rc} {err}")
rc, out, err = run(*shape, "--params", "8B", "--bits", "4", "--ctx", "16", "--mem-gb", "6", "--users", "390")
check(rc == 0 and "390 sequences fit up to 16 tokens each" in out, f"390 users in 6 GiB: {rc} {out} {err}")

# ---- the shared models ---------------------------------------------------
def shared_model(name, s, types, weights_r8, ctx_len):
    path = os.path.join(SHARED, "models", name)
    if not os.path.exists(path):
        print(f"cli_vram: no {path}: skipped")
        return
    d = vram_json("--model", path, "--mem-gb", "1")
    if not d:
        return
    per_tok = kv_token(s["layers"], s["kv_heads"], s["head_dim"])
    eq(name + " ctx", d["kv"]["ctx"], ctx_len)
    eq(name + " context_length", d["context_length"], ctx_len)
    eq(name + " bytes/token", d["kv"]["bytes_per_token"], per_tok)
    eq(name + " bytes/sequence", d["kv"]["bytes_per_sequence"], per_tok * ctx_len)
    got = {t["type"]: [t["tensors"], t["params"], t["file_bytes"]] for t in d["weights"]["types"]}
    eq(name + " types", got, types)
    eq(name + " device weights (8 rows per group)", d["weights"]["device_bytes"], weights_r8)
    eq(name + " scratch", d["scratch"]["bytes"], scratch(s, PARALLEL_GPU, ctx_len))
    vec = d["weights"]["vector_bytes"]
    blocks = pool_blocks(GIB, weights_r8 + vec, s, PARALLEL_GPU, ctx_len, per_tok * BLOCK)
    eq(name + " blocks in 1 GiB", d["pool"]["blocks"], blocks)
    eq(name + " sequences in 1 GiB", d["pool"]["sequences"], blocks // (ctx_len // BLOCK))
    return vec


# stories260K: F32, 5 layers, width 64, 8 heads / 4 KV heads of 8, FFN 172,
# vocabulary 512, untied output; per layer 2 norms [64], wq/wo 64x64,
# wk/wv 64x32, gate/up/down 64x172; final norm; embeddings and output 512x64
s260 = dict(layers=5, kv_heads=4, head_dim=8, heads=8, embd=64, ff=172, vocab=512)
p260 = 5 * (2 * 64 + 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 172) + 64 + 2 * 512 * 64
eq("stories260K parameters", p260, 292800)
# on the device (8-row groups): qkv 128x64, wo 64x64, gate/up 344x64, down
# 64 rows of 172 padded to 192, embeddings and output; F32 = 4 bytes
w260 = 4 * (5 * (128 * 64 + 64 * 64 + 344 * 64 + 64 * 192) + 2 * 512 * 64)
vec = shared_model("stories260K.gguf", s260, {"F32": [48, p260, 4 * p260]}, w260, 2048)
if vec is not None:
    eq("stories260K vectors", vec, 4 * (5 * 128 + 64 + 4 + 4))

# TinyStories-656K-Q8_0: 2 layers, width 128, 8 heads / 4 KV heads of 16, FFN 384,
# vocabulary 2048, tied; matrices Q8_0 (34 B per 32), norms F32
s656 = dict(layers=2, kv_heads=4, head_dim=16, heads=8, embd=128, ff=384, vocab=2048)
q656 = 2 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384) + 2048 * 128
shared_model("TinyStories-656K-Q8_0.gguf", s656,
             {"F32": [5, 2 * 2 * 128 + 128, 4 * (5 * 128)], "Q8_0": [15, q656, q656 * 34 // 32]},
             q656 * 34 // 32, 512)

# synth-llama-256-Q4_0: 2 layers, width 256, 4 heads of 64 / 2 KV heads, FFN 768,
# vocabulary 512, untied output; Q4_0: 18 B per 32 (the file's mix, taken by
# type below: its output and embeddings are Q4_0 too in this generated file)
sl = dict(layers=2, kv_heads=2, head_dim=64, heads=4, embd=256, ff=768, vocab=512)
path = os.path.join(SHARED, "models", "synth", "synth-llama-256-Q4_0.gguf")
if os.path.exists(path):
    d = vram_json("--model", path, "--mem-gb", "1", "--kv-type", "q8_0")
    if d:
        eq("synth-llama q8_0 bytes/token", d["kv"]["bytes_per_token"], 2 * 2 * 64 * 2 * 34 // 32)
        eq("synth-llama q8_0 bytes/token = 544", d["kv"]["bytes_per_token"], 544)
        eq("synth-llama q8_0 block", d["kv"]["block_bytes"], 544 * 16)
        mats = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 768) + 2 * 512 * 256
        types = {t["type"]: t["params"] for t in d["weights"]["types"]}
        eq("synth-llama matrix parameters", sum(v for k, v in types.items() if k != "F32"), mats)

# ---- gemma3 (6 layers, width 256, heads of 128): the forward pass runs it,
# so no "unsupported" note (a model it cannot run, one that caps its logits,
# gets one: test_cli_errors); its vectors are the file's F32 ones (four
# norms of 256 and the q/k norms of 128 per layer, with the post-norms; the
# output norm: 7936) and two rope tables of 64 (the windowed layers' own),
# and 4 floats of slack: (7936 + 2 * 64 + 4) * 4 bytes ----------------------
path = os.path.join(SHARED, "models", "synth", "synth-gemma3-256-F16.gguf")
if os.path.exists(path):
    d = vram_json("--model", path, "--mem-gb", "1")
    check(d is not None and "unsupported" not in d, f"gemma3 json: no unsupported note: {d}")
    if d:
        f32 = [t["params"] for t in d["weights"]["types"] if t["type"] == "F32"]
        eq("gemma3 F32 vector parameters", f32, [6 * (4 * 256 + 2 * 128) + 256])
        eq("gemma3 vector bytes", d["weights"]["vector_bytes"], (7936 + 2 * 64 + 4) * 4)
        # the KV cache: the one global layer (every 6th) for the whole context,
        # 128 x 2 (K, V) x 2 B per token; the 5 windowed layers (window 16) in
        # their own pool, per sequence the blocks of 15 + 512 (a step's tokens)
        # positions + 1 = 34 of 5 x 16 x 512 B; the pool: the budget less 64
        # sequences' windows, in global blocks of 16 x 512 B
        kv = d["kv"]
        eq("gemma3 bytes per token (global layer)", kv["bytes_per_token"], 512)
        w = kv.get("window", {})
        eq("gemma3 window", (w.get("window"), w.get("layers"), w.get("global_layers")), (16, 5, 1))
        eq("gemma3 window blocks per sequence", w.get("blocks_per_sequence"), 34)
        eq("gemma3 window block bytes", w.get("block_bytes"), 5 * 16 * 512)
        eq("gemma3 bytes per sequence", kv["bytes_per_sequence"], 128 * 16 * 512 + 34 * 5 * 16 * 512)
        eq("gemma3 bytes per sequence, every layer whole", w.get("bytes_per_sequence_without"), 128 * 16 * 6 * 512)
        eq("gemma3 window pool bytes", w.get("pool_bytes"), 64 * 34 * 5 * 16 * 512)
        eq("gemma3 pool blocks", d["pool"]["blocks"], (d["pool"]["bytes"] - 64 * 34 * 5 * 16 * 512) // (16 * 512))
    rc, out, err = run("--model", path, "--mem-gb", "1")
    check(rc == 0 and "\nnote " not in out, f"gemma3 text: {rc} {out}")
    check("the 5 sliding-window layers keep the last 16 positions: 34 blocks" in out and
          "every layer for the whole context: 6.0 MiB" in out, f"gemma3 text: {out}")

# ---- a mixture of experts (synth qwen3moe: 2 layers of 8 experts, 2 used, of
# 256 x 256 x 3 F16 each): total and active parameters, the experts counted
# at 2 of 8; the device bytes of the experts padded per expert --------------
path = os.path.join(SHARED, "models", "synth", "synth-qwen3moe-256-F16.gguf")
if os.path.exists(path):
    d = vram_json("--model", path, "--mem-gb", "1")
    if d:
        x = d["weights"].get("experts", {})
        experts = 2 * 3 * 256 * 256 * 8
        eq("qwen3moe experts", (x.get("count"), x.get("used")), (8, 2))
        eq("qwen3moe active parameters", x.get("params", 0) - x.get("active_params", 0), experts * 6 // 8)
        check("unsupported" not in d, f"qwen3moe: no unsupported note: {d}")
    rc, out, err = run("--model", path, "--mem-gb", "1")
    check(rc == 0 and "a mixture of experts: 2 of 8 per token" in out, f"qwen3moe text: {out}")

# ---- SmolLM2-135M-Instruct Q4_1: 30 layers, width 576, 9 heads / 3 KV heads
# of 64, FFN 1536, vocabulary 49152, context 8192, tied embeddings (Q8_0);
# every layer matrix Q4_1 (20 B per 32), which ember reads as the file has
# it ---------------------------------------------------------------------
smol = dict(layers=30, kv_heads=3, head_dim=64, heads=9, embd=576, ff=1536, vocab=49152)
per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536
eq("smollm per-layer parameters", per_layer, 3538944)
smol_types = {"F32": [61, 30 * 2 * 576 + 576, 4 * (30 * 2 * 576 + 576)],
              "Q4_1": [210, 30 * per_layer, 30 * per_layer * 20 // 32],
              "Q8_0": [1, 49152 * 576, 49152 * 576 * 34 // 32]}
smol_r8 = 30 * per_layer * 20 // 32 + 49152 * 576 * 34 // 32
# on a CPU device ember packs 128-row groups: qkv 960 -> 1024 rows, wo and
# down 576 -> 640 rows, gate/up 3072 stay
smol_r128 = 30 * 20 * (1024 * 576 + 640 * 576 + 3072 * 576 + 640 * 1536) // 32 + 49152 * 576 * 34 // 32
if SMOL and os.path.exists(SMOL):
    d = vram_json("--model", SMOL, "--mem-gb", "1")
    if d:
        eq("smollm bytes/token", d["kv"]["bytes_per_token"], 23040)
        eq("smollm bytes/sequence 8192", d["kv"]["bytes_per_sequence"], 23040 * 8192)
        got = {t["type"]: [t["tensors"], t["params"], t["file_bytes"]] for t in d["weights"]["types"]}
        eq("smollm types", got, smol_types)
        by = {t["type"]: t["device_bytes"] for t in d["weights"]["types"]}
        eq("smollm Q4_1 on the device as in the file", by["Q4_1"], 30 * per_layer * 20 // 32)
        eq("smollm device weights", d["weights"]["device_bytes"], smol_r8)
        eq("smollm scratch", d["scratch"]["bytes"], scratch(smol, PARALLEL_GPU, 8192))
        blocks = pool_blocks(GIB, smol_r8 + d["weights"]["vector_bytes"], smol, 64, 8192, 23040 * 16)
        eq("smollm 1 GiB blocks", d["pool"]["blocks"], blocks)
        eq("smollm 1 GiB sequences", d["pool"]["sequences"], blocks // 512)
    d = vram_json("--model", SMOL, "--mem-gb", "1", "--kv-type", "q8_0", "--ctx", "2048", "--users", "8")
    if d:
        eq("smollm q8_0 bytes/token", d["kv"]["bytes_per_token"], 23040 * 34 // 64)
        eq("smollm q8_0 2048 sequence", d["kv"]["bytes_per_sequence"], 23040 * 34 // 64 * 2048)
        w = smol_r8 + d["weights"]["vector_bytes"]
        eq("smollm 8 users largest context", d["users"]["max_ctx"], max_ctx(GIB, w, smol, 8, 12240 * 16))

    # no --mem-gb: the device-local heap of the device ember picks
    p = subprocess.run([BIN, "devices", "--json"], capture_output=True, text=True)
    devs = json.loads(p.stdout) if p.returncode == 0 else None
    if devs and devs["default"] >= 0:
        dev = devs["devices"][devs["default"]]
        d = vram_json("--model", SMOL)
        if d:
            eq("device memory", d["memory"]["bytes"], dev["device_local_bytes"])
            eq("device source", d["memory"]["source"], "device")
            eq("device index", d["memory"]["device"]["index"], dev["index"])
            eq("device name", d["memory"]["device"]["name"], dev["name"])
            cpu = dev["type"] == "cpu"
            eq("device weights", d["weights"]["device_bytes"], smol_r128 if cpu else smol_r8)
            eq("device scratch sequences", d["scratch"]["sequences"], 16 if cpu else 64)
            rc, out, err = run("--model", SMOL)
            check(rc == 0 and f"device-local heap of device {dev['index']}, {dev['name']}" in out,
                  f"text names the device: {out}")
        # a discrete GPU's kernels on any device: 8-row groups, as em_vk_create packs them then
        d = vram_json("--model", SMOL, env={"EMBER_VK_AS_GPU": "1"})
        if d:
            eq("EMBER_VK_AS_GPU weights", d["weights"]["device_bytes"], smol_r8)
        d = vram_json("--model", SMOL, env={"EMBER_DEVICE": str(dev["index"])})
        if d:
            eq("EMBER_DEVICE picks", d["memory"]["device"]["index"], dev["index"])
        rc, out, err = run("--model", SMOL, env={"EMBER_DEVICE": "99"})
        check(rc == 2 and err.startswith("ember: vram: ") and err.count("\n") == 1, f"EMBER_DEVICE=99: {rc} {err}")
    else:
        print("cli_vram: no Vulkan device: the heap default is not checked")
else:
    print("cli_vram: no SmolLM2 model: its figures are not checked")

# ---- bad input: exit 2, one line "ember: vram: ...", nothing on stdout ------
tmp = tempfile.mkdtemp()
trunc = os.path.join(tmp, "trunc.gguf")
garbage = os.path.join(tmp, "garbage.gguf")
s260_path = os.path.join(SHARED, "models", "stories260K.gguf")
if os.path.exists(s260_path):
    with open(s260_path, "rb") as f:
        head = f.read(1000)
    with open(trunc, "wb") as f:
        f.write(head)
with open(garbage, "wb") as f:
    f.write(b"GGUF" + b"\xff" * 60)
good_shape = shape + ["--params", "8B", "--bits", "4.5", "--ctx", "8192"]
bad = [
    ([], "give --model PATH, or a shape"),
    (["--model", "/nonexistent/m.gguf"], "/nonexistent/m.gguf"),
    (["--model", garbage], "garbage.gguf"),
    (["--model", tmp], None),
    (["--model", s260_path, "--layers", "3"], "not both"),
    (["--layers", "32"], "--kv-heads"),
    (shape + ["--params", "8B", "--bits", "4"], "--ctx"),
    (shape + ["--params", "8X", "--bits", "4", "--ctx", "8"], "--params"),
    (shape + ["--params", "-8B", "--bits", "4", "--ctx", "8"], "--params"),
    (shape + ["--params", "12", "--bits", "4", "--ctx", "8"], "--params"),
    (shape + ["--params", "8B", "--bits", "0", "--ctx", "8"], "--bits"),
    (shape + ["--params", "8B", "--bits", "65", "--ctx", "8"], "--bits"),
    (["--layers", "32", "--kv-heads", "8", "--head-dim", "300", "--params", "8B", "--bits", "4", "--ctx", "8"],
     "head size 300"),
    (["--layers", "32", "--kv-heads", "8", "--head-dim", "100", "--params", "8B", "--bits", "4", "--ctx", "8"],
     "head size 100"),
    (["--layers", "32", "--kv-heads", "8", "--head-dim", "48", "--params", "8B", "--bits", "4", "--ctx", "8",
      "--kv-type", "q8_0"], "multiples of 32"),
    (good_shape + ["--heads", "32"], "--heads, --embd, --ff and --vocab"),
    (good_shape + ["--heads", "30", "--embd", "4096", "--ff", "1", "--vocab", "1"], "multiple of --kv-heads"),
    (good_shape + ["--kv-type", "q4"], "q4"),
    (good_shape + ["--mem-gb", "0"], "--mem-gb"),
    (good_shape + ["--mem-gb", "-1"], "--mem-gb"),
    (good_shape + ["--mem-gb", "lots"], "--mem-gb"),
    (good_shape + ["--users", "0"], "--users"),
    (good_shape + ["--users", "2000"], "--users"),
    (good_shape + ["--ctx", "0"], "--ctx"),
    (good_shape + ["--bogus"], "--bogus"),
]
def patched(key, value, name):
    """stories260K with the u32 metadata value of key replaced"""
    data = bytearray(open(s260_path, "rb").read())
    i = data.index(key) + len(key)
    assert struct.unpack_from("<I", data, i)[0] == 4   # u32
    struct.pack_into("<I", data, i + 4, value)
    out = os.path.join(tmp, name)
    with open(out, "wb") as f:
        f.write(data)
    return out


if os.path.exists(s260_path):
    # a context_length of 2^32 - 1: planned at ember's bound of 2^20, which
    # does not fit in 1 GiB (640 B x 2^20 = 640 MiB of KV)
    huge = patched(b"llama.context_length", 0xFFFFFFFF, "hugectx.gguf")
    rc, out, err = run("--model", huge, "--mem-gb", "1")
    check(rc == 1 and "one sequence of 1048576 tokens does not fit" in err and "640.0 MiB" in err
          and err.count("\n") == 1, f"hostile context_length: {rc} {err}")
    d = vram_json("--model", huge, "--mem-gb", "1", status=1)
    if d:
        eq("hostile context_length: ctx", d["kv"]["ctx"], 1 << 20)
        eq("hostile context_length: reported", d["context_length"], 0xFFFFFFFF)
    bad += [(["--model", patched(b"llama.attention.head_count_kv", 3, "kv3.gguf")], "cannot share 3 KV heads"),
            (["--model", trunc], "trunc.gguf"),
            (["--model", s260_path, "--kv-type", "q8_0"], "multiples of 32 (this model: 8)")]
for args, needle in bad:
    rc, out, err = run(*args)
    check(rc == 2, f"{args}: exit {rc}, expected 2 ({err.strip()})")
    check(err.count("\n") == 1 and err.startswith("ember: vram: "), f"{args}: stderr not one 'ember: vram:' line: {err!r}")
    check(needle is None or needle in err, f"{args}: stderr lacks {needle!r}: {err!r}")
    check(out == "", f"{args}: wrote to stdout: {out[:100]!r}")

rc, out, err = run("--help")
check(rc == 0 and "usage: ember vram" in out, "--help")
shutil.rmtree(tmp)

print(f"cli_vram: {checks - fails}/{checks} checks passed")
sys.exit(1 if fails else 0)
