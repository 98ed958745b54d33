/* tokenizer.c — the tokenizer built from GGUF metadata: vocabulary and its
 * hash table, special/control tokens (BOS/EOS/EOT, end-of-generation set,
 * matching them in text), SentencePiece-style BPE (tokenizer.ggml.model =
 * "llama"), and decoding (pieces, the streaming UTF-8-safe decoder).
 * Byte-level BPE ("gpt2") lives in tokenizer_bpe.c, BERT's WordPiece
 * ("bert") in tokenizer_wpm.c.
 *
 * The algorithms follow llama.cpp's, so that ids match its reference output:
 * SPM merges adjacent symbols by the highest score of the merged vocabulary
 * string (ties: leftmost) and falls back to <0xXX> byte tokens; special
 * tokens are cut out of the text longest first before either model runs. */
#include "core/grow.h"
#include "core/text/tokenizer_int.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small shared helpers ---------------------------------------------- */

uint64_t em_tokenizer_hash(const void *p, size_t n, uint64_t h)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint32_t slot_of(uint64_t h, uint32_t mask)
{
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return (uint32_t)h & mask;
}

int32_t em_tokenizer_lookup(const em_tokenizer *t, const char *s, size_t n)
{
    uint32_t slot = slot_of(em_tokenizer_hash(s, n, EM_TOKENIZER_FNV_SEED), t->map_mask);
    for (;; slot = (slot + 1) & t->map_mask) {
        int32_t id = t->map[slot];
        if (id < 0)
            return -1;
        const em_tokenizer_tok *k = &t->toks[id];
        if (k->text_len == n && memcmp(t->text + k->text_off, s, n) == 0)
            return id;
    }
}

size_t em_tokenizer_utf8_len(uint8_t c)
{
    static const uint8_t len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return len[c >> 4];
}

int em_tokenizer_ids_push(em_tokenizer_ids *v, int32_t id)
{
    if (em_grow((void **)&v->v, &v->cap, v->n, sizeof *v->v, 64))
        return EM_ENOMEM;
    v->v[v->n++] = id;
    return 0;
}

static int before(const em_tokenizer_bigram *a, const em_tokenizer_bigram *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

int em_tokenizer_heap_push(em_tokenizer_heap *h, em_tokenizer_bigram b)
{
    if (em_grow((void **)&h->v, &h->cap, h->n, sizeof *h->v, 64))
        return EM_ENOMEM;
    size_t i = h->n++;
    while (i > 0 && before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return 0;
}

int em_tokenizer_heap_pop(em_tokenizer_heap *h, em_tokenizer_bigram *out)
{
    if (h->n == 0)
        return 0;
    *out = h->v[0];
    em_tokenizer_bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n)
        h->v[i] = last;
    return 1;
}

/* ---- loading ------------------------------------------------------------ */

static int is_int_type(em_gguf_type ty)
{
    return ty == EM_GGUF_U8 || ty == EM_GGUF_I8 || ty == EM_GGUF_U16 || ty == EM_GGUF_I16 ||
           ty == EM_GGUF_U32 || ty == EM_GGUF_I32 || ty == EM_GGUF_U64 || ty == EM_GGUF_I64;
}

/* An optional per-token array: absent, or exactly n numbers. */
static int per_token_array(const em_gguf *g, const char *key, uint32_t n, int want_int,
                           const em_gguf_value **out, em_err *err)
{
    *out = NULL;
    if (!em_gguf_get(g, key))
        return 0;
    const em_gguf_value *v;
    int rc = em_gguf_get_arr(g, key, EM_GGUF_NTYPES, &v, err);
    if (rc)
        return rc;
    em_gguf_type ty = v->v.arr.type;
    int ok = want_int ? is_int_type(ty)
                      : (is_int_type(ty) || ty == EM_GGUF_F32 || ty == EM_GGUF_F64);
    if (!ok)
        return em_err_set(err, EM_EFORMAT, "%s: %s is an array of %s, expected %s",
                          em_gguf_path(g), key, em_gguf_type_name(ty),
                          want_int ? "integers" : "numbers");
    if (v->v.arr.n != n)
        return em_err_set(err, EM_EFORMAT,
                          "%s: %s has %llu entries but the vocabulary has %u tokens",
                          em_gguf_path(g), key, (unsigned long long)v->v.arr.n, n);
    *out = v;
    return 0;
}

static int load_vocab(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    const char *path = em_gguf_path(g);
    const char *key = "tokenizer.ggml.tokens";
    const em_gguf_value *tok, *scores, *types;
    if (!em_gguf_get(g, key))
        return em_err_set(err, EM_EFORMAT, "%s: no vocabulary (%s is missing)", path, key);
    int rc = em_gguf_get_arr(g, key, EM_GGUF_STRING, &tok, err);
    if (rc)
        return rc;
    uint64_t n = tok->v.arr.n;
    if (n == 0 || n > (1u << 30))
        return em_err_set(err, EM_EFORMAT, "%s: %s has %llu entries", path, key,
                          (unsigned long long)n);
    t->n_vocab = (uint32_t)n;
    rc = per_token_array(g, "tokenizer.ggml.scores", t->n_vocab, 0, &scores, err);
    if (rc)
        return rc;
    rc = per_token_array(g, "tokenizer.ggml.token_type", t->n_vocab, 1, &types, err);
    if (rc)
        return rc;

    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        total += tok->v.arr.items[i].v.str.len + 1;
    if (total >= UINT32_MAX)
        return em_err_set(err, EM_EFORMAT, "%s: %s is too large", path, key);
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    t->toks = calloc(n, sizeof *t->toks);
    t->text = malloc(total);
    t->map = malloc((size_t)cap * sizeof *t->map);
    if (!t->toks || !t->text || !t->map)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory loading the vocabulary", path);
    t->map_mask = cap - 1;
    memset(t->map, 0xff, (size_t)cap * sizeof *t->map);

    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        em_gguf_str s = tok->v.arr.items[i].v.str;
        em_tokenizer_tok *k = &t->toks[i];
        k->text_off = off;
        k->text_len = (uint32_t)s.len;
        memcpy(t->text + off, s.ptr, s.len);
        t->text[off + s.len] = 0;
        off += (uint32_t)s.len + 1;
        if (s.len > t->max_token_len)
            t->max_token_len = s.len;
        k->score = scores ? (float)em_gguf_arr_f64(scores, i) : 0.0f;
        if (k->score != k->score)
            k->score = -FLT_MAX;   /* NaN would break the merge order */
        k->type = EM_TOKT_NORMAL;
        if (types) {
            int64_t ty = em_gguf_arr_i64(types, i);
            if (ty < EM_TOKT_UNDEFINED || ty > EM_TOKT_BYTE)
                return em_err_set(err, EM_EFORMAT,
                                  "%s: tokenizer.ggml.token_type of token %u is %lld (0..6 allowed)",
                                  path, i, (long long)ty);
            k->type = (uint8_t)ty;
        }
        if (s.len == 0)
            continue;   /* an empty string cannot be looked up or matched */
        uint32_t slot = slot_of(em_tokenizer_hash(s.ptr, s.len, EM_TOKENIZER_FNV_SEED),
                                t->map_mask);
        for (;; slot = (slot + 1) & t->map_mask) {
            int32_t j = t->map[slot];
            if (j < 0 || (t->toks[j].text_len == s.len &&
                          memcmp(t->text + t->toks[j].text_off, s.ptr, s.len) == 0)) {
                t->map[slot] = (int32_t)i;   /* a duplicate string: the last id wins */
                break;
            }
        }
    }
    return 0;
}

