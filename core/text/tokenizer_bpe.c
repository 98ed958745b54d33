/* tokenizer_bpe.c — byte-level BPE (tokenizer.ggml.model = "gpt2"): the
 * pre-tokenizer chosen by tokenizer.ggml.pre (regexes run with PCRE2 in UTF +
 * UCP mode), the GPT-2 byte-to-unicode mapping, and merges applied by rank
 * from tokenizer.ggml.merges.
 *
 * Splitting follows llama.cpp: the regexes of a pre-tokenizer run one after
 * the other, each inside the pieces the previous one left; both the matches
 * and the text between matches become pieces. Each regex sees one piece as
 * its whole subject (lookaheads and $ stop at the piece's end).
 *
 * Not here, so an error: pre-tokenizers that llama.cpp implements with custom
 * code (kimi-k2, afmoe), superbpe (its digit-grouping lookahead is quadratic
 * in the length of a digit run: a denial of service for a server), chameleon
 * and the add-SEP embedding models (jina-v1-en, jina-v2-code, roberta-bpe). */
#include "core/grow.h"
#include "core/text/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pre-tokenizer table ------------------------------------------------ */

/* Case-insensitive contractions, spelled out: (?i:...) would also let U+017F
 * and U+212A match "s" and "k" under Unicode case folding. */
#define RE_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK   "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* Cased letters as listed in DeepSeek LLM's tokenizer.json. */
#define RE_DS_LETTERS \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}" \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}-\\x{377}\\x{37B}-\\x{37D}" \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}" \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}" \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}" \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}" \
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}" \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}" \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}" \
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}" \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}" \
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}" \
    "\\x{214E}\\x{2183}-\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}" \
    "\\x{2CF2}-\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}" \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}" \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}" \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
/* Tekken / GPT-4o as written in their tokenizer.json (PCRE2 has the classes
 * that llama.cpp's std::regex lacks, so no rewrite is needed). */
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTR "?" \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTR "?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2, PRE_NO_BOS = 4 };

typedef struct {
    const char *names[10];                        /* NULL-terminated */
    int         flags;
    const char *re[EM_TOKENIZER_MAX_REGEX];       /* NULL-terminated */
} pre_entry;

static const pre_entry pre_table[] = {
    { { "default", NULL }, 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL } },
    { { "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
        "lfm2", NULL }, PRE_IGNORE_MERGES | PRE_ADD_BOS, { RE_LLAMA3, NULL } },
    { { "dbrx", "smaug-bpe", NULL }, 0, { RE_LLAMA3, NULL } },
    { { "chatglm-bpe", "glm4", NULL }, PRE_NO_BOS, { RE_LLAMA3, NULL } },
    { { "deepseek-llm", NULL }, 0,
      { "[\\r\\n]", "\\s?[" RE_DS_LETTERS "]+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
        "\\s+$", RE_CJK, "\\p{N}+" } },
    { { "deepseek-coder", NULL }, 0,
      { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}", NULL } },
    { { "deepseek-v3", "hunyuan-dense", NULL }, 0,
      { "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
        "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*"
        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL } },
    { { "falcon", NULL }, 0,
      { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL } },
    { { "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
        NULL }, 0, { "\\p{N}", RE_GPT2, NULL } },
    { { "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", NULL }, 0, { RE_GPT2, NULL } },
    { { "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling", NULL }, 0,
      { RE_GPT2, NULL } },
    { { "qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "megrez", "hunyuan", "grok-2",
        NULL }, 0, { RE_QWEN2, NULL } },
    { { "poro-chat", "bloom", "gpt3-finnish", NULL }, 0, { RE_PORO, NULL } },
    { { "viking", NULL }, 0, { RE_PORO, "\\p{N}", NULL } },
    { { "tekken", NULL }, PRE_IGNORE_MERGES | PRE_ADD_BOS, { RE_TEKKEN, NULL } },
    { { "gpt-4o", "llama4", "minimax-m2", NULL }, 0, { RE_GPT4O, NULL } },
    { { "seed-coder", NULL }, 0,
      { RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+"
        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL } },
    { { "bailingmoe", "bailingmoe2", "llada-moe", NULL }, 0,
      { "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}"
        "| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+", NULL } },
};

