/* test_gguf.c — the GGUF reader loads every shared model, round-trips what
 * the writer writes, and rejects a corpus of broken files (built here) with
 * one clear error each and no crash (run under ASan too). */
#include <stdint.h>

#include "core/model/gguf.h"
#include "tests/common/testutil.h"

/* ---- a byte builder that can write wrong values on purpose ---------------- */
typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(buf *b, size_t a) { while (b->n % a) put(b, "", 1); }

/* header + kvs: general.architecture=llama, general.alignment (optional) */
typedef struct {
    uint32_t magic, version;
    uint64_t n_tensors_override, n_kv_override;
    uint32_t tensor_type;
    uint64_t tensor_offset;
    uint32_t n_dims;
    uint64_t ne0, ne1;
    uint64_t key_len_override;
    int      dup_key, dup_tensor, bad_align, depth, bad_arr_type;
} spec;

static spec good(void)
{
    spec s = { 0x46554747u, 3, 0, 0, 0 /*F32*/, 0, 2, 32, 4, 0, 0, 0, 0, 0, 0 };
    return s;
}

static buf build(const spec *s)
{
    buf b = { 0 };
    int n_t = s->dup_tensor ? 2 : 1;
    int n_kv = 3 + (s->dup_key ? 1 : 0) + (s->bad_align ? 1 : 0) + (s->depth ? 1 : 0) +
               (s->bad_arr_type ? 1 : 0);
    u32(&b, s->magic);
    u32(&b, s->version);
    u64(&b, s->n_tensors_override ? s->n_tensors_override : (uint64_t)n_t);
    u64(&b, s->n_kv_override ? s->n_kv_override : (uint64_t)n_kv);
    /* kv 1: string */
    if (s->key_len_override) {
        u64(&b, s->key_len_override);
        put(&b, "general.architecture", 20);
    } else {
        str(&b, "general.architecture");
    }
    u32(&b, EM_GGUF_STRING);
    str(&b, "llama");
    /* kv 2: array of strings */
    str(&b, "tokenizer.ggml.tokens");
    u32(&b, EM_GGUF_ARRAY);
    u32(&b, EM_GGUF_STRING);
    u64(&b, 3);
    str(&b, "a");
    str(&b, "bc");
    str(&b, "");
    /* kv 3: array of f32 */
    str(&b, "scores");
    u32(&b, EM_GGUF_ARRAY);
    u32(&b, EM_GGUF_F32);
    u64(&b, 2);
    float f[2] = { 1.5f, -2.0f };
    put(&b, f, 8);
    if (s->dup_key) {
        str(&b, "scores");
        u32(&b, EM_GGUF_U32);
        u32(&b, 7);
    }
    if (s->bad_align) {
        str(&b, "general.alignment");
        u32(&b, EM_GGUF_U32);
        u32(&b, 24);
    }
    if (s->depth) {   /* arrays nested s->depth deep */
        str(&b, "nested");
        u32(&b, EM_GGUF_ARRAY);
        for (int d = 1; d < s->depth; d++) {
            u32(&b, EM_GGUF_ARRAY);
            u64(&b, 1);
        }
        u32(&b, EM_GGUF_U8);
        u64(&b, 1);
        put(&b, "x", 1);
    }
    if (s->bad_arr_type) {
        str(&b, "weird");
        u32(&b, EM_GGUF_ARRAY);
        u32(&b, 77);
        u64(&b, 1);
    }
    for (int t = 0; t < n_t; t++) {
        str(&b, "w");
        u32(&b, s->n_dims);
        u64(&b, s->ne0);
        if (s->n_dims >= 2)
            u64(&b, s->ne1);
        for (uint32_t d = 2; d < s->n_dims; d++)
            u64(&b, 1);
        u32(&b, s->tensor_type);
        u64(&b, s->tensor_offset + (uint64_t)t * 512);
    }
    pad_to(&b, 32);
    for (int i = 0; i < 1024; i++)
        put(&b, "\x01", 1);
    return b;
}

static void expect_error(const char *what, const spec *s, const char *needle)
{
    buf b = build(s);
    em_gguf *g = (em_gguf *)1;
    em_err e = { 0 };
    int rc = em_gguf_open_mem(b.p, b.n, "bad.gguf", &g, &e);
    CHECKF(rc < 0, "%s: accepted", what);
    CHECKF(g == NULL, "%s: out pointer not cleared", what);
    CHECKF(strstr(e.msg, "bad.gguf") != NULL, "%s: message does not name the file: %s", what, e.msg);
    CHECKF(strstr(e.msg, needle) != NULL, "%s: expected '%s' in: %s", what, needle, e.msg);
    CHECKF(strchr(e.msg, '\n') == NULL, "%s: message is not one line", what);
    free(b.p);
}