/* An optional token id key: absent, negative or 0xFFFFFFFF (how converters
 * write "none", e.g. padding_token_id) means none; past the vocabulary is an
 * error. */
int em_tokenizer_read_id(const em_gguf *g, const char *key, const em_tokenizer *t, int32_t *id,
                         em_err *err)
{
    if (!em_gguf_get(g, key))
        return 0;
    int64_t v;
    int rc = em_gguf_get_i64(g, key, &v, err);
    if (rc)
        return rc;
    if (v < 0 || v == UINT32_MAX) {
        *id = -1;
        return 0;
    }
    if (v >= t->n_vocab)
        return em_err_set(err, EM_EFORMAT,
                          "%s: %s = %lld is out of range (the vocabulary has %u tokens)",
                          em_gguf_path(g), key, (long long)v, t->n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int read_flag(const em_gguf *g, const char *key, int *flag, em_err *err)
{
    if (!em_gguf_get(g, key))
        return 0;
    return em_gguf_get_bool(g, key, flag, err);
}

/* Token texts that mark end-of-turn / end-of-generation (llama.cpp's lists;
 * order is the preference when the metadata names no EOT). */
static const char *const eot_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",   /* DeepSeek */
    "<end_of_utterance>", NULL,
};
static const char *const eog_names[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    /* fill-in-the-middle: pad / repo / file separator end a generation too */
    "<|fim_pad|>", "<fim-pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<|file_sep|>", NULL,
};

/* force: the token was recognised by its text; an end marker is never text,
 * whatever type the file gives it (as llama.cpp does). */
static void mark_eog(em_tokenizer *t, int32_t id, int force)
{
    if (id < 0)
        return;
    t->toks[id].eog = 1;
    if (force)
        t->toks[id].type = EM_TOKT_CONTROL;
}

static int read_specials(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    int rc;
    if ((rc = em_tokenizer_read_id(g, "tokenizer.ggml.bos_token_id", t, &t->bos, err)) ||
        (rc = em_tokenizer_read_id(g, "tokenizer.ggml.eos_token_id", t, &t->eos, err)) ||
        (rc = em_tokenizer_read_id(g, "tokenizer.ggml.eot_token_id", t, &t->eot, err)) ||
        (rc = em_tokenizer_read_id(g, "tokenizer.ggml.eom_token_id", t, &t->eom, err)) ||
        (rc = em_tokenizer_read_id(g, "tokenizer.ggml.unknown_token_id", t, &t->unk, err)) ||
        (rc = read_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) ||
        (rc = read_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) ||
        (rc = read_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)))
        return rc;
    const char *fim[] = { "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                          "tokenizer.ggml.fim_sep_token_id" };
    for (size_t i = 0; i < 3; i++) {
        int32_t id = -1;
        if ((rc = em_tokenizer_read_id(g, fim[i], t, &id, err)))
            return rc;
        mark_eog(t, id, 0);
    }
    for (size_t i = 0; t->eot < 0 && eot_names[i]; i++) {
        t->eot = em_tokenizer_lookup(t, eot_names[i], strlen(eot_names[i]));
        mark_eog(t, t->eot, 1);
    }
    if (t->eom < 0) {
        t->eom = em_tokenizer_lookup(t, "<|eom_id|>", 10);
        mark_eog(t, t->eom, 1);
    }
    for (size_t i = 0; eog_names[i]; i++)
        mark_eog(t, em_tokenizer_lookup(t, eog_names[i], strlen(eog_names[i])), 1);
    mark_eog(t, t->eos, 0);
    mark_eog(t, t->eot, 0);
    mark_eog(t, t->eom, 0);
    /* o200k_harmony (gpt-oss): the answer comes in a message after the
     * reasoning's <|end|>, and the generation ends at <|return|> or
     * <|call|>; the markers decode to their text, as llama.cpp renders
     * them, for the chat path to split the channels */
    int32_t end = em_tokenizer_lookup(t, "<|end|>", 7);
    if (end >= 0 && em_tokenizer_lookup(t, "<|return|>", 10) >= 0 && em_tokenizer_lookup(t, "<|call|>", 8) >= 0) {
        static const char *const shown[] = { "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>" };
        t->harmony = 1;
        t->toks[end].eog = 0;
        for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
            int32_t id = em_tokenizer_lookup(t, shown[i], strlen(shown[i]));
            if (id >= 0)
                t->toks[id].type = EM_TOKT_USER;
        }
    }
    return 0;
}

