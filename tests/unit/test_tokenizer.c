/* test_tokenizer.c — core/tokenizer: every golden case in
 * $EMBER_SHARED/golden/tokenizer (llama-spm, gpt-2, starcoder, deepseek-coder,
 * falcon, bert-bge; baichuan loads) and the Hugging Face ids of the
 * all-MiniLM-L6-v2 texts (golden/embeddings), decode(encode(x)) == x round
 * trips (WordPiece: encode(decode(ids)) == ids, as it normalizes), the streaming
 * decoder (split multi-byte characters, ill-formed bytes -> U+FFFD, the
 * at_start rule), special-token parsing, BOS/EOS/EOG, and hostile metadata
 * built here with the GGUF writer (each must be an error, never a crash).
 * Without the shared folder the synthetic parts run and the test skips. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/model/gguf.h"
#include "core/text/tokenizer.h"
#include "tests/common/testutil.h"

static const char *const SEP = "\n__ggml_vocab_test__\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- helpers -------------------------------------------------------------- */

static int encode(const em_tokenizer *t, const char *s, size_t len, int add_special,
                  int parse_special, int32_t **ids, size_t *n)
{
    em_err err = { 0 };
    int rc = em_tokenizer_encode(t, s, len, add_special, parse_special, ids, n, &err);
    if (rc)
        fprintf(stderr, "encode failed: %s\n", err.msg);
    return rc;
}

static int ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *v, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", v[i]);
    fputc('\n', stderr);
}