static const pre_entry *find_pre(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
        for (const char *const *n = pre_table[i].names; *n; n++)
            if (strlen(*n) == len && memcmp(*n, name, len) == 0)
                return &pre_table[i];
    return NULL;
}

/* ---- GPT-2 byte <-> unicode ------------------------------------------- */

/* Printable bytes map to themselves; the other 68 take code points 256.. in
 * byte order (0..32 -> 256..288, 127..160 -> 289..322, 173 -> 323). */
static uint32_t byte_to_cp(uint8_t b)
{
    if (b <= 32)
        return 256u + b;
    if (b >= 127 && b <= 160)
        return 162u + b;
    if (b == 173)
        return 323;
    return b;
}

static int cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) ? -1 : (int)cp;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(cp - 162);
    if (cp == 323)
        return 173;
    return -1;
}

size_t em_tokenizer_bpe_unmap(const char *s, size_t n, char *out)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, w = 0;
    while (i < n) {
        /* the mapped code points are all below U+0800: one or two bytes */
        if (u[i] >= 0xC2 && u[i] <= 0xDF && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
            uint32_t cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            int b = cp_to_byte(cp);
            if (b >= 0) {
                out[w++] = (char)b;
                i += 2;
                continue;
            }
            out[w++] = s[i++];
            out[w++] = s[i++];
            continue;
        }
        int b = u[i] < 0x80 ? cp_to_byte(u[i]) : -1;
        out[w++] = b >= 0 ? (char)b : s[i];
        i++;
    }
    return w;
}

/* ---- merges ------------------------------------------------------------- */

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

/* Rank of merging left+right, or -1. */
static int32_t merge_rank(const em_tokenizer *t, const char *l, size_t ln, const char *r,
                          size_t rn)
{
    if (!t->merge_map)
        return -1;
    uint64_t h = em_tokenizer_hash(l, ln, EM_TOKENIZER_FNV_SEED);
    h = em_tokenizer_hash(" ", 1, h);
    h = em_tokenizer_hash(r, rn, h);
    for (uint32_t slot = (uint32_t)mix(h) & t->merge_mask;; slot = (slot + 1) & t->merge_mask) {
        int32_t i = t->merge_map[slot];
        if (i < 0)
            return -1;
        const char *m = t->merges + t->merge_off[i];
        uint32_t mlen = t->merge_off[i + 1] - t->merge_off[i];
        if (t->merge_split[i] == ln && mlen == ln + 1 + rn && memcmp(m, l, ln) == 0 &&
            memcmp(m + ln + 1, r, rn) == 0)
            return i;
    }
}