int em_tokenizer_harmony(const em_tokenizer *t)
{
    return t->harmony;
}

/* Bytes one token decodes to (special tokens: nothing). */
static size_t make_piece(const em_tokenizer *t, const em_tokenizer_tok *k, char *out)
{
    const char *s = t->text + k->text_off;
    size_t n = k->text_len;
    switch (k->type) {
    case EM_TOKT_CONTROL:
    case EM_TOKT_UNKNOWN:
    case EM_TOKT_UNUSED:
        return 0;
    case EM_TOKT_USER:
        memcpy(out, s, n);
        return n;
    case EM_TOKT_BYTE:
        if (t->kind == EM_TOKENIZER_SPM && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
            char hex[3] = { s[3], s[4], 0 }, *end;
            long v = strtol(hex, &end, 16);
            if (*end == 0) {
                out[0] = (char)v;
                return 1;
            }
        }
        break;
    default:
        break;
    }
    if (t->kind == EM_TOKENIZER_BPE)
        return em_tokenizer_bpe_unmap(s, n, out);
    size_t w = 0;   /* SPM: U+2581 is a space */
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            out[w++] = ' ';
            i += 3;
        } else {
            out[w++] = s[i++];
        }
    }
    return w;
}

int em_tokenizer_utf8_step(const uint8_t *s, size_t n)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    int len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n)
            return 0;
        uint8_t lk = k == 1 ? lo : 0x80, hk = k == 1 ? hi : 0xBF;
        if (s[k] < lk || s[k] > hk)
            return -k;
    }
    return len;
}

/* Bytes the streaming decoder writes for a piece decoded on its own: well-
 * formed sequences as they are, each ill-formed part as U+FFFD (3 bytes), an
 * unfinished tail held back. Pending bytes of an earlier piece add at most 3. */
static size_t iso_output(const char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        int r = em_tokenizer_utf8_step((const uint8_t *)p + i, n - i);
        if (r == 0)
            break;
        w += r > 0 ? (size_t)r : 3;
        i += (size_t)(r > 0 ? r : -r);
    }
    return w;
}

static int build_pieces(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    size_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        total += t->toks[i].text_len;   /* a piece is never longer than its text */
    t->pieces = malloc(total ? total : 1);
    if (!t->pieces)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", em_gguf_path(g));
    uint32_t off = 0;
    t->detok_cap = 64;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        em_tokenizer_tok *k = &t->toks[i];
        k->piece_off = off;
        k->piece_len = (uint32_t)make_piece(t, k, t->pieces + off);
        off += k->piece_len;
        /* + a pending sequence finished or turned U+FFFD (3), + NUL */
        size_t need = iso_output(t->pieces + k->piece_off, k->piece_len) + 4;
        if (need > t->detok_cap)
            t->detok_cap = need;
    }
    return 0;
}

/* SPM byte fallback: "<0xXX>", else the one-byte string, else unknown. */
static void build_byte_fallback(em_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = em_tokenizer_lookup(t, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = em_tokenizer_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id;
    }
}

/* Rolling hash of special texts and input windows: h = sum c_j B^(n-1-j)
 * mod the prime 2^61 - 1, so that a window's hash moves one byte in O(1).
 * B is drawn at random per tokenizer: a vocabulary cannot be crafted to make
 * its special texts collide (every hit is compared byte for byte anyway;
 * collisions could only make the lookups slow). */
#define SP_P ((1ull << 61) - 1)

