/* test_cli_errors.c — bad input to `ember run`, `logits` and `tokenize`:
 * missing file, directory, empty file, non-GGUF, truncated GGUF, unsupported
 * architecture and tensor type, token id out of range, malformed flags. Each
 * must print exactly one line "ember: <what>: <why>" on stderr and exit 2,
 * never crash. Files are made here, in a temporary directory. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "core/model/gguf.h"
#include "core/model/quant.h"
#include "tests/common/testutil.h"

static const char *bin;

/* Variations of the tiny model below (reset after each use): its declared
 * context_length, the rows of its embedding (past the 8 tokens: padding),
 * whether it stores a second layer that block_count (1) leaves out, whether
 * attn_norm is stored as [256, 1, 2], and whether its F32 weights are NaN. */
static uint32_t tiny_ctx = 64, tiny_embd_rows = 8;
static int tiny_extra_layer, tiny_norm_rank3;
static float tiny_fill;   /* nonzero: the value of every F32 weight (NaN) */
static const char *tiny_name;   /* general.name, if set */

/* Write a minimal llama model: n_embd 256, 1 layer, 4 heads, vocab 8, with
 * the given architecture name and attn_q type. */
static int write_tiny_model(const char *path, const char *arch, uint32_t q_type)
{
    em_gguf_writer *w = NULL;
    if (em_gguf_writer_create(32, &w, NULL))
        return -1;
    char key[64];
    em_gguf_w_str(w, "general.architecture", arch);
    if (tiny_name)
        em_gguf_w_str(w, "general.name", tiny_name);
#define K(s) (snprintf(key, sizeof key, "%s." s, arch), key)
    em_gguf_w_u32(w, K("embedding_length"), 256);
    em_gguf_w_u32(w, K("block_count"), 1);
    em_gguf_w_u32(w, K("feed_forward_length"), 256);
    em_gguf_w_u32(w, K("attention.head_count"), 4);
    em_gguf_w_u32(w, K("context_length"), tiny_ctx);
    if (tiny_embd_rows != 8)
        em_gguf_w_u32(w, K("vocab_size"), tiny_embd_rows);
#undef K
    const char *toks[8] = { "<unk>", "<s>", "</s>", "a", "b", "c", "d", "\xe2\x96\x81" };
    float scores[8] = { 0, 0, 0, -1, -2, -3, -4, -5 };
    int32_t types[8] = { 2, 3, 3, 1, 1, 1, 1, 1 };
    em_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 8);
    em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, 8);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, 8);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    struct { const char *name; uint32_t type; uint64_t ne0, ne1; } t[24] = {
        { "token_embd.weight", EM_T_F32, 256, tiny_embd_rows },
        { "output_norm.weight", EM_T_F32, 256, 1 },
        { "blk.0.attn_norm.weight", EM_T_F32, 256, 1 },
        { "blk.0.attn_q.weight", q_type, 256, 256 },
        { "blk.0.attn_k.weight", EM_T_F32, 256, 256 },
        { "blk.0.attn_v.weight", EM_T_F32, 256, 256 },
        { "blk.0.attn_output.weight", EM_T_F32, 256, 256 },
        { "blk.0.ffn_norm.weight", EM_T_F32, 256, 1 },
        { "blk.0.ffn_gate.weight", EM_T_F32, 256, 256 },
        { "blk.0.ffn_up.weight", EM_T_F32, 256, 256 },
        { "blk.0.ffn_down.weight", EM_T_F32, 256, 256 },
    };
    size_t nt = 11;
    char extra[9][48];
    if (tiny_extra_layer)   /* blk.1.* copies of the layer's tensors */
        for (size_t i = 2; i < 11; i++) {
            snprintf(extra[i - 2], sizeof extra[i - 2], "blk.1.%s", t[i].name + 6);
            t[nt] = t[i];
            t[nt++].name = extra[i - 2];
        }
    uint64_t sizes[24];
    for (size_t i = 0; i < nt; i++) {
        uint64_t ne[3] = { t[i].ne0, t[i].ne1, 1 };
        uint32_t nd = t[i].ne1 > 1 ? 2 : 1;
        if (tiny_norm_rank3 && i == 2) {
            ne[2] = 2;
            nd = 3;
        }
        em_gguf_w_tensor(w, t[i].name, t[i].type, nd, ne, &sizes[i]);
    }
    FILE *f = fopen(path, "wb");
    int rc = f ? em_gguf_w_header(w, f, NULL) : -1;
    for (size_t i = 0; !rc && i < nt; i++) {
        uint8_t *z = calloc(1, sizes[i]);
        if (t[i].type == EM_T_F32) {   /* small nonzero values */
            float *fz = (float *)z;
            for (uint64_t k = 0; k < sizes[i] / 4; k++)
                fz[k] = tiny_fill != 0 ? tiny_fill : 0.01f * (float)(k % 7);
        }
        rc = em_gguf_w_data(w, f, z, sizes[i], NULL);
        free(z);
    }
    if (f)
        fclose(f);
    em_gguf_writer_destroy(w);
    tiny_ctx = 64;
    tiny_embd_rows = 8;
    tiny_extra_layer = tiny_norm_rank3 = 0;
    tiny_fill = 0;
    tiny_name = NULL;
    return rc;
}