static int load_merges(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    const char *key = "tokenizer.ggml.merges";
    const em_gguf_value *arr;
    int rc = em_gguf_get_arr(g, key, EM_GGUF_STRING, &arr, err);
    if (rc == EM_ENOENT)
        return em_err_set(err, EM_EFORMAT, "%s: byte-level BPE vocabulary without %s",
                          em_gguf_path(g), key);
    if (rc)
        return rc;
    uint64_t n = arr->v.arr.n;
    if (n >= (1u << 30))
        return em_err_set(err, EM_EFORMAT, "%s: %s has %llu entries (too many)",
                          em_gguf_path(g), key, (unsigned long long)n);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++)
        total += arr->v.arr.items[i].v.str.len;
    if (total >= UINT32_MAX)
        return em_err_set(err, EM_EFORMAT, "%s: %s is too large", em_gguf_path(g), key);
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    t->n_merges = (uint32_t)n;
    t->merges = malloc(total ? total : 1);
    t->merge_off = malloc((n + 1) * sizeof *t->merge_off);
    t->merge_split = malloc((n ? n : 1) * sizeof *t->merge_split);
    t->merge_map = malloc((size_t)cap * sizeof *t->merge_map);
    if (!t->merges || !t->merge_off || !t->merge_split || !t->merge_map)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory loading merges", em_gguf_path(g));
    t->merge_mask = cap - 1;
    memset(t->merge_map, 0xff, (size_t)cap * sizeof *t->merge_map);
    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        em_gguf_str s = arr->v.arr.items[i].v.str;
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp || (uint64_t)(sp - s.ptr) + 1 >= s.len)
            return em_err_set(err, EM_EFORMAT,
                              "%s: %s entry %u ('%.*s') is not two tokens separated by a space",
                              em_gguf_path(g), key, i, (int)(s.len > 40 ? 40 : s.len), s.ptr);
        t->merge_off[i] = off;
        t->merge_split[i] = (uint32_t)(sp - s.ptr);
        memcpy(t->merges + off, s.ptr, s.len);
        off += (uint32_t)s.len;
        t->merge_off[i + 1] = off;
        uint64_t h = em_tokenizer_hash(s.ptr, s.len, EM_TOKENIZER_FNV_SEED);
        uint32_t slot = (uint32_t)mix(h) & t->merge_mask;
        for (;; slot = (slot + 1) & t->merge_mask) {
            int32_t j = t->merge_map[slot];
            if (j < 0) {
                t->merge_map[slot] = (int32_t)i;
                break;
            }
            /* a repeated merge keeps its first (best) rank */
            if (t->merge_off[j + 1] - t->merge_off[j] == s.len &&
                memcmp(t->merges + t->merge_off[j], s.ptr, s.len) == 0)
                break;
        }
    }
    if (n == 0)
        t->merge_off[0] = 0;
    return 0;
}

/* ---- init / free ---------------------------------------------------------- */

int em_tokenizer_bpe_init(em_tokenizer *t, const em_gguf *g, em_err *err)
{
    const char *path = em_gguf_path(g);
    em_gguf_str pre = { "default", 7 };
    int rc = em_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (rc == EM_ENOENT) {
        pre.ptr = "default";     /* as llama.cpp: an old file without the key */
        pre.len = 7;
    } else if (rc) {
        return rc;
    }
    const pre_entry *e = find_pre(pre.ptr, (size_t)pre.len);
    if (!e)
        return em_err_set(err, EM_EUNSUPPORTED,
                          "%s: unknown pre-tokenizer '%.*s' (tokenizer.ggml.pre)", path,
                          (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
    snprintf(t->pre, sizeof t->pre, "%.*s", (int)pre.len, pre.ptr);
    t->ignore_merges = (e->flags & PRE_IGNORE_MERGES) != 0;
    if (e->flags & PRE_ADD_BOS)
        t->add_bos = 1;
    if (e->flags & PRE_NO_BOS)
        t->bos = -1;

    for (int i = 0; i < EM_TOKENIZER_MAX_REGEX && e->re[i]; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)e->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ecode,
                                       &eoff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ecode, msg, sizeof msg);
            return em_err_set(err, EM_EUNSUPPORTED,
                              "%s: pre-tokenizer '%s': regex %d does not compile at %zu: %s",
                              path, t->pre, i, (size_t)eoff, (const char *)msg);
        }
        t->regex[t->n_regex++] = re;
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  /* the interpreter is the fallback */
    }
    return load_merges(t, g, err);
}

void em_tokenizer_bpe_free(em_tokenizer *t)
{
    for (int i = 0; i < t->n_regex; i++)
        pcre2_code_free(t->regex[i]);
    t->n_regex = 0;
    free(t->merges);
    free(t->merge_off);
    free(t->merge_split);
    free(t->merge_map);
}

/* ---- encoding ------------------------------------------------------------- */

/* Pieces as [start, end) byte pairs of the subject. */
typedef struct {
    size_t *v;
    size_t  n, cap;   /* n counts pairs */
} segs;

static int seg_push(segs *s, size_t a, size_t b)
{
    if (a >= b)
        return 0;
    if (em_grow((void **)&s->v, &s->cap, s->n, 2 * sizeof *s->v, 64))   /* (a, b) pairs */
        return EM_ENOMEM;
    s->v[2 * s->n] = a;
    s->v[2 * s->n + 1] = b;
    s->n++;
    return 0;
}