static uint64_t sp_mul(uint64_t a, uint64_t b)
{
    __uint128_t x = (__uint128_t)a * b;
    uint64_t r = (uint64_t)(x & SP_P) + (uint64_t)(x >> 61);
    return r >= SP_P ? r - SP_P : r;
}

static uint64_t sp_add(uint64_t a, uint64_t b)
{
    uint64_t r = a + b;
    return r >= SP_P ? r - SP_P : r;
}

static uint64_t sp_hash(uint64_t base, const char *s, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = sp_add(sp_mul(h, base), (uint8_t)s[i]);
    return h;
}

static uint32_t sp_slot(uint64_t h, size_t len, uint32_t mask)
{
    return (uint32_t)(((h ^ (uint64_t)len * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull) >> 32) & mask;
}

static int u32_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* A token that partition cuts out of the input (with parse_special; user
 * ones always): a control, user-defined or unknown token with text. */
static int is_cut(const em_tokenizer_tok *k)
{
    return (k->type == EM_TOKT_CONTROL || k->type == EM_TOKT_USER || k->type == EM_TOKT_UNKNOWN) &&
           k->text_len > 0;
}

/* The table of special texts and their lengths (struct em_tokenizer). */
static int build_special_index(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        n += is_cut(&t->toks[i]);
    uint64_t seed = 0;
    if (getentropy(&seed, sizeof seed) != 0)
        seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)t;
    t->sp_base = 256 + seed % (SP_P - 512);
    uint32_t cap = 16;
    while (cap < 2u * n)
        cap *= 2;
    t->sp_mask = cap - 1;
    t->sp_tab = malloc(cap * sizeof *t->sp_tab);
    t->sp_lens[0] = malloc((n ? n : 1) * sizeof(uint32_t));
    t->sp_lens[1] = malloc((n ? n : 1) * sizeof(uint32_t));
    if (!t->sp_tab || !t->sp_lens[0] || !t->sp_lens[1])
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", em_gguf_path(g));
    for (uint32_t i = 0; i < cap; i++)
        t->sp_tab[i] = (em_tokenizer_special){ 0, 0, -1, -1 };
    for (uint32_t i = 0; i < t->n_vocab; i++) {   /* ascending ids: the first id of a text is the lowest */
        const em_tokenizer_tok *k = &t->toks[i];
        if (!is_cut(k))
            continue;
        const char *txt = t->text + k->text_off;
        uint64_t h = sp_hash(t->sp_base, txt, k->text_len);
        uint32_t j = sp_slot(h, k->text_len, t->sp_mask);
        em_tokenizer_special *e;
        for (;; j = (j + 1) & t->sp_mask) {
            e = &t->sp_tab[j];
            if (e->id_all < 0)
                break;
            if (e->h == h && e->len == k->text_len &&
                memcmp(t->text + t->toks[e->id_all].text_off, txt, k->text_len) == 0)
                break;
        }
        if (e->id_all < 0) {
            *e = (em_tokenizer_special){ h, k->text_len, (int32_t)i, -1 };
            t->sp_lens[1][t->sp_n_lens[1]++] = k->text_len;
        }
        if (k->type == EM_TOKT_USER && e->id_user < 0) {
            e->id_user = (int32_t)i;
            t->sp_lens[0][t->sp_n_lens[0]++] = k->text_len;
        }
    }
    for (int m = 0; m < 2; m++) {   /* distinct lengths, longest first */
        uint32_t *v = t->sp_lens[m], k = 0;
        qsort(v, t->sp_n_lens[m], sizeof *v, u32_desc);
        for (uint32_t i = 0; i < t->sp_n_lens[m]; i++)
            if (k == 0 || v[k - 1] != v[i])
                v[k++] = v[i];
        t->sp_n_lens[m] = k;
    }
    return 0;
}