/* Write a copy of synth-llama-256-F32 whose token embeddings are all 1e30;
 * returns 0 where the shared folder is absent. */
static int write_huge_embeddings(const char *path)
{
    if (!test_shared_dir())
        return 0;
    const char *src = test_shared("models/synth/synth-llama-256-F32.gguf");
    size_t len = 0;
    char *data = test_read_file(src, &len);
    em_gguf *g = NULL;
    em_err err = { 0 };
    int ok = data && em_gguf_open(src, &g, &err) == 0;
    const em_gguf_tensor *t = ok ? em_gguf_find_tensor(g, "token_embd.weight") : NULL;
    CHECKF(t && t->type == EM_T_F32, "%s: token_embd.weight (F32) not found: %s", src, err.msg);
    if (t) {
        uint64_t at = em_gguf_data_offset(g) + t->offset;
        for (uint64_t k = 0; k < t->nelem && at + 4 * (k + 1) <= len; k++) {
            float v = 1e30f;
            memcpy(data + at + 4 * k, &v, 4);
        }
        test_write_file(path, data, len);
    }
    em_gguf_close(g);
    free(data);
    return t != NULL;
}

/* Write a copy of the shared models/synth/<model>.gguf without the metadata
 * entry drop_kv, with set_kv set to set_val (u32; f32 for
 * gemma3.final_logit_softcapping), and without the tensor drop_tensor (each
 * NULL: unchanged); returns 0 where the shared folder is absent. */
static int write_synth_variant(const char *model, const char *path, const char *drop_kv, const char *set_kv,
                               uint32_t set_val, const char *drop_tensor)
{
    if (!test_shared_dir())
        return 0;
    char rel[256];
    snprintf(rel, sizeof rel, "models/synth/%s.gguf", model);
    const char *src = test_shared(rel);
    em_gguf *g = NULL;
    em_gguf_writer *w = NULL;
    em_err err = { 0 };
    if (em_gguf_open(src, &g, &err) || em_gguf_writer_create(32, &w, &err)) {
        CHECKF(0, "%s: %s", src, err.msg);
        em_gguf_close(g);
        return 0;
    }
    for (size_t i = 0; i < em_gguf_n_kv(g); i++) {
        const em_gguf_kv *kv = em_gguf_kv_at(g, i);
        if (!(drop_kv && strcmp(kv->key, drop_kv) == 0))
            em_gguf_w_kv_copy(w, kv);
    }
    if (set_kv && strstr(set_kv, "softcapping"))
        em_gguf_w_f32(w, set_kv, (float)set_val);
    else if (set_kv)
        em_gguf_w_set_u32(w, set_kv, set_val);
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
        uint64_t nb;
        if (!(drop_tensor && strcmp(t->name, drop_tensor) == 0))
            em_gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, &nb);
    }
    FILE *f = fopen(path, "wb");
    int rc = f ? em_gguf_w_header(w, f, &err) : -1;
    for (size_t i = 0; !rc && i < em_gguf_n_tensors(g); i++) {
        const em_gguf_tensor *t = em_gguf_tensor_at(g, i);
        if (!(drop_tensor && strcmp(t->name, drop_tensor) == 0))
            rc = em_gguf_w_data(w, f, t->data, t->nbytes, &err);
    }
    if (!rc)
        rc = em_gguf_w_finish(w, &err);
    if (f)
        fclose(f);
    CHECKF(rc == 0, "writing %s: %s", path, err.msg);
    em_gguf_writer_destroy(w);
    em_gguf_close(g);
    return rc == 0;
}