/* Length of the well-formed UTF-8 character at p, 0 if ill-formed. */
static int utf8_len_ok(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int l = p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 && p[0] < 0xE0 ? 2 : 0;
    if (p[0] > 0xF4 || l == 0)
        return 0;
    for (int i = 1; i < l; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    unsigned cp = l == 2 ? ((p[0] & 0x1Fu) << 6 | (p[1] & 0x3Fu))
                : l == 3 ? ((p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu))
                         : ((p[0] & 0x07u) << 18 | (p[1] & 0x3Fu) << 12 | (p[2] & 0x3Fu) << 6 | (p[3] & 0x3Fu));
    if ((l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return l;
}

/* decode(encode(s)) must give s back exactly. */
static int round_trip(const em_tokenizer *t, const char *s, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    em_err err = { 0 };
    int ok = encode(t, s, len, 0, 0, &ids, &n) == 0 &&
             em_tokenizer_decode(t, ids, n, &back, &err) == 0 && strlen(back) == len &&
             memcmp(back, s, len) == 0;
    if (!ok)
        fprintf(stderr, "  round trip of [%.*s] gave [%s] %s\n", (int)len, s, back ? back : "",
                err.msg);
    free(ids);
    free(back);
    return ok;
}

/* WordPiece loses case, accents and spacing, so decoding does not give the
 * text back; what it gives must tokenize to the same ids again, less the
 * [UNK]s (whole words that decode to nothing). */
static int wpm_round_trip(const em_tokenizer *t, const char *s, size_t len)
{
    int32_t *ids = NULL, *again = NULL;
    size_t n = 0, n_again = 0, kept = 0;
    char *back = NULL;
    em_err err = { 0 };
    int ok = encode(t, s, len, 0, 0, &ids, &n) == 0;
    for (size_t i = 0; ok && i < n; i++)
        if (ids[i] != 100)   /* [UNK] in the BERT vocabularies */
            ids[kept++] = ids[i];
    ok = ok && em_tokenizer_decode(t, ids, kept, &back, &err) == 0 &&
         encode(t, back, strlen(back), 0, 0, &again, &n_again) == 0 && ids_eq(ids, kept, again, n_again);
    if (!ok)
        fprintf(stderr, "  WordPiece round trip of [%.*s] gave [%s] %s\n", (int)len, s, back ? back : "",
                err.msg);
    free(ids);
    free(again);
    free(back);
    return ok;
}

static int open_tok(const char *path, em_gguf **g, em_tokenizer **t)
{
    em_err err = { 0 };
    *g = NULL;
    *t = NULL;
    if (em_gguf_open(path, g, &err) || em_tokenizer_create(*g, t, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        em_gguf_close(*g);
        *g = NULL;
        return -1;
    }
    return 0;
}

/* Push ids through a fresh streaming decoder, concatenating the output. */
static char *stream(const em_tokenizer *t, int at_start, const int32_t *ids, size_t n)
{
    static char acc[4096];
    char buf[1024];
    size_t len = 0;
    em_detok d;
    em_detok_init(&d, at_start);
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? em_detok_push(t, &d, ids[i], buf, sizeof buf)
                      : em_detok_flush(t, &d, buf, sizeof buf);
        if (k < 0 || len + (size_t)k >= sizeof acc)
            return NULL;
        CHECK(strlen(buf) == (size_t)k);
        memcpy(acc + len, buf, (size_t)k);
        len += (size_t)k;
    }
    acc[len] = 0;
    return acc;
}

/* ---- golden cases --------------------------------------------------------- */

static void golden(const char *name, int expect_all, int wordpiece)
{
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s", test_shared("golden/tokenizer"));
    size_t dl = strlen(path);
    snprintf(path + dl, sizeof path - dl, "/ggml-vocab-%s.gguf", name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    em_gguf *g;
    em_tokenizer *t;
    double t0 = now();
    if (open_tok(path, &g, &t)) {
        CHECKF(0, "%s does not load", name);
        return;
    }
    double t1 = now();
    size_t inp_len = 0, out_len = 0;
    char *inp = test_read_file(inp_path, &inp_len);
    char *out = test_read_file(out_path, &out_len);
    CHECKF(inp && out, "%s: cannot read the .inp/.out files", name);
    int n_case = 0, n_pass = 0, n_rt = 0;
    char *ip = inp, *op = out;
    while (inp && out) {
        char *sep = strstr(ip, SEP);
        if (!sep)
            break;
        size_t tlen = (size_t)(sep - ip);
        char *nl = strchr(op, '\n');
        if (!nl)
            break;
        *nl = 0;
        /* expected ids: " 1 2 3" */
        int32_t exp[4096];
        size_t ne = 0;
        for (char *p = op, *end; ne < 4096; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            exp[ne++] = (int32_t)v;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        n_case++;
        if (encode(t, ip, tlen, 0, 0, &ids, &n) == 0 && ids_eq(ids, n, exp, ne)) {
            n_pass++;
        } else {
            fprintf(stderr, "%s case %d [%.*s]:\n", name, n_case, (int)(tlen > 60 ? 60 : tlen), ip);
            print_ids("expected", exp, ne);
            print_ids("got     ", ids, n);
        }
        free(ids);
        n_rt += wordpiece ? wpm_round_trip(t, ip, tlen) : round_trip(t, ip, tlen);
        ip = sep + strlen(SEP);
        op = nl + 1;
    }
    fprintf(stderr, "golden %-15s %d/%d cases match, %d/%d round trips (load %.0f ms)\n", name,
            n_pass, n_case, n_rt, n_case, 1e3 * (t1 - t0));
    CHECKF(n_case == 46, "%s: %d cases parsed", name, n_case);
    if (expect_all) {
        CHECKF(n_pass == n_case, "%s: %d of %d golden cases differ", name, n_case - n_pass, n_case);
        CHECKF(n_rt == n_case, "%s: %d of %d round trips differ", name, n_case - n_rt, n_case);
    }
    free(inp);
    free(out);
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

/* Random bytes (ill-formed UTF-8 included) are not lost: the raw pieces of
 * their tokens give them back (SPM: after the leading space it adds), and
 * decode turns them into well-formed UTF-8. */
static void random_round_trips(const em_tokenizer *t, const char *name, int spm)
{
    unsigned long long st = 12345;
    char buf[200], back[1024];
    int ok = 0, n = 200;
    for (int k = 0; k < n; k++) {
        size_t len = 1 + test_rand(&st) % 64;
        for (size_t i = 0; i < len; i++) {
            unsigned r = (unsigned)test_rand(&st);
            /* mostly letters, some spaces, some high bytes */
            buf[i] = (char)(r % 4 == 0 ? ' ' : r % 4 == 1 ? (0x80 | (r >> 8)) : 'a' + (r >> 8) % 26);
        }
        int32_t *ids = NULL;
        size_t n_ids = 0, bl = 0;
        char *text = NULL;
        if (encode(t, buf, len, 0, 0, &ids, &n_ids))
            continue;
        for (size_t i = 0; i < n_ids && bl < 900; i++) {
            int pl = em_tokenizer_piece(t, ids[i], 0, back + bl, sizeof back - bl);
            bl += pl > 0 ? (size_t)pl : 0;
        }
        size_t skip = spm ? 1 : 0;
        int same = bl == len + skip && memcmp(back + skip, buf, len) == 0 && (!spm || back[0] == ' ');
        int valid = em_tokenizer_decode(t, ids, n_ids, &text, NULL) == 0;
        for (const unsigned char *p = (const unsigned char *)text; valid && p && *p;) {
            int l = utf8_len_ok(p);
            valid = l > 0;
            p += l > 0 ? l : 0;
        }
        if (!(same && valid) && k - ok < 3) {   /* show the first few */
            fprintf(stderr, "  %s: random string %d not kept (same %d, valid %d):", name, k, same, valid);
            for (size_t i = 0; i < len; i++)
                fprintf(stderr, " %02x", (unsigned char)buf[i]);
            fputc('\n', stderr);
        }
        ok += same && valid;
        free(ids);
        free(text);
    }
    CHECKF(ok == n, "%s: %d of %d random byte strings not kept", name, n - ok, n);
}

/* ---- tests on the shared vocabularies ------------------------------------- */

static void spm_specifics(void)
{
    em_gguf *g;
    em_tokenizer *t;
    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-llama-spm.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    CHECK(em_tokenizer_n_vocab(t) == 32000);
    CHECK(em_tokenizer_bos(t) == 1 && em_tokenizer_eos(t) == 2);
    CHECK(em_tokenizer_add_bos(t) == 1 && em_tokenizer_add_eos(t) == 0);
    CHECK(em_tokenizer_is_eog(t, 2) && !em_tokenizer_is_eog(t, 1) && !em_tokenizer_is_eog(t, 100));
    CHECK(em_tokenizer_is_special(t, 1) && em_tokenizer_is_special(t, 0));
    CHECK(!em_tokenizer_is_special(t, 15043) && !em_tokenizer_is_special(t, -1));
    CHECK(em_tokenizer_find(t, "<0x0A>") == 13);
    CHECK(em_tokenizer_find(t, "\xe2\x96\x81Hello") == 15043);
    CHECK(em_tokenizer_find(t, "no such token at all") == -1);
    CHECK(strcmp(em_tokenizer_token_text(t, 15043), "\xe2\x96\x81Hello") == 0);
    CHECK(em_tokenizer_token_text(t, 32000) == NULL && em_tokenizer_token_text(t, -1) == NULL);

    int32_t *ids = NULL;
    size_t n = 0;
    /* BOS with add_special; "<s>" parsed only with parse_special */
    CHECK(encode(t, "Hello", 5, 1, 0, &ids, &n) == 0 && n == 2 && ids[0] == 1 && ids[1] == 15043);
    free(ids);
    CHECK(encode(t, "", 0, 1, 0, &ids, &n) == 0 && n == 1 && ids[0] == 1);
    free(ids);
    CHECK(encode(t, "", 0, 0, 0, &ids, &n) == 0 && n == 0 && ids != NULL);
    free(ids);
    const char *s = "<s>Hello</s>";
    CHECK(encode(t, s, strlen(s), 0, 1, &ids, &n) == 0 && n == 3 && ids[0] == 1 &&
          ids[1] == 15043 && ids[2] == 2);
    free(ids);
    CHECK(encode(t, s, strlen(s), 0, 0, &ids, &n) == 0 && n > 3);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != 1 && ids[i] != 2);
    free(ids);

    /* pieces */
    char piece[64];
    CHECK(em_tokenizer_piece(t, 15043, 0, piece, sizeof piece) == 6 && memcmp(piece, " Hello", 6) == 0);
    CHECK(em_tokenizer_piece(t, 13, 0, piece, sizeof piece) == 1 && piece[0] == '\n');
    CHECK(em_tokenizer_piece(t, 1, 0, piece, sizeof piece) == 0);
    CHECK(em_tokenizer_piece(t, 1, 1, piece, sizeof piece) == 3 && memcmp(piece, "<s>", 3) == 0);
    CHECK(em_tokenizer_piece(t, 15043, 0, piece, 2) == 6);   /* truncated, full length returned */
    CHECK(em_tokenizer_piece(t, 32000, 0, piece, sizeof piece) < 0);

    /* streaming: at_start drops the SPM space; BOS does not count as the first word */
    int32_t hello[] = { 1, 15043, 2787 };
    const char *r = stream(t, 1, hello, 3);
    CHECK(r && strcmp(r, "Hello World") == 0);
    r = stream(t, 0, hello, 3);
    CHECK(r && strcmp(r, " Hello World") == 0);
    /* "é" = C3 A9 split over two byte tokens: nothing until complete */
    int32_t c3 = em_tokenizer_find(t, "<0xC3>"), a9 = em_tokenizer_find(t, "<0xA9>");
    int32_t ff = em_tokenizer_find(t, "<0xFF>"), e4 = em_tokenizer_find(t, "<0xE4>");
    int32_t b8 = em_tokenizer_find(t, "<0xB8>"), ed = em_tokenizer_find(t, "<0xED>");
    int32_t xa0 = em_tokenizer_find(t, "<0xA0>"), x80 = em_tokenizer_find(t, "<0x80>");
    int32_t f0 = em_tokenizer_find(t, "<0xF0>"), x9f = em_tokenizer_find(t, "<0x9F>");
    CHECK(c3 >= 0 && a9 >= 0 && ff >= 0 && e4 >= 0 && b8 >= 0 && ed >= 0 && xa0 >= 0);
    em_detok d;
    char buf[256];
    em_detok_init(&d, 0);
    CHECK(em_detok_push(t, &d, c3, buf, sizeof buf) == 0 && buf[0] == 0 && d.n_pending == 1);
    CHECK(em_detok_push(t, &d, a9, buf, sizeof buf) == 2 && strcmp(buf, "\xc3\xa9") == 0);
    CHECK(em_detok_flush(t, &d, buf, sizeof buf) == 0);
    /* a 4-byte emoji over four tokens, with BOS in the middle (no text, no effect) */
    int32_t emoji[] = { f0, x9f, 1, em_tokenizer_find(t, "<0x98>"), em_tokenizer_find(t, "<0x80>") };
    r = stream(t, 0, emoji, 5);
    CHECK(r && strcmp(r, "\xf0\x9f\x98\x80") == 0);
    /* bytes that can never complete: U+FFFD per maximal ill-formed subpart */
    int32_t bad1[] = { ff, 15043 };
    r = stream(t, 0, bad1, 2);
    CHECK(r && strcmp(r, "\xef\xbf\xbd Hello") == 0);
    int32_t bad2[] = { e4, b8, 15043 };   /* truncated 3-byte sequence, then text */
    r = stream(t, 0, bad2, 3);
    CHECK(r && strcmp(r, "\xef\xbf\xbd Hello") == 0);
    int32_t bad3[] = { ed, xa0, x80 };    /* a surrogate: three ill-formed bytes */
    r = stream(t, 0, bad3, 3);
    CHECK(r && strcmp(r, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0);
    int32_t bad4[] = { e4, b8 };          /* pending at the end: flushed as U+FFFD */
    r = stream(t, 0, bad4, 2);
    CHECK(r && strcmp(r, "\xef\xbf\xbd") == 0);
    int32_t bad5[] = { c3, c3, a9 };      /* a lead byte interrupted by another lead */
    r = stream(t, 0, bad5, 3);
    CHECK(r && strcmp(r, "\xef\xbf\xbd\xc3\xa9") == 0);
    /* errors: id out of range, cap too small (state untouched) */
    em_detok_init(&d, 1);
    CHECK(em_detok_push(t, &d, 32000, buf, sizeof buf) == EM_ERANGE);
    CHECK(em_detok_push(t, &d, -5, buf, sizeof buf) == EM_ERANGE);
    CHECK(em_detok_push(t, &d, 15043, buf, 3) == EM_EINVAL && d.started == 0);
    CHECK(em_detok_push(t, &d, 15043, buf, sizeof buf) == 5 && strcmp(buf, "Hello") == 0);
    CHECK(em_tokenizer_detok_cap(t) >= 64 && em_tokenizer_detok_cap(t) <= 64 + 48);

    /* whole-sequence decode */
    char *text = NULL;
    em_err err = { 0 };
    int32_t seq[] = { 1, 15043, 29892, 3186, 29991, 2 };
    CHECK(em_tokenizer_decode(t, seq, 6, &text, &err) == 0 && strcmp(text, "Hello, world!") == 0);
    free(text);
    int32_t badseq[] = { 1, 99999 };
    CHECK(em_tokenizer_decode(t, badseq, 2, &text, &err) == EM_ERANGE && text == NULL &&
          strstr(err.msg, "99999"));

    random_round_trips(t, "llama-spm", 1);

    /* a control token shown (a tool call's marker, as the server shows
     * them): it decodes to its text, a grammar may allow it, and text is
     * tokenized as before; end-of-generation and unknown ones stay hidden */
    CHECK(em_tokenizer_show(t, "x<s>y</s><unk>") == 1 && em_tokenizer_show(t, "<s>") == 0);
    char shown[16];
    CHECK(em_tokenizer_piece(t, 1, 0, shown, sizeof shown) == 3 && !memcmp(shown, "<s>", 3));
    CHECK(!em_tokenizer_is_special(t, 1) && em_tokenizer_is_special(t, 2) && em_tokenizer_is_special(t, 0));
    em_detok sd;
    em_detok_init(&sd, 0);
    CHECK(em_detok_push(t, &sd, 1, shown, sizeof shown) == 3 && !strcmp(shown, "<s>"));
    CHECK(em_detok_push(t, &sd, 2, shown, sizeof shown) == 0);
    CHECK(em_tokenizer_encode(t, "<s>", 3, 0, 0, &ids, &n, &err) == 0 && n > 1);
    free(ids);
    CHECK(em_tokenizer_encode(t, "<s>", 3, 0, 1, &ids, &n, &err) == 0 && n == 1 && ids[0] == 1);
    free(ids);
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

static void bpe_specifics(void)
{
    em_gguf *g;
    em_tokenizer *t;
    int32_t *ids = NULL;
    size_t n = 0;
    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-gpt-2.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    CHECK(em_tokenizer_add_bos(t) == 0);
    CHECK(em_tokenizer_eos(t) == 50256 && em_tokenizer_eot(t) == 50256);
    CHECK(em_tokenizer_is_eog(t, 50256) && em_tokenizer_is_special(t, 50256));
    const char *s = "Hello<|endoftext|>";
    CHECK(encode(t, s, strlen(s), 1, 1, &ids, &n) == 0 && n == 2 && ids[0] == 15496 &&
          ids[1] == 50256);
    free(ids);
    CHECK(encode(t, s, strlen(s), 1, 0, &ids, &n) == 0 && n > 2);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != 50256);
    free(ids);
    char piece[64];
    CHECK(em_tokenizer_piece(t, 18435, 0, piece, sizeof piece) == 6 && memcmp(piece, " Hello", 6) == 0);
    CHECK(em_tokenizer_piece(t, 198, 0, piece, sizeof piece) == 1 && piece[0] == '\n');
    /* byte-level: "é" may be one token or two; the stream never splits it */
    s = "\xc3\xa9t\xc3\xa9 \xe2\x9c\x85 \xf0\x9f\x98\x81";
    CHECK(encode(t, s, strlen(s), 0, 0, &ids, &n) == 0);
    const char *r = stream(t, 1, ids, n);
    CHECK(r && strcmp(r, s) == 0);
    em_detok d;
    char buf[256];
    em_detok_init(&d, 1);
    for (size_t i = 0; i < n; i++) {
        int k = em_detok_push(t, &d, ids[i], buf, sizeof buf);
        CHECK(k >= 0);
        /* every chunk is whole UTF-8 */
        for (int j = 0; j < k;) {
            unsigned char c = (unsigned char)buf[j];
            int l = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            CHECK(j + l <= k);
            j += l;
        }
    }
    free(ids);
    /* at_start does not strip anything for byte-level BPE */
    int32_t sp[] = { 18435 };
    r = stream(t, 1, sp, 1);
    CHECK(r && strcmp(r, " Hello") == 0);
    random_round_trips(t, "gpt-2", 0);
    em_tokenizer_destroy(t);
    em_gguf_close(g);

    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-deepseek-coder.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    /* add_bos_token = true; user-defined tokens are matched even without parse_special */
    CHECK(em_tokenizer_add_bos(t) == 1 && em_tokenizer_bos(t) == 32013);
    CHECK(em_tokenizer_is_eog(t, 32014));
    s = "a\xc3\xb5";   /* "aõ": õ is user-defined token 32000 */
    CHECK(encode(t, s, strlen(s), 1, 0, &ids, &n) == 0 && n == 3 && ids[0] == 32013 &&
          ids[2] == 32000);
    free(ids);
    CHECK(em_tokenizer_piece(t, 32000, 0, piece, sizeof piece) == 2 && memcmp(piece, "\xc3\xb5", 2) == 0);
    em_tokenizer_destroy(t);
    em_gguf_close(g);

    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-starcoder.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    CHECK(em_tokenizer_is_eog(t, 0) && em_tokenizer_add_bos(t) == 0);
    s = "<fim_prefix>def f():<fim_suffix>";
    CHECK(encode(t, s, strlen(s), 0, 1, &ids, &n) == 0 && n > 2 && ids[0] == 1 && ids[n - 1] == 3);
    free(ids);
    em_tokenizer_destroy(t);
    em_gguf_close(g);

    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-baichuan.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    CHECK(em_tokenizer_n_vocab(t) == 64000);
    s = "Hello world, \xe4\xbd\xa0\xe5\xa5\xbd";
    CHECK(round_trip(t, s, strlen(s)));
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

/* ---- WordPiece (BERT) ----------------------------------------------------- */

/* A JSON string at p (just after its opening quote) into out (UTF-8, NUL-
 * terminated, cap bytes): the escapes the golden files use, surrogate pairs
 * included. Returns the end (after the closing quote) or NULL. */
static const char *json_str(const char *p, char *out, size_t cap)
{
    size_t w = 0;
    while (*p && *p != '"' && w + 5 < cap) {
        unsigned cp = (unsigned char)*p++;
        if (cp == '\\') {
            char e = *p++;
            if (e == 'u') {
                cp = (unsigned)strtoul((char[5]){ p[0], p[1], p[2], p[3], 0 }, NULL, 16);
                p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                    unsigned lo = (unsigned)strtoul((char[5]){ p[2], p[3], p[4], p[5], 0 }, NULL, 16);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            } else {
                cp = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (unsigned char)e;
            }
            size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            for (size_t i = n - 1; i > 0; i--, cp >>= 6)
                out[w + i] = (char)(0x80 | (cp & 0x3F));
            out[w] = (char)((n == 1 ? 0 : (0xF00u >> n) & 0xFF) | cp);   /* 0xC0, 0xE0, 0xF0 leads */
            w += n;
        } else {
            out[w++] = (char)cp;
        }
    }
    out[w] = 0;
    return *p == '"' ? p + 1 : NULL;
}

/* The texts of golden/embeddings/all-MiniLM-L6-v2.json and their ids from
 * the Hugging Face tokenizer ([CLS] ... [SEP]), with the vocabulary of the
 * model's GGUF. */
static void minilm_ids(void)
{
    em_gguf *g;
    em_tokenizer *t;
    if (open_tok(test_shared("models/all-MiniLM-L6-v2-F16.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    char *json = test_read_file(test_shared("golden/embeddings/all-MiniLM-L6-v2.json"), NULL);
    CHECK(json != NULL);
    int n_case = 0, n_pass = 0;
    for (const char *p = json; p && (p = strstr(p, "\"text\": \""));) {
        char text[1024];
        int32_t exp[512];
        size_t ne = 0;
        p = json_str(p + 9, text, sizeof text);
        const char *q = p ? strstr(p, "\"ids\": [") : NULL;
        CHECK(q != NULL);
        if (!q)
            break;
        for (q += 8; *q && *q != ']' && ne < 512;) {
            char *end;
            exp[ne++] = (int32_t)strtol(q, &end, 10);
            q = end + strspn(end, ", ");
        }
        int32_t *ids = NULL;
        size_t n = 0;
        n_case++;
        if (encode(t, text, strlen(text), 1, 0, &ids, &n) == 0 && ids_eq(ids, n, exp, ne)) {
            n_pass++;
        } else {
            fprintf(stderr, "all-MiniLM-L6-v2 [%s]:\n", text);
            print_ids("expected", exp, ne);
            print_ids("got     ", ids, n);
        }
        free(ids);
    }
    fprintf(stderr, "golden all-MiniLM-L6-v2 %d/%d texts give the reference ids\n", n_pass, n_case);
    CHECKF(n_case == 12 && n_pass == n_case, "all-MiniLM-L6-v2: %d of %d texts", n_pass, n_case);
    free(json);
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

/* encode(s) with add_special off equals want[0..n). */
static int wpm_is(const em_tokenizer *t, const char *s, size_t len, const int32_t *want, size_t n)
{
    int32_t *ids = NULL;
    size_t got = 0;
    int ok = encode(t, s, len, 0, 0, &ids, &got) == 0 && ids_eq(ids, got, want, n);
    if (!ok) {
        fprintf(stderr, "  WordPiece [%.*s]:\n", (int)(len > 60 ? 60 : len), s);
        print_ids("expected", want, n);
        print_ids("got     ", ids, got);
    }
    free(ids);
    return ok;
}

static void wpm_specifics(void)
{
    em_gguf *g;
    em_tokenizer *t;
    if (open_tok(test_shared("golden/tokenizer/ggml-vocab-bert-bge.gguf"), &g, &t)) {
        CHECK(0);
        return;
    }
    /* [CLS] is BOS, [SEP] is EOS, both added; [SEP] ends nothing a model generates */
    CHECK(em_tokenizer_bos(t) == 101 && em_tokenizer_eos(t) == 102);
    CHECK(em_tokenizer_add_bos(t) == 1 && em_tokenizer_add_eos(t) == 1);
    CHECK(em_tokenizer_is_special(t, 100) && em_tokenizer_is_special(t, 101) && !em_tokenizer_is_special(t, 7592));
    CHECK(em_tokenizer_max_token_bytes(t) >= ((size_t)1 << 28));   /* no bound: whitespace is dropped */
    int32_t *ids = NULL;
    size_t n = 0;
    const char *s = "Hello, world!";
    int32_t hw[] = { 101, 7592, 1010, 2088, 999, 102 };
    CHECK(encode(t, s, strlen(s), 1, 0, &ids, &n) == 0 && ids_eq(ids, n, hw, 6));
    free(ids);
    CHECK(encode(t, "", 0, 1, 0, &ids, &n) == 0 && n == 2 && ids[0] == 101 && ids[1] == 102);
    free(ids);
    CHECK(encode(t, " \t\r\n ", 5, 0, 0, &ids, &n) == 0 && n == 0);
    free(ids);
    /* special texts: ids with parse_special, punctuation and words without */
    s = "[CLS] hello[SEP]";
    int32_t sp[] = { 101, 7592, 102 };
    CHECK(encode(t, s, strlen(s), 0, 1, &ids, &n) == 0 && ids_eq(ids, n, sp, 3));
    free(ids);
    CHECK(encode(t, s, strlen(s), 0, 0, &ids, &n) == 0 && n > 3);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != 101 && ids[i] != 102);
    free(ids);

    /* normalization: case, accents (also as a decomposed input, and a Hangul
     * syllable that NFD takes apart), CJK split, punctuation, controls dropped */
    int32_t hello[] = { 7592 }, hello2[] = { 7592, 7592 };
    CHECK(wpm_is(t, "HeLLo", 5, hello, 1));
    CHECK(wpm_is(t, "h\xc3\xa9llo", 6, hello, 1));          /* héllo */
    CHECK(wpm_is(t, "he\xcc\x81llo", 7, hello, 1));         /* he + U+0301 + llo */
    CHECK(wpm_is(t, "hel\x00lo", 6, hello, 1));             /* NUL dropped inside a word */
    CHECK(wpm_is(t, "hel\xe2\x80\x8blo", 8, hello, 1));     /* U+200B (Cf) too */
    CHECK(wpm_is(t, "hel\xef\xbf" "lo\xff", 8, hello, 1));   /* ill-formed bytes: U+FFFD, dropped */
    CHECK(wpm_is(t, "hello\xe3\x80\x80hello", 13, hello2, 2));   /* U+3000 is a space */
    CHECK(wpm_is(t, "\xcc\x81\xcc\x81", 4, NULL, 0));       /* lone combining marks: nothing */
    CHECK(wpm_is(t, "\xcc\x81hello", 7, hello, 1));
    int32_t cjk[] = { 1855, 1811 };                           /* 我 天: one word each */
    CHECK(wpm_is(t, "\xe6\x88\x91\xe5\xa4\xa9", 6, cjk, 2));
    int32_t ko[64];
    size_t nko = 0;
    int32_t *kids = NULL;
    /* 한 = U+1112 U+1161 U+11AB: the syllable and its jamo tokenize alike */
    CHECK(encode(t, "\xed\x95\x9c", 3, 0, 0, &kids, &nko) == 0 && nko >= 1 && nko < 64);
    if (kids)
        memcpy(ko, kids, nko * sizeof *ko);
    free(kids);
    CHECK(wpm_is(t, "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", 9, ko, nko));
    int32_t punct[] = { 7592, 1005, 1055, 2088 };             /* hello ' s world */
    CHECK(wpm_is(t, "hello's world", 13, punct, 4));

    /* the word limit: 100 characters are WordPiece'd, 101 are [UNK]; a
     * megabyte word is one [UNK], a megabyte of words is every word */
    size_t big = (size_t)1 << 20;
    char *buf = malloc(big);
    CHECK(buf != NULL);
    if (!buf)
        goto done;
    memset(buf, 'a', big);
    CHECK(encode(t, buf, 100, 0, 0, &ids, &n) == 0 && n > 1 && ids[0] != 100);
    free(ids);
    int32_t unk[] = { 100 };
    CHECK(wpm_is(t, buf, 101, unk, 1));
    double t0 = now();
    CHECK(wpm_is(t, buf, big, unk, 1));
    for (size_t i = 1; i < big; i += 2)
        buf[i] = ' ';
    CHECK(encode(t, buf, big, 0, 0, &ids, &n) == 0 && n == big / 2 && ids[0] == 1037 && ids[n - 1] == 1037);
    free(ids);
    for (size_t i = 0; i + 1 < big; i += 2)   /* é é é ...: one accent each */
        memcpy(buf + i, "\xc3\xa9", 2);
    CHECK(encode(t, buf, big, 0, 0, &ids, &n) == 0 && n == 1 && ids[0] == 100);
    free(ids);
    fprintf(stderr, "WordPiece: 3 MB of hostile words in %.0f ms\n", 1e3 * (now() - t0));
    free(buf);

    /* decoding: ▁ is a space, the first word loses it, continuations join;
     * case and accents stay normalized, punctuation stays a word */
    char *text = NULL;
    em_err err = { 0 };
    CHECK(em_tokenizer_decode(t, hw, 6, &text, &err) == 0 && strcmp(text, "hello , world !") == 0);
    free(text);
    int32_t apfel[] = { 101, 9706, 7959, 2140, 102 };   /* "Äpfel" */
    CHECK(em_tokenizer_decode(t, apfel, 5, &text, &err) == 0 && strcmp(text, "apfel") == 0);
    free(text);
    const char *r = stream(t, 0, hw, 6);
    CHECK(r && strcmp(r, " hello , world !") == 0);
    r = stream(t, 1, apfel, 5);
    CHECK(r && strcmp(r, "apfel") == 0);
    char piece[32];
    CHECK(em_tokenizer_piece(t, 7592, 0, piece, sizeof piece) == 6 && memcmp(piece, " hello", 6) == 0);
    CHECK(em_tokenizer_piece(t, 2094, 0, piece, sizeof piece) == 1 && piece[0] == 'd');
    CHECK(em_tokenizer_piece(t, 101, 0, piece, sizeof piece) == 0);
    CHECK(em_tokenizer_piece(t, 101, 1, piece, sizeof piece) == 5 && memcmp(piece, "[CLS]", 5) == 0);

    /* random bytes: never an error, and decoding gives text that tokenizes
     * to the same ids again */
    unsigned long long st = 777;
    char rnd[200];
    int ok = 0;
    for (int k = 0; k < 200; k++) {
        size_t len = 1 + test_rand(&st) % 64;
        for (size_t i = 0; i < len; i++) {
            unsigned v = (unsigned)test_rand(&st);
            rnd[i] = (char)(v % 4 == 0 ? ' ' : v % 4 == 1 ? (0x80 | (v >> 8)) : v % 8 == 2 ? '!' + (v >> 8) % 15
                                                                                          : 'A' + (v >> 8) % 58);
        }
        ok += wpm_round_trip(t, rnd, len);
    }
    CHECKF(ok == 200, "bert-bge: %d of 200 random byte strings", ok);
done:
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

/* One tokenizer used from several threads at once gives the same ids. */
typedef struct {
    const em_tokenizer *t;
    const char *text;
    const int32_t *want;
    size_t n_want;
    int bad;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int k = 0; k < 50; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *back = NULL;
        if (em_tokenizer_encode(j->t, j->text, strlen(j->text), 1, 1, &ids, &n, NULL) ||
            !ids_eq(ids, n, j->want, j->n_want) ||
            em_tokenizer_decode(j->t, ids, n, &back, NULL) || !back)
            j->bad++;
        free(ids);
        free(back);
    }
    return NULL;
}

static void threads(const char *vocab)
{
    em_gguf *g;
    em_tokenizer *t;
    if (open_tok(test_shared(vocab), &g, &t)) {
        CHECK(0);
        return;
    }
    const char *text = "Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3 3333 "
                       "<|endoftext|><s> \t\n\n  tabs\tand  spaces   ";
    int32_t *want = NULL;
    size_t n_want = 0;
    CHECK(encode(t, text, strlen(text), 1, 1, &want, &n_want) == 0);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){ t, text, want, n_want, 0 };
        CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(jobs[i].bad == 0, "%s: thread %d got different ids %d times", vocab, i, jobs[i].bad);
    }
    free(want);
    em_tokenizer_destroy(t);
    em_gguf_close(g);
}

/* ---- synthetic vocabularies and hostile metadata -------------------------- */

enum {
    D_NONE, D_TYPES_LEN, D_SCORES_LEN, D_TYPE_VALUE, D_BOS_RANGE, D_EOS_STRING, D_NO_TOKENS,
    D_TOKENS_INT, D_NO_MODEL, D_MODEL_BERT, D_PRE_UNKNOWN, D_MERGE_NOSPACE, D_NO_MERGES,
    D_MERGES_INT, D_FLAG_STRING, D_EMPTY_VOCAB, D_BOS_NONE, D_MODEL_T5,
};

/* A small vocabulary as a GGUF in memory (malloc'd *buf). bpe: a byte-level
 * vocabulary with merges, else SPM without byte tokens. */
static int build(int bpe, int defect, char **buf, size_t *len)
{
    static const char *spm_toks[] = { "<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
                                      "\342\226\201a" /* ▁a (octal: "\x81a" would be one escape) */, "ab", "<|user|>" };
    static const char *bpe_toks[] = { "a", "b", "ab", "\xc4\xa0", "\304\240a" /* Ġa */, "c",
                                      "<|endoftext|>", "\xc4\x8a" };
    static const char *merges[] = { "a b", "\xc4\xa0 a" };
    static const char *bad_merges[] = { "a b", "ab" };
    int32_t types_spm[16] = { 2, 3, 3, 1, 1, 1, 1, 1, 4, 1, 1, 1 };   /* room for D_TYPES_LEN */
    int32_t types_bpe[16] = { 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1 };
    float scores[] = { 0, 0, 0, -1, -2, -3, -0.5f, -0.25f, 0 };
    size_t nt = bpe ? 8 : 9;
    em_gguf_writer *w = NULL;
    FILE *f = open_memstream(buf, len);
    if (!f || em_gguf_writer_create(32, &w, NULL))
        return -1;
    if (defect != D_NO_MODEL)
        em_gguf_w_str(w, "tokenizer.ggml.model", defect == D_MODEL_BERT ? "bert"
                                                    : defect == D_MODEL_T5 ? "t5" : bpe ? "gpt2" : "llama");
    if (bpe)
        em_gguf_w_str(w, "tokenizer.ggml.pre", defect == D_PRE_UNKNOWN ? "frobnicator-9000" : "gpt-2");
    if (defect == D_TOKENS_INT)
        em_gguf_w_arr(w, "tokenizer.ggml.tokens", EM_GGUF_I32, types_spm, nt);
    else if (defect == D_EMPTY_VOCAB)
        em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", spm_toks, 0);
    else if (defect != D_NO_TOKENS)
        em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", bpe ? bpe_toks : spm_toks, nt);
    if (!bpe)
        em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores,
                      defect == D_SCORES_LEN ? nt - 2 : nt);
    int32_t *types = bpe ? types_bpe : types_spm;
    if (defect == D_TYPE_VALUE)
        types[1] = 42;
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types,
                  defect == D_TYPES_LEN ? nt + 3 : nt);
    if (bpe && defect == D_MERGES_INT)
        em_gguf_w_arr(w, "tokenizer.ggml.merges", EM_GGUF_I32, types_bpe, 2);
    else if (bpe && defect != D_NO_MERGES)
        em_gguf_w_arr_str(w, "tokenizer.ggml.merges", defect == D_MERGE_NOSPACE ? bad_merges : merges, 2);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", defect == D_BOS_RANGE ? 70000
                                                  : defect == D_BOS_NONE ? 0xFFFFFFFFu
                                                  : bpe ? 6 : 1);
    if (defect == D_EOS_STRING)
        em_gguf_w_str(w, "tokenizer.ggml.eos_token_id", "two");
    else
        em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", bpe ? 6 : 2);
    if (defect == D_FLAG_STRING)
        em_gguf_w_str(w, "tokenizer.ggml.add_bos_token", "yes");
    int rc = em_gguf_w_header(w, f, NULL) || em_gguf_w_finish(w, NULL);
    em_gguf_writer_destroy(w);
    fclose(f);
    return rc ? -1 : 0;
}

static int create_from(int bpe, int defect, em_tokenizer **t, em_err *err, char **buf)
{
    size_t len = 0;
    em_gguf *g = NULL;
    *buf = NULL;
    *t = NULL;
    if (build(bpe, defect, buf, &len))
        return -100;
    int rc = em_gguf_open_mem(*buf, len, "hostile.gguf", &g, err);
    if (!rc)
        rc = em_tokenizer_create(g, t, err);
    em_gguf_close(g);   /* the tokenizer copies what it needs */
    return rc;
}

static void synthetic(void)
{
    em_tokenizer *t;
    em_err err = { 0 };
    char *buf;
    int32_t *ids = NULL;
    size_t n = 0;

    /* SPM without byte tokens: unknown characters become <unk> (one per character) */
    CHECK(create_from(0, D_NONE, &t, &err, &buf) == 0);
    free(buf);
    if (t) {
        const char *s = "ab a\xe2\x82\xac" "b";   /* "ab a€b" */
        CHECK(encode(t, s, strlen(s), 0, 0, &ids, &n) == 0);
        int32_t exp[] = { 3, 7, 6, 0, 5 };   /* ▁ ab ▁a <unk> b: "ab" (-0.25) beats "▁a" (-0.5) */
        CHECKF(ids_eq(ids, n, exp, 5), "spm synthetic");
        if (!ids_eq(ids, n, exp, 5))
            print_ids("got", ids, n);
        free(ids);
        /* user-defined tokens are cut out without parse_special; control ones are not */
        s = "a<|user|>b</s>";
        CHECK(encode(t, s, strlen(s), 0, 0, &ids, &n) == 0 && n >= 3 && ids[0] == 6 && ids[1] == 8);
        for (size_t i = 0; i < n; i++)
            CHECK(ids[i] != 2);
        free(ids);
        /* with BOS; after a special token the next word gets the ▁ prefix again
         * ("▁b" is not in the vocabulary: ▁ b) */
        int32_t exp2[] = { 1, 6, 8, 3, 5, 2 };
        CHECK(encode(t, s, strlen(s), 1, 1, &ids, &n) == 0 && ids_eq(ids, n, exp2, 6));
        free(ids);
        em_tokenizer_destroy(t);
    }

    /* WordPiece over the SPM test vocabulary: BOS/EOS from the generic keys
     * (no [CLS]/[SEP] there), both added; "▁a" + "b" is longest-first; a
     * word that matches nothing needs [UNK], which this vocabulary lacks */
    CHECK(create_from(0, D_MODEL_BERT, &t, &err, &buf) == 0);
    free(buf);
    if (t) {
        int32_t exp3[] = { 1, 6, 5, 6, 4, 2 };   /* <s> ▁a b ▁a a </s> ("a" as a continuation) */
        CHECK(em_tokenizer_add_bos(t) && em_tokenizer_add_eos(t));
        CHECK(encode(t, "AB\tAA", 5, 1, 0, &ids, &n) == 0 && ids_eq(ids, n, exp3, 6));
        free(ids);
        em_err werr = { 0 };
        CHECK(em_tokenizer_encode(t, "a c", 3, 0, 0, &ids, &n, &werr) == EM_EFORMAT && strstr(werr.msg, "[UNK]"));
        em_tokenizer_destroy(t);
    }

    /* bos_token_id 0xFFFFFFFF is how converters write "none" */
    CHECK(create_from(0, D_BOS_NONE, &t, &err, &buf) == 0);
    free(buf);
    if (t) {
        CHECK(em_tokenizer_bos(t) == -1 && em_tokenizer_add_bos(t) == 0);
        CHECK(encode(t, "a", 1, 1, 0, &ids, &n) == 0 && n == 1 && ids[0] == 6);
        free(ids);
        em_tokenizer_destroy(t);
    }

    /* byte-level BPE: merges by rank */
    CHECK(create_from(1, D_NONE, &t, &err, &buf) == 0);
    free(buf);
    if (t) {
        const char *s = "ab a c";
        CHECK(encode(t, s, strlen(s), 1, 0, &ids, &n) == 0);
        int32_t exp[] = { 2, 4, 3, 5 };   /* ab, Ġa, Ġ, c */
        CHECKF(ids_eq(ids, n, exp, 4), "bpe synthetic");
        if (!ids_eq(ids, n, exp, 4))
            print_ids("got", ids, n);
        free(ids);
        CHECK(em_tokenizer_is_eog(t, 6) && em_tokenizer_eot(t) == 6);
        /* 'd' has no token and there is no unknown token: an error, not a
         * tokenization of "ab " with the d dropped */
        int32_t *dids = NULL;
        size_t dn = 0;
        em_err derr = { 0 };
        int drc = em_tokenizer_encode(t, "ab d", 4, 1, 0, &dids, &dn, &derr);
        CHECKF(drc == EM_EFORMAT && strstr(derr.msg, "no token for a character in bytes 2..4"),
               "bpe: uncovered character: rc %d, '%s', %zu ids", drc, derr.msg, dn);
        if (drc == 0)
            free(dids);
        em_tokenizer_destroy(t);
    }

    static const struct { int bpe, defect, code; const char *needle; } bad[] = {
        { 0, D_TYPES_LEN,     EM_EFORMAT,      "token_type" },
        { 0, D_SCORES_LEN,    EM_EFORMAT,      "scores" },
        { 0, D_TYPE_VALUE,    EM_EFORMAT,      "42" },
        { 0, D_BOS_RANGE,     EM_EFORMAT,      "bos_token_id" },
        { 1, D_BOS_RANGE,     EM_EFORMAT,      "70000" },
        { 0, D_EOS_STRING,    EM_EFORMAT,      "eos_token_id" },
        { 0, D_NO_TOKENS,     EM_EFORMAT,      "tokenizer.ggml.tokens" },
        { 0, D_TOKENS_INT,    EM_EFORMAT,      "tokenizer.ggml.tokens" },
        { 0, D_EMPTY_VOCAB,   EM_EFORMAT,      "tokenizer.ggml.tokens" },
        { 0, D_NO_MODEL,      EM_EFORMAT,      "tokenizer.ggml.model" },
        { 0, D_MODEL_T5,      EM_EUNSUPPORTED, "'t5'" },
        { 1, D_PRE_UNKNOWN,   EM_EUNSUPPORTED, "frobnicator-9000" },
        { 1, D_MERGE_NOSPACE, EM_EFORMAT,      "merges" },
        { 1, D_NO_MERGES,     EM_EFORMAT,      "merges" },
        { 1, D_MERGES_INT,    EM_EFORMAT,      "merges" },
        { 1, D_TYPES_LEN,     EM_EFORMAT,      "token_type" },
        { 0, D_FLAG_STRING,   EM_EFORMAT,      "add_bos_token" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = create_from(bad[i].bpe, bad[i].defect, &t, &err, &buf);
        free(buf);
        CHECKF(rc == bad[i].code && t == NULL, "hostile case %zu: rc %d (%s)", i, rc, err.msg);
        CHECKF(strstr(err.msg, "hostile.gguf") && strstr(err.msg, bad[i].needle),
               "hostile case %zu: message [%s] should name the file and '%s'", i, err.msg,
               bad[i].needle);
        em_tokenizer_destroy(t);
    }
    em_tokenizer_destroy(NULL);
}

/* A byte-level vocabulary (the 256 byte characters, then "12", "123",
 * "1234", "12345" with their merges) under pre-tokenizer pre. */
/* The 256 single-byte tokens of byte-level BPE (byte -> code point as GPT-2
 * maps them, UTF-8 in chars[b]) into toks[0..255]. */
static void byte_alphabet(char chars[256][4], const char **toks)
{
    for (int b = 0; b < 256; b++) {
        unsigned cp = b <= 32 ? 256u + (unsigned)b : (b >= 127 && b <= 160) ? 162u + (unsigned)b
                    : b == 173 ? 323u : (unsigned)b;
        if (cp < 0x80) {
            chars[b][0] = (char)cp;
            chars[b][1] = 0;
        } else {
            chars[b][0] = (char)(0xC0 | (cp >> 6));
            chars[b][1] = (char)(0x80 | (cp & 0x3F));
            chars[b][2] = 0;
        }
        toks[b] = chars[b];
    }
}

static int create_bpe_pre(const char *pre, em_tokenizer **t, em_err *err, char **buf)
{
    static const char *digits[] = { "12", "123", "1234", "12345" };
    static const char *merges[] = { "1 2", "12 3", "123 4", "1234 5" };
    char chars[256][4];
    const char *toks[260];
    byte_alphabet(chars, toks);
    for (int i = 0; i < 4; i++)
        toks[256 + i] = digits[i];
    size_t len = 0;
    em_gguf_writer *w = NULL;
    em_gguf *g = NULL;
    *buf = NULL;
    *t = NULL;
    FILE *f = open_memstream(buf, &len);
    if (!f || em_gguf_writer_create(32, &w, NULL))
        return -100;
    em_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    em_gguf_w_str(w, "tokenizer.ggml.pre", pre);
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 260);
    em_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 4);
    int wrc = em_gguf_w_header(w, f, NULL);
    em_gguf_writer_destroy(w);
    fclose(f);
    if (wrc)
        return -100;
    int rc = em_gguf_open_mem(*buf, len, "pre.gguf", &g, err);
    if (!rc)
        rc = em_tokenizer_create(g, t, err);
    em_gguf_close(g);
    return rc;
}

/* Special tokens are cut out of the input by the reference's rule: longest
 * text first, then lowest id, each taking its leftmost non-overlapping
 * occurrences in what the earlier ones left. Checked against that rule
 * written out plainly (cut the whole text token by token) on random texts
 * over an alphabet where the specials overlap, contain each other and
 * share texts (a control and a user-defined "<b>"; a user-defined "<"
 * beside the byte token "<"). */
typedef struct { size_t off, len; int32_t id; } ref_frag;

static size_t ref_partition(const char *const *texts, const int *types, int n_sp, int parse_special,
                            const char *s, size_t len, ref_frag *out, size_t cap)
{
    int order[64], n = 0;
    for (int i = 0; i < n_sp; i++)
        if (types[i] == 4 || (parse_special && (types[i] == 3 || types[i] == 2)))
            order[n++] = i;
    for (int i = 1; i < n; i++)   /* length desc, then id asc (insertion sort keeps id order) */
        for (int j = i; j > 0 && strlen(texts[order[j]]) > strlen(texts[order[j - 1]]); j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    size_t nf = 1;
    out[0] = (ref_frag){ 0, len, -1 };
    static ref_frag tmp[512];
    for (int k = 0; k < n; k++) {
        const char *st = texts[order[k]];
        size_t sl = strlen(st), nt = 0;
        for (size_t i = 0; i < nf; i++) {
            ref_frag f = out[i];
            if (f.id >= 0) {
                tmp[nt++] = f;
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            for (;;) {
                const char *m = end - pos >= sl ? memmem(s + pos, end - pos, st, sl) : NULL;
                if (!m)
                    break;
                size_t at = (size_t)(m - s);
                if (at > pos)
                    tmp[nt++] = (ref_frag){ pos, at - pos, -1 };
                tmp[nt++] = (ref_frag){ at, sl, order[k] };
                pos = at + sl;
            }
            if (end > pos)
                tmp[nt++] = (ref_frag){ pos, end - pos, -1 };
        }
        if (nt > cap)
            return 0;
        memcpy(out, tmp, nt * sizeof *tmp);
        nf = nt;
    }
    return nf;
}

static void special_cuts(void)
{
    static const char *sp[] = { "<a>", "<a><b>", "a>", "<b>", "<", "ab", "b><", "<a><b><a>", "aaa", "aa", "<b>", "ba" };
    static const int sp_type[] = { 3, 4, 4, 3, 4, 4, 3, 4, 4, 3, 4, 4 };
    enum { NS = sizeof sp / sizeof sp[0] };
    char chars[256][4];
    const char *toks[256 + NS];
    int32_t types[256 + NS];
    byte_alphabet(chars, toks);
    for (int b = 0; b < 256; b++)
        types[b] = 1;
    for (int i = 0; i < NS; i++) {
        toks[256 + i] = sp[i];
        types[256 + i] = sp_type[i];
    }
    char *buf = NULL;
    size_t blen = 0;
    em_gguf_writer *w = NULL;
    em_gguf *g = NULL;
    em_tokenizer *t = NULL;
    em_err err = { 0 };
    FILE *f = open_memstream(&buf, &blen);
    CHECK(f && em_gguf_writer_create(32, &w, NULL) == 0);
    if (!f || !w)
        return;
    em_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    em_gguf_w_str(w, "tokenizer.ggml.pre", "gpt-2");
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 256 + NS);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, 256 + NS);
    em_gguf_w_arr_str(w, "tokenizer.ggml.merges", NULL, 0);
    CHECK(em_gguf_w_header(w, f, NULL) == 0);
    em_gguf_writer_destroy(w);
    fclose(f);
    CHECKF(em_gguf_open_mem(buf, blen, "specials.gguf", &g, &err) == 0 && em_tokenizer_create(g, &t, &err) == 0,
           "%s", err.msg);
    em_gguf_close(g);
    const char alpha[] = "<>ab c";
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int bad = 0, n_cut = 0;
    for (int c = 0; t && c < 3000; c++) {
        char s[64];
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t len = (size_t)(rng >> 58);   /* 0..63 */
        for (size_t i = 0; i < len; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = alpha[(rng >> 33) % 6];
        }
        int ps = c & 1;
        ref_frag fr[128];
        size_t nf = ref_partition(sp, sp_type, NS, ps, s, len, fr, 128);
        int32_t want[128], *got = NULL;
        size_t nw = 0, ng = 0;
        for (size_t i = 0; i < nf; i++) {
            if (fr[i].id >= 0) {
                want[nw++] = 256 + fr[i].id;
                n_cut++;
                continue;
            }
            int32_t *ids = NULL;
            size_t n = 0;
            if (encode(t, s + fr[i].off, fr[i].len, 0, 0, &ids, &n) == 0)
                for (size_t k = 0; k < n && nw < 128; k++)
                    want[nw++] = ids[k];
            free(ids);
        }
        if (encode(t, s, len, 0, ps, &got, &ng) || !ids_eq(want, nw, got, ng)) {
            if (bad++ < 3) {
                fprintf(stderr, "special cuts: '%.*s' (parse_special %d)\n", (int)len, s, ps);
                print_ids("  want", want, nw);
                print_ids("  got ", got, ng);
            }
        }
        free(got);
    }
    CHECKF(bad == 0, "special cuts: %d of 3000 texts differ from the reference rule", bad);
    CHECKF(n_cut > 3000, "special cuts: only %d special tokens in the texts", n_cut);
    em_tokenizer_destroy(t);
    free(buf);
}

/* Every pre-tokenizer name compiles; digits split as each one says. */
static void pre_tokenizers(void)
{
    static const struct { const char *pre; int n; } cases[] = {
        /* ids for "12345": 1 = one pre-token, 3 = "123" "4" "5", 5 = single digits */
        { "default", 3 }, { "llama3", 3 }, { "llama-v3", 3 }, { "llama-bpe", 3 }, { "falcon3", 3 },
        { "falcon-h1", 3 }, { "pixtral", 3 }, { "midm-2.0", 3 }, { "lfm2", 3 }, { "dbrx", 3 },
        { "smaug-bpe", 3 }, { "chatglm-bpe", 3 }, { "glm4", 3 }, { "deepseek-llm", 1 },
        { "deepseek-coder", 5 }, { "deepseek-v3", 3 }, { "hunyuan-dense", 3 }, { "falcon", 3 },
        { "starcoder", 5 }, { "refact", 5 }, { "command-r", 5 }, { "smollm", 5 },
        { "codeshell", 5 }, { "exaone", 5 }, { "minerva-7b", 5 }, { "gpt-2", 1 }, { "phi-2", 1 },
        { "jina-es", 1 }, { "jina-de", 1 }, { "gigachat", 1 }, { "jina-v2-es", 1 },
        { "jina-v2-de", 1 }, { "a.x-4.0", 1 }, { "mellum", 1 }, { "exaone4", 1 }, { "mpt", 1 },
        { "olmo", 1 }, { "jais", 1 }, { "trillion", 1 }, { "granite-docling", 1 },
        { "qwen2", 5 }, { "deepseek-r1-qwen", 5 }, { "kormo", 5 }, { "stablelm2", 5 },
        { "megrez", 5 }, { "hunyuan", 5 }, { "grok-2", 5 }, { "poro-chat", 1 }, { "bloom", 1 },
        { "gpt3-finnish", 1 }, { "viking", 5 }, { "tekken", 5 }, { "gpt-4o", 3 },
        { "llama4", 3 }, { "minimax-m2", 3 }, { "seed-coder", 5 }, { "bailingmoe", 5 },
        { "bailingmoe2", 5 }, { "llada-moe", 5 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        em_tokenizer *t;
        em_err err = { 0 };
        char *buf;
        int rc = create_bpe_pre(cases[i].pre, &t, &err, &buf);
        CHECKF(rc == 0, "pre-tokenizer '%s': %s", cases[i].pre, err.msg);
        if (rc == 0) {
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK(encode(t, "12345", 5, 0, 0, &ids, &n) == 0);
            CHECKF((int)n == cases[i].n, "pre-tokenizer '%s': \"12345\" gave %zu ids, expected %d",
                   cases[i].pre, n, cases[i].n);
            free(ids);
            const char *s = "Hello, world! It's 2024: \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd\n\n  x";
            CHECKF(round_trip(t, s, strlen(s)), "pre-tokenizer '%s': round trip", cases[i].pre);
        }
        em_tokenizer_destroy(t);
        free(buf);
    }
}

/* A harmony vocabulary (gpt-oss's markers as control tokens): <|end|>
 * closes a message, not the generation; <|return|> and <|call|> end it;
 * the markers decode to their text in a stream; without <|return|> the
 * same <|end|> ends a generation as before. */
static void test_harmony_vocab(void)
{
    for (int with_return = 1; with_return >= 0; with_return--) {
        const char *toks[] = { "<unk>", "<s>", "</s>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                               "<|constrain|>", with_return ? "<|return|>" : "<|x|>", "<|call|>",
                               "\xe2\x96\x81hi" };
        int32_t types[11] = { 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1 };
        float scores[11] = { 0 };
        char *buf = NULL;
        size_t len = 0;
        em_gguf_writer *w = NULL;
        em_gguf *g = NULL;
        em_tokenizer *t = NULL;
        em_err err = { 0 };
        FILE *f = open_memstream(&buf, &len);
        CHECK(f && em_gguf_writer_create(32, &w, NULL) == 0);
        if (!f || !w)
            return;
        em_gguf_w_str(w, "tokenizer.ggml.model", "llama");
        em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 11);
        em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, 11);
        em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, 11);
        em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", with_return ? 8 : 6);
        CHECK(em_gguf_w_header(w, f, NULL) == 0);
        em_gguf_writer_destroy(w);
        fclose(f);
        CHECKF(em_gguf_open_mem(buf, len, "harmony.gguf", &g, &err) == 0, "%s", err.msg);
        if (g)
            CHECKF(em_tokenizer_create(g, &t, &err) == 0, "%s", err.msg);
        if (t) {
            CHECKF(em_tokenizer_harmony(t) == with_return, "harmony %d", em_tokenizer_harmony(t));
            CHECKF(em_tokenizer_is_eog(t, 6) == !with_return, "<|end|> eog %d", em_tokenizer_is_eog(t, 6));
            CHECK(em_tokenizer_is_eog(t, 9));
            if (with_return) {
                CHECK(em_tokenizer_is_eog(t, 8));
                /* a stream: <|channel|> hi <|message|> <|end|> <|return|> */
                int32_t ids[] = { 4, 10, 5, 6, 8 };
                char text[256] = "", out[128];
                em_detok d;
                em_detok_init(&d, 0);
                for (size_t k = 0; k < 5; k++) {
                    int n = em_detok_push(t, &d, ids[k], out, sizeof out);
                    if (n > 0)
                        strncat(text, out, sizeof text - strlen(text) - 1);
                }
                CHECKF(strcmp(text, "<|channel|> hi<|message|><|end|>") == 0, "stream '%s'", text);
            }
        }
        em_tokenizer_destroy(t);
        em_gguf_close(g);
        free(buf);
    }
}

int main(void)
{
    test_harmony_vocab();
    synthetic();
    special_cuts();
    pre_tokenizers();
    if (!test_shared_dir()) {
        fprintf(stderr, "test_tokenizer: EMBER_SHARED is not a folder: golden cases skipped\n");
        return test_failures ? test_summary("tokenizer") : 77;
    }
    golden("llama-spm", 1, 0);
    golden("gpt-2", 1, 0);
    golden("starcoder", 1, 0);
    golden("deepseek-coder", 1, 0);
    golden("falcon", 1, 0);
    golden("bert-bge", 1, 1);
    spm_specifics();
    bpe_specifics();
    wpm_specifics();
    minilm_ids();
    threads("golden/tokenizer/ggml-vocab-gpt-2.gguf");
    threads("golden/tokenizer/ggml-vocab-llama-spm.gguf");
    threads("golden/tokenizer/ggml-vocab-bert-bge.gguf");
    return test_summary("tokenizer");
}
