/* tokenizer_int.h — private to the tokenizer module: the em_tokenizer struct
 * and the helpers that tokenizer.c (vocabulary, special tokens, SPM,
 * decoding), tokenizer_bpe.c (byte-level BPE: pre-tokenizer regexes,
 * merges), tokenizer_wpm.c (BERT's WordPiece) and tokenizer_wpm_ucd.c (its
 * Unicode tables) share. Nothing outside core/tokenizer*.c includes this. */
#ifndef EM_TOKENIZER_INT_H
#define EM_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/model/gguf.h"
#include "core/text/tokenizer.h"

/* tokenizer.ggml.token_type values (gguf-py's TokenType). */
enum {
    EM_TOKT_UNDEFINED = 0,
    EM_TOKT_NORMAL    = 1,
    EM_TOKT_UNKNOWN   = 2,
    EM_TOKT_CONTROL   = 3,
    EM_TOKT_USER      = 4,   /* user-defined: matched in raw text, rendered as is */
    EM_TOKT_UNUSED    = 5,
    EM_TOKT_BYTE      = 6,   /* SPM "<0xXX>" byte fallback */
};

enum { EM_TOKENIZER_SPM = 1, EM_TOKENIZER_BPE = 2, EM_TOKENIZER_WPM = 3 };

#define EM_TOKENIZER_MAX_REGEX 6
#define EM_TOKENIZER_FNV_SEED  1469598103934665603ULL
/* Longest input em_tokenizer_encode accepts (symbol indices are int32). */
#define EM_TOKENIZER_MAX_TEXT  ((size_t)1 << 28)

typedef struct {
    uint32_t text_off, text_len;    /* vocabulary string in t->text (NUL-terminated there) */
    uint32_t piece_off, piece_len;  /* decoded bytes in t->pieces */
    float    score;                 /* SPM merge priority */
    uint8_t  type;                  /* EM_TOKT_* (EOG tokens promoted to CONTROL) */
    uint8_t  eog;                   /* 1: ends generation */
    uint8_t  shown;                 /* a control token that decodes to its text (em_tokenizer_show) */
} em_tokenizer_tok;

/* One special text: the lowest id with it among all special tokens and
 * among the user-defined ones (-1: none), its rolling hash and length. */
typedef struct {
    uint64_t h;
    uint32_t len;
    int32_t  id_all, id_user;
} em_tokenizer_special;

struct em_tokenizer {
    int       kind;                 /* EM_TOKENIZER_SPM / _BPE / _WPM */
    uint32_t  n_vocab;
    em_tokenizer_tok *toks;         /* [n_vocab] */
    char     *text;                 /* all vocabulary strings, NUL-separated */
    char     *pieces;               /* all decoded pieces, back to back */
    int32_t  *map;                  /* open addressing: string -> id; -1 = empty */
    uint32_t  map_mask;             /* capacity - 1 (power of two) */
    size_t    max_token_len;        /* longest vocabulary string or piece */
    size_t    detok_cap;            /* see em_tokenizer_detok_cap() */

    int32_t   bos, eos, eot, eom, unk;   /* -1 when absent (WordPiece: bos = [CLS], eos = [SEP]) */
    int       add_bos, add_eos, add_space_prefix;
    int       harmony;   /* an o200k_harmony vocabulary (gpt-oss): read_specials */

    int32_t   byte_tok[256];        /* SPM byte fallback ids; -1 when impossible */
    /* special texts (CONTROL/USER/UNKNOWN ids with text), for cutting them
     * out of the input: an open-addressing table of their texts by rolling
     * hash (tokenizer.c, partition), and their distinct text lengths,
     * longest first, for [0] user-defined tokens and [1] all of them */
    em_tokenizer_special *sp_tab;
    uint32_t  sp_mask;              /* capacity - 1 (power of two) */
    uint64_t  sp_base;              /* of the rolling hash, random */
    uint32_t *sp_lens[2];
    uint32_t  sp_n_lens[2];

    /* byte-level BPE */
    char     *merges;               /* "left right" strings back to back */
    uint32_t *merge_off;            /* [n_merges + 1] offsets into merges */
    uint32_t *merge_split;          /* [n_merges] length of the left part */
    uint32_t  n_merges;
    int32_t  *merge_map;            /* open addressing: (left, right) -> rank */
    uint32_t  merge_mask;
    int       ignore_merges;        /* a pre-token that is a whole token is kept whole */
    int       n_regex;
    pcre2_code *regex[EM_TOKENIZER_MAX_REGEX];
    char      pre[64];              /* tokenizer.ggml.pre, for messages */
};

/* A growable id vector (malloc'd v). */
typedef struct {
    int32_t *v;
    size_t   n, cap;
} em_tokenizer_ids;

int em_tokenizer_ids_push(em_tokenizer_ids *v, int32_t id);