int em_tokenizer_create(const em_gguf *g, em_tokenizer **out, em_err *err)
{
    em_tokenizer *t = NULL;
    int rc;
    if (!out)
        return em_err_set(err, EM_EINVAL, "tokenizer: no output pointer");
    *out = NULL;
    if (!g)
        return em_err_set(err, EM_EINVAL, "tokenizer: no GGUF file");
    const char *path = em_gguf_path(g);
    em_gguf_str model;
    if (!em_gguf_get(g, "tokenizer.ggml.model"))
        return em_err_set(err, EM_EFORMAT, "%s: no tokenizer (tokenizer.ggml.model is missing)",
                          path);
    rc = em_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc)
        return rc;
    t = calloc(1, sizeof *t);
    if (!t)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
    t->bos = t->eos = t->eot = t->eom = t->unk = -1;
    if (em_gguf_str_eq(model, "llama")) {
        t->kind = EM_TOKENIZER_SPM;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else if (em_gguf_str_eq(model, "gpt2")) {
        t->kind = EM_TOKENIZER_BPE;
    } else if (em_gguf_str_eq(model, "bert")) {
        t->kind = EM_TOKENIZER_WPM;
    } else {
        rc = em_err_set(err, EM_EUNSUPPORTED,
                        "%s: tokenizer model '%.*s' is not supported (only 'llama', 'gpt2' and 'bert')",
                        path, (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto cleanup;
    }
    if ((rc = load_vocab(t, g, err)))
        goto cleanup;
    if (t->kind == EM_TOKENIZER_SPM) {
        /* SentencePiece conventions when the metadata does not say */
        if (t->n_vocab > 2) {
            t->unk = 0;
            t->bos = 1;
            t->eos = 2;
        }
    } else if (t->kind == EM_TOKENIZER_WPM) {
        if ((rc = em_tokenizer_wpm_init(t, g, err)))
            goto cleanup;
    } else if ((rc = em_tokenizer_bpe_init(t, g, err))) {
        goto cleanup;
    }
    if ((rc = read_specials(t, g, err)))
        goto cleanup;
    if (t->kind == EM_TOKENIZER_SPM)
        build_byte_fallback(t);
    if ((rc = build_pieces(t, g, err)) || (rc = build_special_index(t, g, err)))
        goto cleanup;
    *out = t;
    t = NULL;
cleanup:
    em_tokenizer_destroy(t);
    return rc;
}

void em_tokenizer_destroy(em_tokenizer *t)
{
    if (!t)
        return;
    em_tokenizer_bpe_free(t);
    free(t->toks);
    free(t->text);
    free(t->pieces);
    free(t->map);
    free(t->sp_tab);
    free(t->sp_lens[0]);
    free(t->sp_lens[1]);
    free(t);
}

/* ---- queries -------------------------------------------------------------- */

uint32_t em_tokenizer_n_vocab(const em_tokenizer *t) { return t->n_vocab; }
size_t em_tokenizer_max_token_bytes(const em_tokenizer *t)
{
    if (t->kind == EM_TOKENIZER_WPM)
        return EM_TOKENIZER_MAX_TEXT;   /* no bound: see the header */
    return t->max_token_len ? t->max_token_len : 1;
}
int32_t em_tokenizer_bos(const em_tokenizer *t) { return t->bos; }
int32_t em_tokenizer_eos(const em_tokenizer *t) { return t->eos; }
int32_t em_tokenizer_eot(const em_tokenizer *t) { return t->eot; }
int em_tokenizer_add_bos(const em_tokenizer *t) { return t->add_bos && t->bos >= 0; }
int em_tokenizer_add_eos(const em_tokenizer *t) { return t->add_eos && t->eos >= 0; }
size_t em_tokenizer_detok_cap(const em_tokenizer *t) { return t->detok_cap; }

static int in_range(const em_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab;
}

int em_tokenizer_is_eog(const em_tokenizer *t, int32_t id)
{
    return in_range(t, id) && t->toks[id].eog;
}

static int type_is_special(uint8_t ty)
{
    return ty == EM_TOKT_CONTROL || ty == EM_TOKT_UNKNOWN || ty == EM_TOKT_UNUSED;
}

int em_tokenizer_is_special(const em_tokenizer *t, int32_t id)
{
    return in_range(t, id) && type_is_special(t->toks[id].type) && !t->toks[id].shown;
}

size_t em_tokenizer_show(em_tokenizer *t, const char *text)
{
    size_t n = 0, len = strlen(text);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        em_tokenizer_tok *k = &t->toks[i];
        if (k->type == EM_TOKT_CONTROL && !k->eog && !k->shown && k->text_len > 1 &&
            memmem(text, len, t->text + k->text_off, k->text_len)) {
            k->shown = 1;
            n++;
        }
    }
    return n;
}

const char *em_tokenizer_token_text(const em_tokenizer *t, int32_t id)
{
    return in_range(t, id) ? t->text + t->toks[id].text_off : NULL;
}

int32_t em_tokenizer_find(const em_tokenizer *t, const char *text)
{
    return text ? em_tokenizer_lookup(t, text, strlen(text)) : -1;
}

/* ---- encoding ------------------------------------------------------------- */

/* A piece of the input: raw text [off, off + len), or a special token (id >= 0). */
typedef struct {
    size_t  off, len;
    int32_t id;
} frag;

typedef struct {
    frag  *v;
    size_t n, cap;
} frags;

static int frag_push(frags *f, size_t off, size_t len, int32_t id)
{
    if (id < 0 && len == 0)
        return 0;
    if (em_grow((void **)&f->v, &f->cap, f->n, sizeof *f->v, 16))
        return EM_ENOMEM;
    f->v[f->n++] = (frag){ off, len, id };
    return 0;
}

/* A special token found in the text: id at [pos, pos + its length). */
typedef struct {
    int32_t id;
    size_t  pos;
} sp_hit;

static int hit_cmp(const void *a, const void *b)
{
    const sp_hit *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int hit_pos_cmp(const void *a, const void *b)
{
    const sp_hit *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Cut special tokens out of the text. Without parse_special only
 * user-defined tokens are cut (as llama.cpp: control and unknown tokens are
 * then plain text). The rule is the reference's: special tokens in order of
 * text length (longest first), then id, each taking its leftmost
 * non-overlapping occurrences in what earlier ones left uncut. Done one
 * length at a time: every window of that length that no longer special
 * claimed is hashed once (rolling) and looked up, the hits are taken in
 * (id, position) order. A span of length L overlaps an earlier claim (never
 * shorter) only if that claim covers its first or its last byte, so one bit
 * per input byte answers it. O(input x distinct lengths), where cutting
 * token by token over the whole text was O(input x special tokens). */
static int partition(const em_tokenizer *t, const char *text, size_t len, int parse_special,
                     frags *a)
{
    const int mode = parse_special ? 1 : 0;
    const uint32_t *lens = t->sp_lens[mode];
    uint8_t *claimed = NULL;
    sp_hit *hits = NULL, *taken = NULL;
    size_t n_hits_cap = 0, n_taken = 0, taken_cap = 0;
    int rc = 0;
    if (t->sp_n_lens[mode] == 0 || lens[t->sp_n_lens[mode] - 1] > len)
        return frag_push(a, 0, len, -1);
    if (!(claimed = calloc(len / 8 + 1, 1)))
        return EM_ENOMEM;
#define CLAIMED(i) ((claimed[(i) >> 3] >> ((i) & 7)) & 1)
    for (uint32_t li = 0; li < t->sp_n_lens[mode]; li++) {
        const size_t L = lens[li];
        if (L > len)
            continue;
        uint64_t top = 1;   /* base^(L-1) */
        for (size_t i = 1; i < L; i++)
            top = sp_mul(top, t->sp_base);
        uint64_t h = sp_hash(t->sp_base, text, L);
        size_t n_hits = 0;
        for (size_t i = 0;; i++) {
            if (!CLAIMED(i) && !CLAIMED(i + L - 1)) {
                for (uint32_t j = sp_slot(h, L, t->sp_mask);; j = (j + 1) & t->sp_mask) {
                    const em_tokenizer_special *e = &t->sp_tab[j];
                    if (e->id_all < 0)
                        break;
                    if (e->h != h || e->len != L || memcmp(t->text + t->toks[e->id_all].text_off, text + i, L))
                        continue;   /* another text (a hash collision included) */
                    int32_t id = mode ? e->id_all : e->id_user;
                    if (id >= 0) {
                        if (em_grow((void **)&hits, &n_hits_cap, n_hits, sizeof *hits, 64)) {
                            rc = EM_ENOMEM;
                            goto cleanup;
                        }
                        hits[n_hits++] = (sp_hit){ id, i };
                    }
                    break;
                }
            }
            if (i + L >= len)
                break;
            h = sp_add(sp_mul(sp_add(h, SP_P - sp_mul((uint8_t)text[i], top)), t->sp_base), (uint8_t)text[i + L]);
        }
        if (n_hits)
            qsort(hits, n_hits, sizeof *hits, hit_cmp);
        size_t end = 0;   /* of the last span the current id took */
        for (size_t k = 0; k < n_hits; k++) {
            size_t p = hits[k].pos;
            if (k > 0 && hits[k].id != hits[k - 1].id)
                end = 0;
            if (p < end || CLAIMED(p) || CLAIMED(p + L - 1))
                continue;
            for (size_t i = p; i < p + L; i++)
                claimed[i >> 3] |= (uint8_t)(1u << (i & 7));
            end = p + L;
            if (em_grow((void **)&taken, &taken_cap, n_taken, sizeof *taken, 16)) {
                rc = EM_ENOMEM;
                goto cleanup;
            }
            taken[n_taken++] = hits[k];
        }
    }
#undef CLAIMED
    if (n_taken)
        qsort(taken, n_taken, sizeof *taken, hit_pos_cmp);
    size_t pos = 0;
    for (size_t k = 0; k < n_taken; k++) {
        size_t L = t->toks[taken[k].id].text_len;
        if ((rc = frag_push(a, pos, taken[k].pos - pos, -1)) || (rc = frag_push(a, taken[k].pos, L, taken[k].id)))
            goto cleanup;
        pos = taken[k].pos + L;
    }
    rc = frag_push(a, pos, len - pos, -1);
cleanup:
    free(claimed);
    free(hits);
    free(taken);
    return rc;
}

static int spm_try_bigram(const em_tokenizer *t, const char *w, const em_tokenizer_sym *sym,
                          int32_t l, int32_t r, em_tokenizer_heap *h)
{
    if (l < 0 || r < 0)
        return 0;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = em_tokenizer_lookup(t, w + sym[l].off, size);
    if (id < 0)
        return 0;
    em_tokenizer_bigram b = { t->toks[id].score, l, r, size };
    return em_tokenizer_heap_push(h, b);
}

/* SentencePiece BPE over one raw fragment. */
static int spm_encode(const em_tokenizer *t, const char *s, size_t len, int prefix,
                      em_tokenizer_ids *out, em_err *err)
{
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++)
        n_sp += s[i] == ' ';
    size_t wcap = len + 2 * n_sp + 3;   /* each space becomes 3 bytes, + the prefix */
    char *w = malloc(wcap);
    em_tokenizer_sym *sym = malloc(wcap * sizeof *sym);
    em_tokenizer_heap h = { 0 };
    int rc = 0;
    if (!w || !sym) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    size_t wn = 0;
    if (prefix) {
        memcpy(w, "\xE2\x96\x81", 3);
        wn = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            memcpy(w + wn, "\xE2\x96\x81", 3);
            wn += 3;
        } else {
            w[wn++] = s[i];
        }
    }
    /* symbols are characters; an ill-formed byte is a symbol of its own (so
     * that byte fallback gives back exactly the bytes of the input) */
    int32_t n = 0;
    for (size_t off = 0; off < wn; n++) {
        int cl = em_tokenizer_utf8_step((const uint8_t *)w + off, wn - off);
        if (cl <= 0)
            cl = 1;
        sym[n] = (em_tokenizer_sym){ (uint32_t)off, (uint32_t)cl, n - 1, -1 };
        if (n > 0)
            sym[n - 1].next = n;
        off += (size_t)cl;
    }
    for (int32_t i = 1; i < n; i++)
        if (spm_try_bigram(t, w, sym, i - 1, i, &h)) {
            rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            goto cleanup;
        }
    em_tokenizer_bigram bg;
    while (em_tokenizer_heap_pop(&h, &bg)) {
        em_tokenizer_sym *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = bg.left;
        if (spm_try_bigram(t, w, sym, l->prev, bg.left, &h) ||
            spm_try_bigram(t, w, sym, bg.left, l->next, &h)) {
            rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            goto cleanup;
        }
    }
    for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) {
        const char *p = w + sym[i].off;
        int32_t id = em_tokenizer_lookup(t, p, sym[i].n);
        if (id >= 0) {
            if (em_tokenizer_ids_push(out, id)) {
                rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
                goto cleanup;
            }
            continue;
        }
        /* not in the vocabulary: one token per byte, or one unknown */
        int all_bytes = 1;
        for (uint32_t j = 0; j < sym[i].n; j++)
            all_bytes &= t->byte_tok[(uint8_t)p[j]] >= 0;
        if (all_bytes) {
            for (uint32_t j = 0; j < sym[i].n; j++)
                if (em_tokenizer_ids_push(out, t->byte_tok[(uint8_t)p[j]])) {
                    rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
                    goto cleanup;
                }
        } else if (t->unk >= 0) {
            if (em_tokenizer_ids_push(out, t->unk)) {
                rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
                goto cleanup;
            }
        } else {
            rc = em_err_set(err, EM_EUNSUPPORTED,
                            "tokenize: '%.*s' has no token and the vocabulary has neither "
                            "byte tokens nor an unknown token", (int)sym[i].n, p);
            goto cleanup;
        }
    }
cleanup:
    free(w);
    free(sym);
    free(h.v);
    return rc;
}