/* argv for ember: bin, then args (up to 30, NULL-terminated) */
static void ember_argv(char *argv[32], char *const args[])
{
    int n = 0;
    argv[n++] = (char *)bin;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

/* Run ember with args; require exit 2 and exactly one "ember: " line. */
static void expect_bad(const char *label, const char *needle, char *const args[])
{
    char *argv[32];
    ember_argv(argv, args);
    test_expect_cli_error(label, argv, needle);
}

/* A copy of a synth model with one change (write_synth_variant), and what
 * ember must make of it: load_needle, refused at load with that in the one
 * error line; else it runs on the CPU, and on Vulkan (where there is a
 * device) it runs (vk_needle NULL) or is refused with vk_needle, which
 * `ember vram` then prints as its note. */
typedef struct {
    const char *name, *drop_kv, *set_kv;
    uint32_t    val;
    const char *drop_t, *load_needle, *vk_needle;
} synth_variant;

static void check_variants(const char *model, const synth_variant *v, size_t n, const char *dir, char *toks,
                           char *out)
{
    for (size_t i = 0; i < n; i++) {
        char path[600], label[128];
        snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, model, v[i].name);
        snprintf(label, sizeof label, "%s %s", model, v[i].name);
        if (!write_synth_variant(model, path, v[i].drop_kv, v[i].set_kv, v[i].val, v[i].drop_t))
            return;
        char *args[] = { "logits", "--model", path, "--tokens-file", toks, "--output", out, "--backend", "cpu", NULL };
        if (v[i].load_needle) {
            expect_bad(label, v[i].load_needle, args);
            continue;
        }
        char *argv[32], *err = NULL;
        ember_argv(argv, args);
        int st = test_run(argv, NULL, &err);
        CHECKF(st == 0, "%s on the CPU: status %d: %s", label, st, err ? err : "");
        free(err);
        err = NULL;
        args[8] = "vulkan";
        ember_argv(argv, args);
        st = test_run(argv, NULL, &err);
        int no_device = st == 1 && err && strstr(err, "ember: vulkan: ");
        free(err);
        err = NULL;
        if (!v[i].vk_needle) {
            CHECKF(st == 0 || no_device, "%s on vulkan: status %d", label, st);
            continue;
        }
        if (!no_device)
            test_expect_cli_error(label, argv, v[i].vk_needle);
        char *vargs[] = { "vram", "--model", path, "--mem-gb", "1", NULL }, *vout = NULL;
        ember_argv(argv, vargs);
        st = test_run(argv, &vout, &err);
        CHECKF(st == 0 && vout && strstr(vout, "\nnote      forward: ") && strstr(vout, v[i].vk_needle),
               "%s: vram: status %d: %s%s", label, st, vout ? vout : "", err ? err : "");
        free(vout);
        free(err);
    }
}

/* Run ember with stdout on /dev/full (every write fails with ENOSPC): a
 * command whose output never arrived must exit 1 with one error line, not 0. */
static void expect_lost_output(const char *label, char *const args[])
{
    char *argv[32];
    ember_argv(argv, args);
    char *err = NULL;
    int st = test_run_stdout(argv, "/dev/full", NULL, &err);
    CHECKF(st == 1, "%s: exit status %d, want 1 (stderr: %s)", label, st, err ? err : "");
    CHECKF(err && strstr(err, "cannot write the output"), "%s: stderr: %s", label, err ? err : "");
    free(err);
}

/* em_err_escape: control bytes, bytes that are not valid UTF-8 and C1
 * controls become \xNN, valid characters are kept, and a message that no
 * longer fits is cut before an escape or a character, never inside one. */
