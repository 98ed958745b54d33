/* tokenizer.h — text <-> token ids, built from GGUF tokenizer metadata.
 *
 * Supports SentencePiece-style vocabularies (tokenizer.ggml.model = "llama":
 * score-driven merges, <0xXX> byte fallback, leading-space rule),
 * byte-level BPE ("gpt2": merges by rank, pre-tokenizer chosen by
 * tokenizer.ggml.pre) and BERT's WordPiece ("bert": BERT's normalizer for
 * uncased vocabularies, i.e. lower-case, accents stripped, CJK and
 * punctuation split, then greedy longest-match-first pieces; see
 * tokenizer_wpm.c). For WordPiece, BOS is [CLS] and EOS is [SEP], both
 * added by default (a [CLS] text [SEP] sequence, as BERT is trained; a
 * reranker's pair puts another [SEP] between); [SEP] counts as end of
 * generation, which an encoder never does. An em_tokenizer copies
 * everything it needs out of the em_gguf: the gguf may be closed afterwards.
 * An em_tokenizer is immutable after creation and safe to use from several
 * threads at once. */
#ifndef EM_TOKENIZER_H
#define EM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/model/gguf.h"

typedef struct em_tokenizer em_tokenizer;

/* Build from metadata (borrowed g). On success *out is the caller's, freed
 * with em_tokenizer_destroy. EM_EUNSUPPORTED for an unknown model or
 * pre-tokenizer, EM_EFORMAT for inconsistent metadata (array lengths, ids out
 * of range, unparseable merges); err names the file. */
int  em_tokenizer_create(const em_gguf *g, em_tokenizer **out, em_err *err);
void em_tokenizer_destroy(em_tokenizer *t);   /* accepts NULL */

uint32_t em_tokenizer_n_vocab(const em_tokenizer *t);
int32_t  em_tokenizer_bos(const em_tokenizer *t);   /* -1 if none */
int32_t  em_tokenizer_eos(const em_tokenizer *t);   /* -1 if none */
int32_t  em_tokenizer_eot(const em_tokenizer *t);   /* -1 if none */
int      em_tokenizer_add_bos(const em_tokenizer *t); /* metadata default */
int      em_tokenizer_add_eos(const em_tokenizer *t);
/* 1 if generating this id ends a sequence (EOS, EOT, other end-of-generation ids). */
int      em_tokenizer_is_eog(const em_tokenizer *t, int32_t id);
/* A harmony vocabulary (gpt-oss: <|return|>, <|call|> and <|end|>): <|end|>
 * closes a message, not the generation, and the markers <|start|>,
 * <|channel|>, <|message|>, <|constrain|> and <|end|> decode to their text
 * (core/text/harmony.h splits the channels). */
int      em_tokenizer_harmony(const em_tokenizer *t);
/* 1 if id is a control/special token (control, unknown or unused type: not
 * rendered as text). */
int      em_tokenizer_is_special(const em_tokenizer *t, int32_t id);
/* Control tokens (not end-of-generation ones) whose vocabulary text occurs
 * in text (NUL-terminated, borrowed) decode to that text from now on, as the
 * chat template writes them (a tool call's markers: "[TOOL_CALLS]"):
 * em_detok_push and em_tokenizer_piece give the text, em_tokenizer_is_special
 * says 0 (so a grammar may allow them). Tokenizing is unchanged (they are
 * still cut out of text only with parse_special). Returns how many were
 * newly shown. Changes t: call before t is shared between threads. */
size_t   em_tokenizer_show(em_tokenizer *t, const char *text);
/* The vocabulary string of an id as stored (e.g. "▁the", "<0x0A>"), owned by
 * t and valid until it is destroyed; NULL if out of range. */