int em_tokenizer_encode(const em_tokenizer *t, const char *text, size_t len, int add_special,
                        int parse_special, int32_t **ids, size_t *n_ids, em_err *err)
{
    em_tokenizer_ids out = { 0 };
    frags fr = { 0 };
    int rc = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return em_err_set(err, EM_EINVAL, "tokenize: invalid argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > EM_TOKENIZER_MAX_TEXT) {
        rc = em_err_set(err, EM_ERANGE, "tokenize: text of %zu bytes is too long (limit %zu)",
                        len, (size_t)EM_TOKENIZER_MAX_TEXT);
        goto cleanup;
    }
    if (add_special && t->add_bos && t->bos >= 0 && em_tokenizer_ids_push(&out, t->bos)) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    if (len > 0 && (rc = partition(t, text, len, parse_special, &fr))) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    int prev_special = 1;   /* SPM: the first word and each word after a special token get ▁ */
    for (size_t i = 0; i < fr.n; i++) {
        const frag *f = &fr.v[i];
        if (f->id >= 0) {
            if (em_tokenizer_ids_push(&out, f->id)) {
                rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
                goto cleanup;
            }
            prev_special = 1;
            continue;
        }
        if (t->kind == EM_TOKENIZER_SPM)
            rc = spm_encode(t, text + f->off, f->len, t->add_space_prefix && prev_special,
                            &out, err);
        else if (t->kind == EM_TOKENIZER_WPM)
            rc = em_tokenizer_wpm_encode(t, text + f->off, f->len, &out, err);
        else
            rc = em_tokenizer_bpe_encode(t, text + f->off, f->len, &out, err);
        if (rc)
            goto cleanup;
        prev_special = 0;
    }
    if (add_special && t->add_eos && t->eos >= 0 && em_tokenizer_ids_push(&out, t->eos)) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v))) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    *ids = out.v;
    *n_ids = out.n;
    out.v = NULL;