static int regex_split(const em_tokenizer *t, const pcre2_code *re, pcre2_match_data *md,
                       const char *subj, const segs *in, segs *out, em_err *err)
{
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        size_t a = in->v[2 * k], n = in->v[2 * k + 1] - a;
        PCRE2_SPTR base = (PCRE2_SPTR)(subj + a);
        size_t pos = 0, last = 0;
        uint32_t opts = 0;
        while (pos < n) {
            int rc = pcre2_match(re, base, n, pos, opts | PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(re, base, n, pos, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return em_err_set(err, rc == PCRE2_ERROR_NOMEMORY ? EM_ENOMEM : EM_EINVAL,
                                  "tokenize: pre-tokenizer '%s' failed: %s", t->pre,
                                  (const char *)msg);
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (ms < last || me < ms || me > n)   /* \K tricks: not in our patterns */
                break;
            if (seg_push(out, a + last, a + ms) || seg_push(out, a + ms, a + me))
                return em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            last = me;
            pos = me;
            /* an empty match splits; the next search may not end empty here */
            opts = me == ms ? PCRE2_NOTEMPTY_ATSTART : 0;
        }
        if (seg_push(out, a + last, a + n))
            return em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
    }
    return 0;
}

/* Scratch buffers of one encode call. */
typedef struct {
    char              *word;
    size_t             word_cap;
    em_tokenizer_sym  *sym;
    size_t             sym_cap;
    em_tokenizer_heap  heap;
} scratch;

static int add_bigram(const em_tokenizer *t, scratch *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const em_tokenizer_sym *a = &s->sym[l], *b = &s->sym[r];
    int32_t rank = merge_rank(t, s->word + a->off, a->n, s->word + b->off, b->n);
    if (rank < 0)
        return 0;
    em_tokenizer_bigram bg = { -(double)rank, l, r, a->n + b->n };
    return em_tokenizer_heap_push(&s->heap, bg);
}

/* Push the id of a finished symbol; characters outside the vocabulary fall
 * back to one id each: the unknown token, or EM_EFORMAT when there is none
 * (dropping the character would tokenize a different text without a word). */
static int emit_symbol(const em_tokenizer *t, const char *p, size_t n, em_tokenizer_ids *out)
{
    int32_t id = em_tokenizer_lookup(t, p, n);
    if (id >= 0)
        return em_tokenizer_ids_push(out, id);
    for (size_t i = 0; i < n;) {
        size_t cl = em_tokenizer_utf8_len((uint8_t)p[i]);
        if (cl > n - i)
            cl = n - i;
        id = em_tokenizer_lookup(t, p + i, cl);
        if (id < 0)
            id = t->unk;
        if (id < 0)
            return EM_EFORMAT;
        if (em_tokenizer_ids_push(out, id))
            return EM_ENOMEM;
        i += cl;
    }
    return 0;
}

/* Byte-encode one pre-token and merge it. */
static int encode_word(const em_tokenizer *t, scratch *s, const uint8_t *src, size_t len,
                       em_tokenizer_ids *out)
{
    if (2 * len > s->word_cap) {
        char *w = realloc(s->word, 2 * len);
        if (!w)
            return EM_ENOMEM;
        s->word = w;
        s->word_cap = 2 * len;
    }
    size_t wn = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = byte_to_cp(src[i]);
        if (cp < 0x80) {
            s->word[wn++] = (char)cp;
        } else {
            s->word[wn++] = (char)(0xC0 | (cp >> 6));
            s->word[wn++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    if (t->ignore_merges) {
        int32_t id = em_tokenizer_lookup(t, s->word, wn);
        if (id >= 0)
            return em_tokenizer_ids_push(out, id);
    }
    if (len > s->sym_cap) {
        em_tokenizer_sym *v = realloc(s->sym, len * sizeof *v);
        if (!v)
            return EM_ENOMEM;
        s->sym = v;
        s->sym_cap = len;
    }
    int32_t n = 0;
    for (size_t off = 0; off < wn; n++) {
        size_t cl = em_tokenizer_utf8_len((uint8_t)s->word[off]);
        s->sym[n] = (em_tokenizer_sym){ (uint32_t)off, (uint32_t)cl, n - 1, -1 };
        if (n > 0)
            s->sym[n - 1].next = n;
        off += cl;
    }
    s->heap.n = 0;
    for (int32_t i = 1; i < n; i++)
        if (add_bigram(t, s, i - 1, i))
            return EM_ENOMEM;
    em_tokenizer_bigram bg;
    while (em_tokenizer_heap_pop(&s->heap, &bg)) {
        em_tokenizer_sym *l = &s->sym[bg.left], *r = &s->sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue;   /* stale: a neighbour was merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = bg.left;
        if (add_bigram(t, s, l->prev, bg.left) || add_bigram(t, s, bg.left, l->next))
            return EM_ENOMEM;
    }
    for (int32_t i = 0; i >= 0 && i < n; i = s->sym[i].next) {
        int rc = emit_symbol(t, s->word + s->sym[i].off, s->sym[i].n, out);
        if (rc)
            return rc;
    }
    return 0;
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 if it is not one. */
static size_t utf8_ok(const uint8_t *s, size_t n)
{
    int r = em_tokenizer_utf8_step(s, n);
    return r > 0 ? (size_t)r : 0;
}

int em_tokenizer_bpe_encode(const em_tokenizer *t, const char *text, size_t len,
                            em_tokenizer_ids *out, em_err *err)
{
    const uint8_t *u = (const uint8_t *)text;
    char *clean = NULL;            /* valid UTF-8 copy for PCRE2 when text is not */
    size_t *orig = NULL;           /* clean offset -> text offset */
    const char *subj = text;
    segs a = { 0 }, b = { 0 };
    scratch s = { 0 };
    pcre2_match_data *md = NULL;
    int rc = 0;

    size_t i = 0;
    while (i < len) {
        size_t l = utf8_ok(u + i, len - i);
        if (!l)
            break;
        i += l;
    }
    if (i < len) {
        /* Each ill-formed byte is split like U+FFFD (as llama.cpp does), but
         * keeps its own bytes: text round-trips. */
        clean = malloc(3 * len + 1);
        orig = malloc((3 * len + 1) * sizeof *orig);
        if (!clean || !orig) {
            rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            goto cleanup;
        }
        size_t w = 0;
        for (i = 0; i < len;) {
            size_t l = utf8_ok(u + i, len - i);
            if (l) {
                for (size_t k = 0; k < l; k++) {
                    orig[w] = i;
                    clean[w++] = text[i + k];
                }
                i += l;
            } else {
                orig[w] = i;
                memcpy(clean + w, "\xEF\xBF\xBD", 3);
                w += 3;
                i++;
            }
        }
        orig[w] = len;
        subj = clean;
        if (seg_push(&a, 0, w)) {
            rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            goto cleanup;
        }
    } else if (seg_push(&a, 0, len)) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }

    md = pcre2_match_data_create(1, NULL);
    if (!md) {
        rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
        goto cleanup;
    }
    for (int r = 0; r < t->n_regex; r++) {
        rc = regex_split(t, t->regex[r], md, subj, &a, &b, err);
        if (rc)
            goto cleanup;
        segs tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t k = 0; k < a.n; k++) {
        size_t s0 = a.v[2 * k], s1 = a.v[2 * k + 1];
        if (orig) {
            s0 = orig[s0];
            s1 = orig[s1];
        }
        int wrc = encode_word(t, &s, u + s0, s1 - s0, out);
        if (wrc == EM_EFORMAT) {
            rc = em_err_set(err, EM_EFORMAT,
                            "tokenize: the vocabulary has no token for a character in bytes %zu..%zu of the "
                            "text and no unknown token to stand for it", s0, s1);
            goto cleanup;
        }
        if (wrc) {
            rc = em_err_set(err, EM_ENOMEM, "tokenize: out of memory");
            goto cleanup;
        }
    }

cleanup:
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    free(s.word);
    free(s.sym);
    free(s.heap.v);
    free(clean);
    free(orig);
    return rc;
}