static void test_hostile(void)
{
    spec s = good();
    buf b = build(&s);
    em_gguf *g = NULL;
    em_err e = { 0 };
    CHECKF(em_gguf_open_mem(b.p, b.n, "good.gguf", &g, &e) == 0, "%s", e.msg);
    uint64_t sec[5] = { 0 };
    if (g) {
        const em_gguf_value *v = em_gguf_get(g, "tokenizer.ggml.tokens");
        CHECK(v && v->v.arr.n == 3 && em_gguf_str_eq(v->v.arr.items[1].v.str, "bc"));
        CHECK(em_gguf_n_tensors(g) == 1 && em_gguf_tensor_at(g, 0)->nbytes == 32 * 4 * 4);
        em_gguf_sections(g, sec);
        em_gguf_close(g);
    }
    /* truncated at every byte of the header/metadata/tensor-info region and
     * at each section boundary */
    for (size_t cut = 0; cut < sec[3] + 8 && cut < b.n; cut++) {
        em_err e2 = { 0 };
        em_gguf *g2 = NULL;
        int rc = em_gguf_open_mem(b.p, cut, "cut.gguf", &g2, &e2);
        CHECKF(rc < 0, "truncation at %zu accepted", cut);
        em_gguf_close(g2);
    }
    for (int i = 0; i < 4; i++) {
        em_err e2 = { 0 };
        em_gguf *g2 = NULL;
        int rc = em_gguf_open_mem(b.p, sec[i] ? sec[i] - 1 : 0, "cut.gguf", &g2, &e2);
        CHECKF(rc < 0, "truncation before section %d accepted", i);
        em_gguf_close(g2);
    }
    {   /* the tensor's data is 512 bytes: one byte short fails, exact fits */
        em_err e2 = { 0 };
        em_gguf *g2 = NULL;
        CHECK(em_gguf_open_mem(b.p, sec[3] + 511, "cut.gguf", &g2, &e2) == EM_EFORMAT &&
              strstr(e2.msg, "past the end"));
        CHECK(em_gguf_open_mem(b.p, sec[3] + 512, "cut.gguf", &g2, &e2) == 0);
        em_gguf_close(g2);
    }
    free(b.p);

    {   /* version 2 has the same layout as 3: accepted */
        spec v2 = good();
        v2.version = 2;
        buf b2 = build(&v2);
        em_gguf *g2 = NULL;
        em_err e2 = { 0 };
        CHECKF(em_gguf_open_mem(b2.p, b2.n, "v2.gguf", &g2, &e2) == 0 && em_gguf_version(g2) == 2, "%s", e2.msg);
        em_gguf_close(g2);
        free(b2.p);
    }
    s = good(); s.magic = 0x12345678;            expect_error("bad magic", &s, "not a GGUF file");
    s = good(); s.version = 1;                   expect_error("version 1", &s, "version 1");
    s = good(); s.version = 99;                  expect_error("version 99", &s, "unknown GGUF version");
    s = good(); s.n_kv_override = 1ull << 60;    expect_error("absurd kv count", &s, "impossible");
    s = good(); s.n_tensors_override = 1ull << 60; expect_error("absurd tensor count", &s, "impossible");
    s = good(); s.n_tensors_override = 40;       expect_error("too many tensors", &s, "past the end");
    s = good(); s.key_len_override = 1ull << 62; expect_error("oversized string", &s, "past the end");
    s = good(); s.tensor_type = 99;              expect_error("unknown type", &s, "unknown type 99");
    s = good(); s.tensor_type = 4;               expect_error("removed type 4", &s, "unknown type 4");
    s = good(); s.tensor_offset = 1ull << 40;    expect_error("offset past end", &s, "past the end");
    s = good(); s.tensor_offset = 16;            expect_error("misaligned", &s, "not aligned");
    s = good(); s.ne1 = 1000;                    expect_error("data past end", &s, "past the end");
    s = good(); s.n_dims = 5;                    expect_error("5 dims", &s, "dimensions");
    s = good(); s.n_dims = 0;                    expect_error("0 dims", &s, "dimensions");
    s = good(); s.ne1 = 0;                       expect_error("zero dim", &s, "zero dimension");
    s = good(); s.ne0 = 1ull << 40; s.ne1 = 1ull << 40; expect_error("overflow", &s, "overflows");
    s = good(); s.tensor_type = EM_T_Q4_0; s.ne0 = 48; expect_error("partial block", &s, "block size");
    s = good(); s.dup_key = 1;                   expect_error("duplicate key", &s, "duplicate metadata key");
    s = good(); s.dup_tensor = 1;                expect_error("duplicate tensor", &s, "duplicate tensor");
    s = good(); s.bad_align = 1;                 expect_error("alignment 24", &s, "power of two");
    s = good(); s.depth = 20;                    expect_error("deep nesting", &s, "deeper");
    s = good(); s.bad_arr_type = 1;              expect_error("array type 77", &s, "unknown type 77");
    s = good(); s.depth = 3;
    {
        buf ok = build(&s);
        em_gguf *g3 = NULL;
        em_err e3 = { 0 };
        CHECKF(em_gguf_open_mem(ok.p, ok.n, "nested.gguf", &g3, &e3) == 0, "%s", e3.msg);
        if (g3) {
            const em_gguf_value *v = em_gguf_get(g3, "nested");
            CHECK(v && v->v.arr.type == EM_GGUF_ARRAY && v->v.arr.n == 1 &&
                  v->v.arr.items[0].v.arr.items[0].v.arr.type == EM_GGUF_U8);
        }
        em_gguf_close(g3);
        free(ok.p);
    }

    /* random corruption: every outcome must be a clean accept or a clean error */
    unsigned long long seed = 42;
    s = good();
    s.depth = 2;
    buf base = build(&s);
    for (int it = 0; it < 4000; it++) {
        uint8_t *m = malloc(base.n);
        memcpy(m, base.p, base.n);
        int flips = 1 + (int)(test_rand(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(test_rand(&seed) % (sec[3] + 4));
            m[at] = (uint8_t)test_rand(&seed);
        }
        size_t len = test_rand(&seed) % 8 ? base.n : (size_t)(test_rand(&seed) % base.n);
        em_gguf *g4 = NULL;
        em_err e4 = { 0 };
        int rc = em_gguf_open_mem(m, len, "fuzz.gguf", &g4, &e4);
        CHECKF(rc == 0 || (rc < 0 && e4.msg[0] && !g4), "iteration %d", it);
        em_gguf_close(g4);
        free(m);
    }
    free(base.p);
}

static void test_writer_roundtrip(void)
{
    em_gguf_writer *w = NULL;
    CHECK(em_gguf_writer_create(32, &w, NULL) == 0);
    if (!w)
        return;
    const char *toks[] = { "<s>", "hello", "\xe2\x96\x81world" };
    int32_t tt[] = { 3, 1, 1 };
    em_gguf_w_str(w, "general.architecture", "llama");
    em_gguf_w_u32(w, "llama.block_count", 7);
    em_gguf_w_f32(w, "llama.rope.freq_base", 500000.0f);
    em_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, tt, 3);
    em_gguf_w_u32(w, "llama.block_count", 8);   /* replaces */
    uint64_t ne[2] = { 64, 3 }, nb1, nb2;
    CHECK(em_gguf_w_tensor(w, "a", EM_T_F32, 1, ne, &nb1) == 0 && nb1 == 256);
    CHECK(em_gguf_w_tensor(w, "b", EM_T_Q8_0, 2, ne, &nb2) == 0 && nb2 == 2 * 34 * 3);
    CHECK(em_gguf_w_tensor(w, "c", EM_T_Q4_0, 1, (uint64_t[]){ 33 }, NULL) == EM_EINVAL);
    char *mem = NULL;
    size_t memn = 0;
    FILE *f = open_memstream(&mem, &memn);
    float a[64];
    uint8_t bq[204];
    for (int i = 0; i < 64; i++)
        a[i] = (float)i;
    for (int i = 0; i < 204; i++)
        bq[i] = (uint8_t)i;
    em_err e = { 0 };
    CHECK(em_gguf_w_header(w, f, &e) == 0);
    CHECK(em_gguf_w_finish(w, &e) == EM_ESTATE);
    CHECK(em_gguf_w_data(w, f, a, sizeof a, &e) == 0);
    CHECK(em_gguf_w_data(w, f, bq, 100, &e) == 0);
    CHECK(em_gguf_w_data(w, f, bq + 100, 104, &e) == 0);
    CHECK(em_gguf_w_finish(w, &e) == 0);
    CHECK(em_gguf_w_data(w, f, bq, 1, &e) == EM_ESTATE);
    fclose(f);
    em_gguf *g = NULL;
    CHECKF(em_gguf_open_mem(mem, memn, "rt.gguf", &g, &e) == 0, "%s", e.msg);
    if (g) {
        uint32_t bc = 0;
        float fb = 0;
        int bos = 0;
        em_gguf_str s;
        CHECK(em_gguf_get_u32(g, "llama.block_count", &bc, NULL) == 0 && bc == 8);
        CHECK(em_gguf_get_f32(g, "llama.rope.freq_base", &fb, NULL) == 0 && fb == 500000.0f);
        CHECK(em_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &bos, NULL) == 0 && bos);
        CHECK(em_gguf_get_str(g, "general.architecture", &s, NULL) == 0 && em_gguf_str_eq(s, "llama"));
        CHECK(em_gguf_get_str(g, "llama.block_count", &s, &e) == EM_EFORMAT &&
              strstr(e.msg, "expected a string"));
        CHECK(em_gguf_get_u32(g, "missing.key", &bc, &e) == EM_ENOENT && strstr(e.msg, "missing.key"));
        /* a bool is not a count (block_count = true must not read as 1) */
        CHECKF(em_gguf_get_u32(g, "tokenizer.ggml.add_bos_token", &bc, &e) == EM_EFORMAT &&
                   strstr(e.msg, "is bool, expected a non-negative integer"), "%s", e.msg);
        int64_t iv = 0;
        CHECK(em_gguf_get_i64(g, "tokenizer.ggml.add_bos_token", &iv, &e) == EM_EFORMAT);
        const em_gguf_value *v = NULL;
        CHECK(em_gguf_get_arr(g, "tokenizer.ggml.tokens", EM_GGUF_STRING, &v, NULL) == 0 &&
              v->v.arr.n == 3 && em_gguf_str_eq(v->v.arr.items[2].v.str, "\xe2\x96\x81world"));
        CHECK(em_gguf_get_arr(g, "tokenizer.ggml.token_type", EM_GGUF_I32, &v, NULL) == 0 &&
              em_gguf_arr_i64(v, 0) == 3);
        CHECK(em_gguf_get_arr(g, "tokenizer.ggml.token_type", EM_GGUF_F32, &v, NULL) == EM_EFORMAT);
        const em_gguf_tensor *t = em_gguf_find_tensor(g, "b");
        CHECK(t && t->type == EM_T_Q8_0 && t->ne[1] == 3 && memcmp(t->data, bq, 204) == 0);
        t = em_gguf_find_tensor(g, "a");
        CHECK(t && memcmp(t->data, a, sizeof a) == 0);
        /* copy every entry into a second file: identical metadata */
        em_gguf_writer *w2 = NULL;
        em_gguf_writer_create(32, &w2, NULL);
        for (size_t i = 0; i < em_gguf_n_kv(g); i++)
            CHECK(em_gguf_w_kv_copy(w2, em_gguf_kv_at(g, i)) == 0);
        char *mem2 = NULL;
        size_t memn2 = 0;
        FILE *f2 = open_memstream(&mem2, &memn2);
        CHECK(em_gguf_w_header(w2, f2, &e) == 0);
        fclose(f2);
        em_gguf *g2 = NULL;
        CHECK(em_gguf_open_mem(mem2, memn2, "copy.gguf", &g2, &e) == 0);
        CHECK(g2 && em_gguf_n_kv(g2) == em_gguf_n_kv(g));
        em_gguf_close(g2);
        free(mem2);
        em_gguf_writer_destroy(w2);
        em_gguf_close(g);
    }
    free(mem);
    em_gguf_writer_destroy(w);
}