cleanup:
    free(out.v);
    free(fr.v);
    return rc;
}

/* ---- decoding ------------------------------------------------------------- */

int em_tokenizer_piece(const em_tokenizer *t, int32_t id, int render_special, char *out,
                       size_t cap)
{
    if (!t)
        return EM_EINVAL;
    if (!in_range(t, id))
        return EM_ERANGE;
    const em_tokenizer_tok *k = &t->toks[id];
    const char *p = t->pieces + k->piece_off;
    size_t n = k->piece_len;
    if ((render_special || k->shown) && type_is_special(k->type)) {
        p = t->text + k->text_off;
        n = k->text_len;
    }
    if (out && cap)
        memcpy(out, p, n < cap ? n : cap);
    return (int)n;
}

typedef struct {
    char  *out;
    size_t cap, w;
    int    full;
} sink;

static void put(sink *s, const void *p, size_t n)
{
    if (s->full || s->w + n + 1 > s->cap) {
        s->full = 1;
        return;
    }
    memcpy(s->out + s->w, p, n);
    s->w += n;
}

void em_detok_init(em_detok *d, int at_start)
{
    memset(d, 0, sizeof *d);
    d->started = !at_start;
}

int em_detok_push(const em_tokenizer *t, em_detok *d, int32_t id, char *out, size_t cap)
{
    if (!t || !d || !out || cap == 0)
        return EM_EINVAL;
    if (!in_range(t, id))
        return EM_ERANGE;
    out[0] = 0;
    const em_tokenizer_tok *k = &t->toks[id];
    if (type_is_special(k->type) && !k->shown)
        return 0;
    const uint8_t *p = (const uint8_t *)t->pieces + k->piece_off;
    size_t n = k->piece_len;
    if (k->shown) {
        p = (const uint8_t *)t->text + k->text_off;
        n = k->text_len;
    }
    /* the space SPM adds to the first word, WordPiece's ▁ of every word */
    int lead = (t->kind == EM_TOKENIZER_SPM && t->add_space_prefix) || t->kind == EM_TOKENIZER_WPM;
    if (!d->started && lead && n && p[0] == ' ') {
        p++;
        n--;
    }
    sink s = { out, cap, 0, 0 };
    size_t i = 0;
    int np = d->n_pending;
    uint8_t pend[8];
    if (np > 0) {
        /* finish (or give up on) the held sequence with the piece's first bytes */
        uint8_t tmp[8];
        size_t take = n < 4 ? n : 4;
        memcpy(tmp, d->pending, (size_t)np);
        memcpy(tmp + np, p, take);
        int r = em_tokenizer_utf8_step(tmp, (size_t)np + take);
        if (r == 0) {                       /* still incomplete: hold it all */
            memcpy(pend, tmp, (size_t)np + take);
            np += (int)take;
            i = n;
        } else {
            if (r > 0)
                put(&s, tmp, (size_t)r);
            else
                put(&s, "\xEF\xBF\xBD", 3);
            i = (size_t)(r > 0 ? r : -r) - (size_t)np;
            np = 0;
        }
    }
    while (i < n) {
        int r = em_tokenizer_utf8_step(p + i, n - i);
        if (r == 0) {                       /* a sequence that the next piece may finish */
            np = (int)(n - i);
            memcpy(pend, p + i, (size_t)np);
            break;
        }
        if (r > 0)
            put(&s, p + i, (size_t)r);
        else
            put(&s, "\xEF\xBF\xBD", 3);
        i += (size_t)(r > 0 ? r : -r);
    }
    if (s.full) {
        out[0] = 0;
        return EM_EINVAL;
    }
    out[s.w] = 0;
    memcpy(d->pending, pend, (size_t)np);
    d->n_pending = np;
    d->started = 1;
    return (int)s.w;
}

