/* tokenizer_wpm.c — BERT's WordPiece (tokenizer.ggml.model = "bert"): the
 * special tokens ([CLS] ... [SEP], [UNK]), BERT's normalizer and
 * pre-tokenizer, and greedy longest-match-first WordPiece over the vocabulary
 * that llama.cpp's converter writes ("▁word" for a word's first piece, bare
 * pieces for its continuations, where BERT wrote "##piece").
 *
 * The text goes through what Hugging Face's BertNormalizer and
 * BertPreTokenizer do for an uncased vocabulary, one code point at a time:
 *   - clean: NUL, U+FFFD and every C* code point (control, format, private
 *     use, unassigned) are dropped; \t \n \r and Zs are whitespace. Bytes that
 *     are not well-formed UTF-8 decode to U+FFFD and so are dropped too;
 *   - CJK ideographs (BERT's ranges) become words of their own;
 *   - accents: canonical decomposition (NFD), non-spacing marks (Mn) dropped;
 *   - lower-case (one-to-one mapping: U+0130 is I + a mark under NFD first);
 *   - whitespace ends a word; punctuation (P* and the ASCII symbols) is a
 *     word of its own.
 * Each word is then cut greedily, longest vocabulary piece first; a word
 * with a part that matches nothing, or longer than 100 characters (BERT's
 * max_input_chars_per_word), is one [UNK]. The Unicode tables come from
 * tokenizer_wpm_ucd.c. The GGUF does not say whether a vocabulary is cased:
 * every one is lower-cased, as llama.cpp does (a cased BERT would lose its
 * capitals). Lower-casing and accent stripping are not undone by
 * decoding: "Äpfel" decodes as "apfel", and words come back separated by one
 * space ("Hello, world!" -> "hello , world !"). */
#include "core/text/tokenizer_int.h"

#include <string.h>

#define WPM_MAX_WORD_CHARS 100
#define WPM_PHANTOM        "\xE2\x96\x81"   /* U+2581, the converter's word-start mark */

int em_tokenizer_wpm_init(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    t->bos = em_tokenizer_lookup(t, "[CLS]", 5);
    t->eos = em_tokenizer_lookup(t, "[SEP]", 5);
    t->unk = em_tokenizer_lookup(t, "[UNK]", 5);
    int rc;
    if ((rc = em_tokenizer_read_id(g, "tokenizer.ggml.cls_token_id", t, &t->bos, err)) ||
        (rc = em_tokenizer_read_id(g, "tokenizer.ggml.seperator_token_id", t, &t->eos, err)))
        return rc;
    t->add_bos = 1;   /* [CLS] text [SEP], as BERT is trained */
    t->add_eos = 1;
    return 0;
}

/* BERT's _is_chinese_char: the CJK Unified Ideographs blocks and their
 * compatibility ideographs (not Hiragana, Katakana or Hangul). */
static int is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static int ucd_class(uint32_t cp)
{
    if (cp >= 0x80)
        return em_tokenizer_ucd_class(cp);
    if (cp == '\t' || cp == '\n' || cp == '\r' || cp == ' ')
        return EM_UCD_SPACE;
    if (cp < 0x20 || cp == 0x7F)
        return EM_UCD_OTHER;
    if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z'))
        return EM_UCD_PLAIN;
    return EM_UCD_PUNCT;
}