static void test_shared_models(void)
{
    static const char *files[] = {
        "models/stories260K.gguf", "models/TinyStories-656K-F32.gguf",
        "models/TinyStories-656K-Q8_0.gguf", "golden/tokenizer/ggml-vocab-llama-spm.gguf",
        "golden/tokenizer/ggml-vocab-gpt-2.gguf", "golden/tokenizer/ggml-vocab-baichuan.gguf",
    };
    static const char *archs[] = { "llama", "qwen2", "qwen3" };
    static const char *types[] = { "F32", "F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K" };
    char path[256];
    int n = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0] + 21; i++) {
        if (i < sizeof files / sizeof files[0]) {
            snprintf(path, sizeof path, "%s", files[i]);
        } else {
            size_t k = i - sizeof files / sizeof files[0];
            snprintf(path, sizeof path, "models/synth/synth-%s-256-%s.gguf", archs[k / 7], types[k % 7]);
        }
        em_gguf *g = NULL;
        em_err e = { 0 };
        int rc = em_gguf_open(test_shared(path), &g, &e);
        CHECKF(rc == 0, "%s: %s", path, e.msg);
        n += rc == 0;
        em_gguf_close(g);
    }
    printf("loaded %d shared GGUF files\n", n);
    /* file-level errors */
    em_gguf *g = NULL;
    em_err e = { 0 };
    CHECK(em_gguf_open("/nonexistent/x.gguf", &g, &e) == EM_ENOENT && strstr(e.msg, "x.gguf"));
    CHECK(em_gguf_open(test_shared("models"), &g, &e) == EM_EINVAL && strstr(e.msg, "directory"));
}

/* usage: test_gguf          the hostile corpus and the writer round trip
 *        test_gguf shared   every shared model (SKIP without ../shared) */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "shared") == 0) {
        if (!test_shared_dir()) {
            printf("SKIP: shared folder absent\n");
            return 77;
        }
        test_shared_models();
        return test_summary("gguf-shared");
    }
    test_hostile();
    test_writer_roundtrip();
    return test_summary("gguf");
}