static void escape_cases(void)
{
    char b[64];
    snprintf(b, sizeof b, "plain 'text' \xc3\xa9");   /* UTF-8 stays as it is */
    em_err_escape(b, sizeof b);
    CHECK(strcmp(b, "plain 'text' \xc3\xa9") == 0);
    snprintf(b, sizeof b, "a\nb\tc\033\177d");
    em_err_escape(b, sizeof b);
    CHECKF(strcmp(b, "a\\x0ab\\x09c\\x1b\\x7fd") == 0, "escaped: %s", b);
    snprintf(b, 8, "ab\ncd");                       /* 2 + 4 + 2 = 8 bytes: 'd' is cut */
    em_err_escape(b, 8);
    CHECKF(strcmp(b, "ab\\x0ac") == 0, "cut: %s", b);
    snprintf(b, 6, "ab\ncd");                       /* the escape does not fit: cut before it */
    em_err_escape(b, 6);
    CHECKF(strcmp(b, "ab") == 0, "cut before the escape: %s", b);
    /* invalid UTF-8: a stray continuation byte, 0xff, an overlong '/', a
     * surrogate, a cut sequence at the end; C1 control U+009B (CSI) */
    snprintf(b, sizeof b, "a\x80" "b\xff\xc0\xaf\xed\xa0\x80\xc2\x9b\xe2\x82");
    em_err_escape(b, sizeof b);
    CHECKF(strcmp(b, "a\\x80b\\xff\\xc0\\xaf\\xed\\xa0\\x80\\xc2\\x9b\\xe2\\x82") == 0, "invalid UTF-8: %s", b);
    snprintf(b, sizeof b, "\xf0\x9f\x94\xa5 \xe2\x96\x81 \xc2\xa0");   /* 4-, 3- and 2-byte characters stay */
    em_err_escape(b, sizeof b);
    CHECKF(strcmp(b, "\xf0\x9f\x94\xa5 \xe2\x96\x81 \xc2\xa0") == 0, "valid UTF-8: %s", b);
    snprintf(b, 7, "\nab\xe2\x96\x81");                /* 4 + 2 bytes fit, the 3-byte character does not */
    em_err_escape(b, 7);
    CHECKF(strcmp(b, "\\x0aab") == 0, "cut before a character: %s", b);
    em_err e = { 0 };
    em_err_set(&e, EM_EFORMAT, "key '%s' is bad", "x\ny");
    em_err_prefix(&e, EM_EFORMAT, "%s", "f\r.gguf");
    CHECKF(strcmp(e.msg, "f\\x0d.gguf: key 'x\\x0ay' is bad") == 0, "em_err: %s", e.msg);
}