static uint32_t decode_cp(const uint8_t *s, int len)
{
    static const uint8_t lead_mask[5] = { 0, 0x7F, 0x1F, 0x0F, 0x07 };
    uint32_t cp = s[0] & lead_mask[len];
    for (int i = 1; i < len; i++)
        cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

static size_t encode_cp(uint32_t cp, char *out)
{
    static const uint8_t lead[5] = { 0, 0, 0xC0, 0xE0, 0xF0 };
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        out[i] = (char)(0x80 | (cp & 0x3F));
    out[0] = (char)(lead[n] | cp);
    return n;
}

/* The word being collected: "▁" and its first WPM_MAX_WORD_CHARS characters
 * (a longer word is only counted: it becomes [UNK] whatever it holds). */
typedef struct {
    char     buf[3 + 4 * WPM_MAX_WORD_CHARS];
    uint16_t off[WPM_MAX_WORD_CHARS + 1];   /* byte offset in buf of each character; [n] = end */
    size_t   n;                             /* characters seen (may exceed the maximum) */
} wpm_word;

static void word_reset(wpm_word *w)
{
    memcpy(w->buf, WPM_PHANTOM, 3);
    w->off[0] = 3;
    w->n = 0;
}

static void word_add(wpm_word *w, uint32_t cp)
{
    if (w->n < WPM_MAX_WORD_CHARS)
        w->off[w->n + 1] = (uint16_t)(w->off[w->n] + encode_cp(cp, w->buf + w->off[w->n]));
    w->n++;
}

static int push_unk(const em_tokenizer *t, em_tokenizer_ids *out)
{
    if (t->unk < 0)
        return EM_EFORMAT;
    return em_tokenizer_ids_push(out, t->unk);
}

/* WordPiece over the collected word: the longest vocabulary piece at each
 * position ("▁" + the first piece, bare continuations); all or [UNK]. */
static int word_flush(const em_tokenizer *t, wpm_word *w, em_tokenizer_ids *out)
{
    size_t nc = w->n, mark = out->n;
    int rc = 0;
    if (nc == 0)
        return 0;
    word_reset(w);
    if (nc > WPM_MAX_WORD_CHARS)
        return push_unk(t, out);
    for (size_t start = 0; start < nc;) {
        int32_t id = -1;
        size_t end = nc;
        size_t a = start ? w->off[start] : 0;   /* the first piece takes the ▁ */
        for (; end > start; end--) {
            size_t b = w->off[end];
            if (b - a > t->max_token_len)
                continue;
            if ((id = em_tokenizer_lookup(t, w->buf + a, b - a)) >= 0)
                break;
        }
        if (id < 0) {
            out->n = mark;   /* a part matches nothing: the whole word is unknown */
            return push_unk(t, out);
        }
        if ((rc = em_tokenizer_ids_push(out, id)))
            return rc;
        start = end;
    }
    return 0;
}

/* One normalized code point: whitespace ends the word, punctuation is a
 * word of its own, anything else joins the word. */
static int add_normalized(const em_tokenizer *t, wpm_word *w, uint32_t cp, em_tokenizer_ids *out)
{
    int k = ucd_class(cp), rc;
    if (k == EM_UCD_SPACE)
        return word_flush(t, w, out);
    if (k == EM_UCD_PUNCT) {
        if ((rc = word_flush(t, w, out)))
            return rc;
        word_add(w, cp);
        return word_flush(t, w, out);
    }
    word_add(w, cp);
    return 0;
}

int em_tokenizer_wpm_encode(const em_tokenizer *t, const char *text, size_t len,
                            em_tokenizer_ids *out, em_err *err)
{
    const uint8_t *u = (const uint8_t *)text;
    wpm_word w;
    int rc = 0;
    word_reset(&w);
    for (size_t i = 0; i < len && rc == 0;) {
        int r = em_tokenizer_utf8_step(u + i, len - i);
        if (r <= 0) {   /* ill-formed: U+FFFD, which BERT's cleaning drops */
            i = r == 0 ? len : i + (size_t)-r;
            continue;
        }
        uint32_t cp = decode_cp(u + i, r);
        i += (size_t)r;
        int k = ucd_class(cp);
        if (cp == 0xFFFD || k == EM_UCD_OTHER)
            continue;
        if (k == EM_UCD_SPACE) {
            rc = word_flush(t, &w, out);
            continue;
        }
        int cjk = is_cjk(cp);
        if (cjk && (rc = word_flush(t, &w, out)))
            break;
        uint32_t d[3];
        size_t nd = 1;
        if (cp < 0x80) {
            d[0] = cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
        } else {
            nd = em_tokenizer_ucd_strip(cp, d);
            for (size_t j = 0; j < nd; j++)
                d[j] = em_tokenizer_ucd_lower(d[j]);
        }
        for (size_t j = 0; j < nd && rc == 0; j++)
            rc = add_normalized(t, &w, d[j], out);
        if (cjk && rc == 0)
            rc = word_flush(t, &w, out);
    }
    if (rc == 0)
        rc = word_flush(t, &w, out);
    if (rc == EM_EFORMAT)
        return em_err_set(err, EM_EFORMAT,
                          "tokenize: a word has no WordPiece tokens and the vocabulary has no [UNK]");
    if (rc)
        return em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
    return 0;
}