int em_detok_flush(const em_tokenizer *t, em_detok *d, char *out, size_t cap)
{
    if (!t || !d || !out || cap == 0)
        return EM_EINVAL;
    out[0] = 0;
    if (d->n_pending == 0)
        return 0;
    if (cap < 4)
        return EM_EINVAL;
    memcpy(out, "\xEF\xBF\xBD", 4);   /* with its NUL */
    d->n_pending = 0;
    return 3;
}

int em_tokenizer_decode(const em_tokenizer *t, const int32_t *ids, size_t n, char **text,
                        em_err *err)
{
    char *buf = NULL, *chunk = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    if (!t || !text || (!ids && n))
        return em_err_set(err, EM_EINVAL, "decode: invalid argument");
    *text = NULL;
    size_t ccap = t->detok_cap;
    chunk = malloc(ccap);
    if (!chunk) {
        rc = em_err_set(err, EM_ENOMEM, "decode: out of memory");
        goto cleanup;
    }
    em_detok d;
    em_detok_init(&d, 1);
    for (size_t i = 0; i <= n; i++) {
        int r;
        if (i < n && !in_range(t, ids[i])) {
            rc = em_err_set(err, EM_ERANGE,
                            "decode: token id %d at position %zu is out of range "
                            "(the vocabulary has %u tokens)", ids[i], i, t->n_vocab);
            goto cleanup;
        }
        r = i < n ? em_detok_push(t, &d, ids[i], chunk, ccap) : em_detok_flush(t, &d, chunk, ccap);
        if (r < 0) {
            rc = em_err_set(err, r, "decode: %s", em_err_str(r));
            goto cleanup;
        }
        if (len + (size_t)r + 1 > cap) {
            size_t nc = cap ? 2 * cap : 256;
            while (nc < len + (size_t)r + 1)
                nc *= 2;
            char *nb = realloc(buf, nc);
            if (!nb) {
                rc = em_err_set(err, EM_ENOMEM, "decode: out of memory");
                goto cleanup;
            }
            buf = nb;
            cap = nc;
        }
        memcpy(buf + len, chunk, (size_t)r);
        len += (size_t)r;
    }
    if (!buf && !(buf = malloc(1))) {
        rc = em_err_set(err, EM_ENOMEM, "decode: out of memory");
        goto cleanup;
    }
    buf[len] = 0;
    *text = buf;
    buf = NULL;
cleanup:
    free(buf);
    free(chunk);
    return rc;
}