/* One symbol of a merge session: bytes [off, off + n) of the work string,
 * linked to its neighbours (-1 at the ends); n == 0 once merged away. */
typedef struct {
    uint32_t off, n;
    int32_t  prev, next;
} em_tokenizer_sym;

/* A candidate merge of two adjacent symbols. Higher prio pops first, ties by
 * the leftmost position (SPM: prio = score of the merged token; BPE: prio =
 * -rank). size is the merged length when queued: a mismatch later means a
 * neighbour changed and the candidate is stale. */
typedef struct {
    double   prio;
    int32_t  left, right;
    uint32_t size;
} em_tokenizer_bigram;

typedef struct {
    em_tokenizer_bigram *v;
    size_t n, cap;
} em_tokenizer_heap;

int  em_tokenizer_heap_push(em_tokenizer_heap *h, em_tokenizer_bigram b);
int  em_tokenizer_heap_pop(em_tokenizer_heap *h, em_tokenizer_bigram *out); /* 0 when empty */

/* FNV-1a over n bytes, continuing from h. */
uint64_t em_tokenizer_hash(const void *p, size_t n, uint64_t h);
/* Id of the vocabulary string s[0..n), or -1. */
int32_t  em_tokenizer_lookup(const em_tokenizer *t, const char *s, size_t n);
/* Length of the UTF-8 sequence that lead byte c starts (1 for stray bytes). */
size_t   em_tokenizer_utf8_len(uint8_t c);
/* At s[0..n) (n > 0): > 0: a complete well-formed UTF-8 sequence of that
 * length; 0: a well-formed prefix cut short by the end; < 0: minus the length
 * of the maximal ill-formed subpart (which decodes as one U+FFFD). */
int      em_tokenizer_utf8_step(const uint8_t *s, size_t n);

/* tokenizer_bpe.c: read merges and tokenizer.ggml.pre, compile the
 * pre-tokenizer (sets regex, ignore_merges, and the add_bos/bos defaults the
 * pre-tokenizer implies). Errors name the file. */
int  em_tokenizer_bpe_init(em_tokenizer *t, const em_gguf *g, em_err *err);
void em_tokenizer_bpe_free(em_tokenizer *t);
/* Tokenize raw text (no special tokens in it) and append the ids to out. */
int  em_tokenizer_bpe_encode(const em_tokenizer *t, const char *text, size_t len,
                             em_tokenizer_ids *out, em_err *err);
/* Undo the GPT-2 byte-to-unicode mapping of a vocabulary string: writes at
 * most n bytes to out (never more than the input length) and returns the
 * count. Characters outside the mapping are copied unchanged. */
size_t em_tokenizer_bpe_unmap(const char *s, size_t n, char *out);

/* An optional token id key (tokenizer.c): absent leaves *id as it is;
 * negative or 0xFFFFFFFF means none (-1); past the vocabulary is an error. */
int  em_tokenizer_read_id(const em_gguf *g, const char *key, const em_tokenizer *t, int32_t *id,
                          em_err *err);

/* tokenizer_wpm.c: BERT's special tokens ([CLS] as BOS and [SEP] as EOS,
 * both added by default; [UNK]) from tokenizer.ggml.cls_token_id,
 * .seperator_token_id (llama.cpp's spelling) and .unknown_token_id, else by
 * their texts. Call after the vocabulary is loaded, before the generic
 * special-token keys (which may override). */
int  em_tokenizer_wpm_init(em_tokenizer *t, const em_gguf *g, em_err *err);
/* Normalize raw text (no special tokens in it) as BERT does and append the
 * WordPiece ids of each word to out. */
int  em_tokenizer_wpm_encode(const em_tokenizer *t, const char *text, size_t len,
                             em_tokenizer_ids *out, em_err *err);

/* tokenizer_wpm_ucd.c (generated by tokenizer_wpm_gen.py from Python's
 * unicodedata): the Unicode that BERT's normalizer needs. Classes: SPACE
 * (\t \n \r, Zs, U+2028/9), OTHER (every C* category: control, format,
 * surrogate, private use, unassigned), PUNCT (P* categories and the ASCII
 * non-alphanumeric symbols, as BERT's _is_punctuation), MN (non-spacing
 * marks), PLAIN (the rest). */
enum { EM_UCD_PLAIN = 0, EM_UCD_SPACE, EM_UCD_OTHER, EM_UCD_PUNCT, EM_UCD_MN };
int      em_tokenizer_ucd_class(uint32_t cp);
/* Simple (one-to-one) lower-case mapping; cp itself when there is none. */
uint32_t em_tokenizer_ucd_lower(uint32_t cp);
/* The canonical decomposition (NFD) of cp with its non-spacing marks
 * dropped: writes 0..3 code points to out and returns the count (0 for a
 * mark itself). */
size_t   em_tokenizer_ucd_strip(uint32_t cp, uint32_t out[3]);

#endif