int main(void)
{
    escape_cases();
    bin = getenv("EMBER_BIN");
    if (!bin) {
        fprintf(stderr, "EMBER_BIN is not set\n");
        return 1;
    }
    char *dir = test_tmpdir();
    char missing[512], empty[512], text[512], trunc[512], arch[512], qtype[512], toks[512],
        badtoks[512], good[512], out[512], ctl_arch[512];
    snprintf(missing, sizeof missing, "%s/missing.gguf", dir);
    snprintf(empty, sizeof empty, "%s/empty.gguf", dir);
    snprintf(text, sizeof text, "%s/text.gguf", dir);
    snprintf(trunc, sizeof trunc, "%s/trunc.gguf", dir);
    snprintf(arch, sizeof arch, "%s/mamba.gguf", dir);
    snprintf(ctl_arch, sizeof ctl_arch, "%s/ctl-arch.gguf", dir);
    snprintf(qtype, sizeof qtype, "%s/iq2.gguf", dir);
    snprintf(good, sizeof good, "%s/good.gguf", dir);
    snprintf(toks, sizeof toks, "%s/toks.txt", dir);
    snprintf(badtoks, sizeof badtoks, "%s/badtoks.txt", dir);
    snprintf(out, sizeof out, "%s/out.f32", dir);
    test_write_file(empty, "", 0);
    test_write_file(text, "hello, I am not a model\n", 24);
    test_write_file(toks, "1 3 4\n", 6);
    test_write_file(badtoks, "1 3 99999\n", 10);
    CHECK(write_tiny_model(arch, "mamba", EM_T_F32) == 0);
    CHECK(write_tiny_model(ctl_arch, "ll\nm\033[2Ja", EM_T_F32) == 0);   /* a newline and a terminal escape */
    CHECK(write_tiny_model(qtype, "llama", EM_T_IQ2_XXS) == 0);
    CHECK(write_tiny_model(good, "llama", EM_T_F32) == 0);
    size_t glen = 0;
    char *gdata = test_read_file(good, &glen);
    CHECK(gdata && glen > 1000);
    if (gdata)
        test_write_file(trunc, gdata, glen / 2);
    free(gdata);

    /* sanity: the good tiny model works, so the failures below are about the input */
    {
        char *argv[] = { (char *)bin, "logits", "--model", good, "--tokens-file", toks,
                         "--output", out, "--backend", "cpu", NULL };
        char *err = NULL;
        int st = test_run(argv, NULL, &err);
        CHECKF(st == 0, "good tiny model: status %d: %s", st, err ? err : "");
        free(err);
    }

    const char *files[][2] = {
        { missing, "No such file" }, { dir, "directory" }, { empty, "empty file" },
        { text, "not a GGUF file" }, { trunc, "past the end" },
        { arch, "architecture 'mamba' is not supported" }, { qtype, "IQ2_XXS" },
        { ctl_arch, "architecture 'll\\x0am\\x1b[2Ja' is not supported" },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *f = (char *)files[i][0];
        char label[600];
        snprintf(label, sizeof label, "run %s", f);
        expect_bad(label, files[i][1], (char *[]){ "run", "--model", f, "-n", "2", "--backend", "cpu", NULL });
        snprintf(label, sizeof label, "logits %s", f);
        expect_bad(label, files[i][1], (char *[]){ "logits", "--model", f, "--tokens-file", toks,
                                                   "--output", out, "--backend", "cpu", NULL });
        if (i < 5) {   /* tokenize reads only the vocabulary: unsupported weights are fine */
            snprintf(label, sizeof label, "tokenize %s", f);
            expect_bad(label, files[i][1], (char *[]){ "tokenize", "--model", f, "--text", "abc", NULL });
        }
    }
    expect_bad("token out of range", "out of range",
               (char *[]){ "logits", "--model", good, "--tokens-file", badtoks, "--output", out,
                           "--backend", "cpu", NULL });
    expect_bad("tokens file missing", "No such file",
               (char *[]){ "logits", "--model", good, "--tokens-file", missing, "--output", out, NULL });
    expect_bad("tokens not numbers", "not a non-negative integer",
               (char *[]){ "logits", "--model", good, "--tokens-file", text, "--output", out, NULL });
    /* input files are capped: a device that never ends, a (sparse) file past the cap */
    expect_bad("tokenize /dev/zero", "larger than the 64 MiB",
               (char *[]){ "tokenize", "--model", good, "--file", "/dev/zero", NULL });
    {
        char huge[600];
        snprintf(huge, sizeof huge, "%s/huge.txt", dir);
        test_write_file(huge, "", 0);
        CHECK(truncate(huge, (off_t)(64 << 20) + 1) == 0);
        expect_bad("perplexity on a file past 64 MiB", "67108865 bytes, larger than",
                   (char *[]){ "perplexity", "--model", good, "--file", huge, "--backend", "cpu", NULL });
        unlink(huge);
    }
    expect_bad("unknown flag", "unknown option", (char *[]){ "run", "--bogus", NULL });
    expect_bad("bad number", "not a number", (char *[]){ "run", "--model", good, "--temp", "abc", NULL });
    expect_bad("negative n", "out of range", (char *[]){ "run", "--model", good, "-n", "-5", NULL });
    expect_bad("missing value", "missing value", (char *[]){ "run", "--model", NULL });
    /* integers are digits with an optional '-'; an overflow is out of range, not "not an integer" */
    expect_bad("plus sign", "'+5' is not an integer", (char *[]){ "run", "--model", good, "-n", "+5", NULL });
    expect_bad("leading space", "' 5' is not an integer", (char *[]){ "run", "--model", good, "-n", " 5", NULL });
    expect_bad("overflow", "99999999999999999999 is out of range",
               (char *[]){ "run", "--model", good, "-n", "99999999999999999999", NULL });
    expect_bad("control bytes in a flag's value", "'1\\x0a2' is not a number",
               (char *[]){ "run", "--model", good, "--temp", "1\n2", NULL });
    expect_bad("float plus sign", "not a number", (char *[]){ "run", "--model", good, "--temp", "+1", NULL });
    expect_bad("float overflow", "1e309 is out of range [0, 100]",
               (char *[]){ "run", "--model", good, "--temp", "1e309", NULL });
    /* bench: a flag of the other form is refused, not ignored; lists say what is wrong */
    expect_bad("bench --background without --users", "--background applies only to the load benchmark",
               (char *[]){ "bench", "--model", good, "--background", "1", NULL });
    expect_bad("bench --kv-mb without --users", "--kv-mb applies only",
               (char *[]){ "bench", "--model", good, "--kv-mb", "4", NULL });
    expect_bad("bench --users with --contexts", "--contexts does not apply",
               (char *[]){ "bench", "--model", good, "--users", "1", "--contexts", "64", NULL });
    expect_bad("bench --users with --profile", "--profile does not apply",
               (char *[]){ "bench", "--model", good, "--users", "1", "--profile", NULL });
    expect_bad("bench long list", "more than 8 values",
               (char *[]){ "bench", "--model", good, "--contexts", "1,2,3,4,5,6,7,8,9", NULL });
    expect_bad("bench list trailing comma", "not a comma-separated list",
               (char *[]){ "bench", "--model", good, "--contexts", "64,", NULL });
    expect_bad("bench list zero", "0 is out of range [1, 1048576]",
               (char *[]){ "bench", "--model", good, "--users", "2,0", NULL });
    expect_bad("bad backend", "not a backend", (char *[]){ "run", "--model", good, "--backend", "cuda", NULL });
    expect_bad("unknown command", "unknown command", (char *[]){ "frobnicate", NULL });
    expect_bad("logits without args", "required", (char *[]){ "logits", NULL });
    expect_bad("tokenize without text", NULL, (char *[]){ "tokenize", "--model", good, NULL });
    expect_bad("prompt too long", "does not fit",
               (char *[]){ "run", "--model", good, "--ctx", "4", "--prompt", "abcdabcdabcd",
                           "--backend", "cpu", NULL });

    /* metadata and tensors that pass the GGUF checks but contradict each other */
    {
        char m1[600], m2[600], m3[600];
        snprintf(m1, sizeof m1, "%s/ctx0.gguf", dir);
        snprintf(m2, sizeof m2, "%s/extra-layer.gguf", dir);
        snprintf(m3, sizeof m3, "%s/rank3.gguf", dir);
        tiny_ctx = 0;
        CHECK(write_tiny_model(m1, "llama", EM_T_F32) == 0);
        tiny_extra_layer = 1;
        CHECK(write_tiny_model(m2, "llama", EM_T_F32) == 0);
        tiny_norm_rank3 = 1;
        CHECK(write_tiny_model(m3, "llama", EM_T_F32) == 0);
        expect_bad("context_length 0", "context_length' is 0",
                   (char *[]){ "run", "--model", m1, "-n", "2", "--backend", "cpu", NULL });
        expect_bad("layer past block_count", "is for layer 1, but 'llama.block_count' is 1",
                   (char *[]){ "run", "--model", m2, "-n", "2", "--backend", "cpu", NULL });
        expect_bad("rank-3 norm", "has shape [256, 1, 2], expected [256]",
                   (char *[]){ "logits", "--model", m3, "--tokens-file", toks, "--output", out,
                               "--backend", "cpu", NULL });

        /* NaN weights: an error, not "stop: length" with nothing generated */
        char m4[600], m5[600], ids[600];
        snprintf(m4, sizeof m4, "%s/nan.gguf", dir);
        tiny_fill = NAN;
        CHECK(write_tiny_model(m4, "llama", EM_T_F32) == 0);
        expect_bad("NaN weights", "non-finite logit",
                   (char *[]){ "run", "--model", m4, "-n", "2", "--prompt", "", "--backend", "cpu", NULL });
        /* logits too, and a failed run leaves an existing OUT as it was */
        char keep[600];
        snprintf(keep, sizeof keep, "%s/keep.f32", dir);
        test_write_file(keep, "previous", 8);
        expect_bad("NaN weights (logits)", "non-finite logit",
                   (char *[]){ "logits", "--model", m4, "--tokens-file", toks, "--output", keep, "--backend",
                               "cpu", NULL });
        size_t klen = 0;
        char *kept = test_read_file(keep, &klen);
        CHECKF(kept && klen == 8 && memcmp(kept, "previous", 8) == 0, "logits: OUT changed by a failed run (%zu bytes)",
               klen);
        free(kept);

        /* huge but finite embeddings (1e30, in a copy of a synth model): the
         * RMS norm's mean square passes the float range, which used to make
         * its factor 0 and every logit exactly 0 with exit 0, on both
         * backends; both now report it */
        char m6[600];
        snprintf(m6, sizeof m6, "%s/huge.gguf", dir);
        if (write_huge_embeddings(m6)) {
            expect_bad("huge embeddings", "non-finite logit",
                       (char *[]){ "logits", "--model", m6, "--tokens-file", toks, "--output", out, "--backend",
                                   "cpu", NULL });
            /* and on Vulkan where there is a device (else exit 1 and "vulkan: ...") */
            char *argv[32], *err = NULL;
            ember_argv(argv, (char *[]){ "logits", "--model", m6, "--tokens-file", toks, "--output", out,
                                         "--backend", "vulkan", NULL });
            int st = test_run(argv, NULL, &err);
            if (!(st == 1 && err && strstr(err, "ember: vulkan: ")))
                test_expect_cli_error("huge embeddings (vulkan)", argv, "non-finite logit");
            free(err);
        }

        /* gemma3 whose window metadata is missing or inconsistent, or that
         * lacks a post-norm: refused at load, naming what is wrong; a good
         * copy runs on the CPU and on Vulkan; one that caps its logits runs
         * on the CPU and Vulkan refuses it by name */
        static const synth_variant gv[] = {
            { "good", NULL, NULL, 0, NULL, NULL, NULL },
            { "window0", NULL, "gemma3.attention.sliding_window", 0, NULL, "sliding window 0, pattern 6", NULL },
            { "pattern0", NULL, "gemma3.attention.sliding_window_pattern", 0, NULL, "sliding window 16, pattern 0",
              NULL },
            { "nowindow", "gemma3.attention.sliding_window", NULL, 0, NULL, "gemma3.attention.sliding_window", NULL },
            { "nopost", NULL, NULL, 0, "blk.3.post_ffw_norm.weight", "missing tensor 'blk.3.post_ffw_norm.weight'",
              NULL },
            { "softcap", NULL, "gemma3.final_logit_softcapping", 30, NULL, NULL,
              "caps its logits (final_logit_softcapping)" },
        };
        check_variants("synth-gemma3-256-F16", gv, sizeof gv / sizeof gv[0], dir, toks, out);
        /* qwen3moe whose expert metadata is missing or disagrees with its
         * tensors: refused at load, naming what is wrong; a good copy runs
         * on the CPU and on Vulkan */
        static const synth_variant mv[] = {
            { "good", NULL, NULL, 0, NULL, NULL, NULL },
            { "nocount", "qwen3moe.expert_count", NULL, 0, NULL, "qwen3moe.expert_count", NULL },
            { "used9", NULL, "qwen3moe.expert_used_count", 9, NULL, "uses 9 of 8 experts", NULL },
            { "used0", NULL, "qwen3moe.expert_used_count", 0, NULL, "uses 0 of 8 experts", NULL },
            { "count4", NULL, "qwen3moe.expert_count", 4, NULL,
              "tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 4]", NULL },
            { "rows128", NULL, "qwen3moe.expert_feed_forward_length", 128, NULL,
              "tensor 'blk.0.ffn_gate_exps.weight' has shape [256, 256, 8], expected [256, 128, 8]", NULL },
            { "noexps", NULL, NULL, 0, "blk.1.ffn_down_exps.weight", "missing tensor 'blk.1.ffn_down_exps.weight'",
              NULL },
        };
        check_variants("synth-qwen3moe-256-F16", mv, sizeof mv / sizeof mv[0], dir, toks, out);
        /* gpt-oss: its window, its sinks and its experts' biases */
        static const synth_variant ov[] = {
            { "good", NULL, NULL, 0, NULL, NULL, NULL },
            { "window0", NULL, "gpt-oss.attention.sliding_window", 0, NULL, "gpt-oss sliding window 0", NULL },
            { "nowindow", "gpt-oss.attention.sliding_window", NULL, 0, NULL, "gpt-oss.attention.sliding_window",
              NULL },
            { "nosinks", NULL, NULL, 0, "blk.2.attn_sinks.weight", "missing tensor 'blk.2.attn_sinks.weight'", NULL },
            { "nobias", NULL, NULL, 0, "blk.0.ffn_up_exps.bias", "missing tensor 'blk.0.ffn_up_exps.bias'", NULL },
            { "yarnctx0", NULL, "gpt-oss.rope.scaling.original_context_length", 0, NULL, "YaRN original context 0",
              NULL },
        };
        check_variants("synth-gptoss-192-F16", ov, sizeof ov / sizeof ov[0], dir, toks, out);

        /* an embedding padded past the tokenizer: the padding ids have no
         * text and are never generated (they used to vanish from the text) */
        snprintf(m5, sizeof m5, "%s/padded.gguf", dir);
        snprintf(ids, sizeof ids, "%s/padded.ids", dir);
        tiny_embd_rows = 64;
        CHECK(write_tiny_model(m5, "llama", EM_T_F32) == 0);
        int n_gen = 0, bad = 0;
        for (int seed = 1; seed <= 4; seed++) {   /* sampled ids would mostly be padding (56 of 64) */
            char sd[8];
            snprintf(sd, sizeof sd, "%d", seed);
            char *argv[] = { (char *)bin, "run", "--model", m5, "-n", "24", "--temp", "1", "--seed", sd,
                             "--backend", "cpu", "--ids-out", ids, NULL };
            char *err = NULL;
            int st = test_run(argv, NULL, &err);
            CHECKF(st == 0, "padded vocabulary: status %d: %s", st, err ? err : "");
            free(err);
            size_t ilen = 0;
            char *itext = test_read_file(ids, &ilen);
            const char *g = itext ? strstr(itext, "\n") : NULL;   /* the generated line */
            for (char *e; g && *g;) {
                long v = strtol(g, &e, 10);
                if (e == g) {
                    g++;
                    continue;
                }
                n_gen++;
                bad += v >= 8;
                g = e;
            }
            free(itext);
        }
        CHECKF(n_gen >= 8 && bad == 0, "padded vocabulary: %d ids generated, %d past the tokenizer", n_gen, bad);
    }

    /* a context past the trained one works, with a warning (it used to be silent) */
    {
        char *argv[] = { (char *)bin, "run", "--model", good, "-n", "2", "--ctx", "100", "--backend", "cpu", NULL };
        char *err = NULL;
        int st = test_run(argv, NULL, &err);
        CHECKF(st == 0 && err && strstr(err, "warning: a 100-token context is longer than the 64 tokens"),
               "--ctx past context_length: status %d: %s", st, err ? err : "");
        free(err);
        /* an error after it stays the one line: the warning comes only once the run starts */
        char longp[200];
        memset(longp, 'a', 160);
        longp[160] = 0;
        expect_bad("prompt past a context past context_length", "does not fit",
                   (char *[]){ "run", "--model", good, "-n", "2", "--ctx", "100", "--prompt", longp, "--backend",
                               "cpu", NULL });
        argv[7] = "64";
        st = test_run(argv, NULL, &err);
        CHECKF(st == 0 && err && !strstr(err, "warning"), "--ctx 64: status %d: %s", st, err ? err : "");
        free(err);
    }

    /* run's summary line quotes general.name: escaped, still one line */
    {
        char named[600];
        snprintf(named, sizeof named, "%s/named.gguf", dir);
        tiny_name = "tiny\n\033[2Jmodel";
        CHECK(write_tiny_model(named, "llama", EM_T_F32) == 0);
        char *argv[] = { (char *)bin, "run", "--model", named, "-n", "2", "--backend", "cpu", NULL };
        char *err = NULL;
        int st = test_run(argv, NULL, &err);
        CHECKF(st == 0 && test_count_lines(err) == 1 && strstr(err, "ember: tiny\\x0a\\x1b[2Jmodel | "),
               "summary with a control byte in general.name: status %d: [%s]", st, err ? err : "");
        free(err);
    }

    /* logits: its context is the token list, so a list past context_length
     * gets the same warning (it used to be silent) */
    {
        char many[600], buf[400] = "";
        snprintf(many, sizeof many, "%s/70.txt", dir);
        for (int i = 0; i < 70; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%d ", 1 + i % 7);
        test_write_file(many, buf, strlen(buf));
        char *argv[] = { (char *)bin, "logits", "--model", good, "--tokens-file", many, "--output", out,
                         "--backend", "cpu", NULL };
        char *err = NULL;
        int st = test_run(argv, NULL, &err);
        CHECKF(st == 0 && err && strstr(err, "warning: a 70-token context is longer than the 64 tokens"),
               "logits past context_length: status %d: %s", st, err ? err : "");
        free(err);
        argv[5] = toks;
        st = test_run(argv, NULL, &err);
        CHECKF(st == 0 && err && !strstr(err, "warning"), "logits of 3 tokens: status %d: %s", st, err ? err : "");
        free(err);
    }

    /* output paths that cannot be written are refused before any work */
    expect_bad("ids-out in a missing directory", "no such directory",
               (char *[]){ "run", "--model", good, "-n", "2", "--backend", "cpu", "--ids-out",
                           "/nonexistent-ember-dir/ids.txt", NULL });
    expect_bad("ids-out empty", "the path is empty",
               (char *[]){ "run", "--model", good, "-n", "2", "--backend", "cpu", "--ids-out", "", NULL });
    expect_bad("logits output a directory", "is a directory",
               (char *[]){ "logits", "--model", good, "--tokens-file", toks, "--output", dir, "--backend", "cpu",
                           NULL });

    /* ids after a NUL byte would be dropped unseen by a C-string parser */
    {
        char nultoks[600];
        snprintf(nultoks, sizeof nultoks, "%s/nultoks.txt", dir);
        test_write_file(nultoks, "1 3\0 99999 abc\n", 15);
        expect_bad("NUL in tokens file", "NUL byte after token 2",
                   (char *[]){ "logits", "--model", good, "--tokens-file", nultoks, "--output", out,
                               "--backend", "cpu", NULL });
    }

    if (access("/dev/full", W_OK) == 0) {
        expect_lost_output("run > /dev/full",
                           (char *[]){ "run", "--model", good, "-n", "2", "--backend", "cpu", NULL });
        expect_lost_output("tokenize > /dev/full", (char *[]){ "tokenize", "--model", good, "--text", "abc", NULL });
        expect_lost_output("--help > /dev/full", (char *[]){ "--help", NULL });
    } else {
        printf("# /dev/full is not writable here: lost-output checks skipped\n");
    }

    test_rmtree(dir);
    free(dir);
    return test_summary("cli-errors");
}