const char *em_tokenizer_token_text(const em_tokenizer *t, int32_t id);
/* Find an id by its exact vocabulary string (borrowed, NUL-terminated); -1 if absent. */
int32_t  em_tokenizer_find(const em_tokenizer *t, const char *text);
/* No token stands for more bytes of input text than this (the longest
 * vocabulary string: SPM's "▁" and byte-level BPE's byte characters are never
 * shorter than what they stand for), so a text of N bytes takes at least
 * N / this tokens — a bound that refuses a prompt too long for the context
 * before it is tokenized. At least 1. WordPiece has no such bound (it drops
 * whitespace and control characters, and a word of any length may be one
 * [UNK]): it answers 2^28, the longest text em_tokenizer_encode accepts, so
 * the bound refuses nothing. */
size_t   em_tokenizer_max_token_bytes(const em_tokenizer *t);

/* Tokenize len bytes of text (borrowed; any bytes, need not be valid UTF-8
 * nor NUL-terminated). With add_special, BOS/EOS are added as the metadata
 * flags say (add_bos/add_eos). With parse_special, special-token strings in
 * the text ("<|im_start|>") become their ids; otherwise they are tokenized as
 * plain text. User-defined tokens (token type 4) are always matched, as
 * llama.cpp does. *ids is malloc'd (caller frees; never NULL on success, even
 * for 0 ids), *n_ids its length. */
int em_tokenizer_encode(const em_tokenizer *t, const char *text, size_t len,
                        int add_special, int parse_special,
                        int32_t **ids, size_t *n_ids, em_err *err);

/* Bytes that one token stands for, after undoing the vocabulary's encoding
 * (▁ -> space, <0xXX> -> byte, byte-level BPE unicode -> bytes; WordPiece:
 * "▁word" -> " word", a continuation piece as it is, so that decoding gives
 * the normalized words separated by spaces: "hello , world !"). Special
 * tokens render as empty unless render_special. Writes at most cap bytes to
 * out (caller-owned; may be NULL when cap is 0) and returns the full length
 * (like snprintf, without a NUL); returns EM_ERANGE for an id out of range. */
int em_tokenizer_piece(const em_tokenizer *t, int32_t id, int render_special,
                       char *out, size_t cap);

/* Streaming decoder: feed ids one at a time, get text that never ends in the
 * middle of a UTF-8 character. Invalid UTF-8 that can never complete is
 * flushed as U+FFFD. When the stream starts at the beginning of a sequence
 * (at_start), the leading space that SPM vocabularies add to the first word is
 * dropped, as SentencePiece does (WordPiece: the space of the first word's
 * "▁"); a stream that continues a sequence (text
 * generated after a prompt) keeps it. BOS and other special tokens produce no
 * text and do not count as the first word. */
typedef struct {
    uint8_t pending[8];
    int     n_pending;
    int     started;        /* 1 once text was emitted (or at_start was 0) */
} em_detok;

/* The smallest cap that em_detok_push/em_detok_flush always accept for this
 * vocabulary (for real vocabularies at most 64 + the longest token). */
size_t em_tokenizer_detok_cap(const em_tokenizer *t);

/* d is caller-owned (stack or struct member); no destroy needed. */
void em_detok_init(em_detok *d, int at_start);
/* Writes the text completed by id to out (cap bytes, NUL-terminated; out is
 * overwritten, not appended to) and returns the number of bytes written
 * (excluding NUL), or a negative code: EM_ERANGE for an id out of range,
 * EM_EINVAL if the text does not fit in cap (never when cap >=
 * em_tokenizer_detok_cap(t)); on error d is unchanged. */
int em_detok_push(const em_tokenizer *t, em_detok *d, int32_t id, char *out, size_t cap);
/* Flushes bytes still pending at the end of a stream (as U+FFFD); same out
 * convention. */
int em_detok_flush(const em_tokenizer *t, em_detok *d, char *out, size_t cap);

/* Decode a whole sequence (from its start: at_start rules apply) into a
 * malloc'd NUL-terminated string (caller frees). EM_ERANGE for an id out of
 * range. */
int em_tokenizer_decode(const em_tokenizer *t, const int32_t *ids, size_t n,
                        char **text, em_err *err);

#endif
