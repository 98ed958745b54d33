/* grammar.h — structured output: GBNF grammars (llama.cpp's syntax) compiled
 * into a pushdown matcher over Unicode code points, fed UTF-8 bytes, and the
 * token masks that keep a sampler inside the grammar (docs/grammar.md).
 *
 * Four objects, each with a create/destroy pair:
 *   em_grammar  a compiled grammar; immutable, safe to share between threads
 *               and requests. It must outlive every em_gmatch and em_gcache
 *               made from it.
 *   em_gmatch   where one generation stands in the grammar: a deduplicated
 *               set of parse stacks plus a partial UTF-8 character. One per
 *               sequence; not thread-safe (one thread at a time).
 *   em_gvocab   a vocabulary's token bytes organised as a byte trie; built
 *               once per vocabulary, immutable, shareable between threads.
 *               core/grammar knows nothing of the tokenizer: the caller
 *               hands it each token's decoded bytes (SentencePiece "▁"
 *               already turned into a space, <0xXX> into its byte).
 *   em_gcache   token masks by matcher state for one (grammar, vocabulary)
 *               pair, shared by every request using that grammar;
 *               mutex-guarded, bounded, least recently used entry evicted.
 *
 * Bad input never crashes: every limit below is checked, and a grammar that
 * exceeds one is refused at compile time with "grammar:LINE:COL: ...". */
#ifndef EM_GRAMMAR_H
#define EM_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Compile-time limits (refused with EM_ERANGE before anything runs). */
#define EM_GRAMMAR_MAX_SRC     (1u << 20)   /* bytes of GBNF source          */
#define EM_GRAMMAR_MAX_RULES   32768u       /* rules, the generated included  */
#define EM_GRAMMAR_MAX_ELEMS   (1u << 20)   /* elements after expansion       */
#define EM_GRAMMAR_MAX_REPEAT  10000u       /* m and n of x{m,n}              */
#define EM_GRAMMAR_MAX_NEST    200u         /* nesting of ( ) groups          */
/* Run-time limits of a matcher: a parse stack deeper than MAX_DEPTH, or a
 * step that would leave more than MAX_STACKS distinct stacks, is refused
 * (the bytes are not allowed; em_gmatch_accept says EM_ERANGE). */
#define EM_GMATCH_MAX_DEPTH    2048u
#define EM_GMATCH_MAX_STACKS   4096u

typedef struct em_grammar em_grammar;
typedef struct em_gmatch  em_gmatch;
typedef struct em_gvocab  em_gvocab;
typedef struct em_gcache  em_gcache;

/* ---- grammars ------------------------------------------------------------ */

/* Compile len bytes of GBNF source (borrowed; need not be NUL-terminated;
 * must be valid UTF-8) with root rule `root` (borrowed, NUL-terminated; NULL
 * means "root"). On success *out is the caller's, freed with
 * em_grammar_destroy. Errors (EM_EFORMAT for syntax and meaning, EM_ERANGE
 * for limits) carry "grammar:LINE:COL: <what>": syntax errors, bad escapes,
 * unterminated strings and classes, rules defined twice, undefined rules, a
 * missing root, a rule that can never finish (no finite string matches it),
 * left recursion (a rule that can reach itself before matching a character
 * with something left to match after it), and exceeded limits. */
int  em_grammar_compile(const char *src, size_t len, const char *root,
                        em_grammar **out, em_err *err);
void em_grammar_destroy(em_grammar *g);   /* accepts NULL */

/* Counts after compilation (rules include the ones groups and repetitions
 * generate; elements are the flat program the matcher walks). */
uint32_t em_grammar_n_rules(const em_grammar *g);
uint32_t em_grammar_n_elems(const em_grammar *g);

/* ---- matching ------------------------------------------------------------ */

/* A matcher at the start of g (borrowed; must outlive the matcher). *out is
 * the caller's, freed with em_gmatch_destroy. */
int  em_gmatch_create(const em_grammar *g, em_gmatch **out, em_err *err);
/* An independent copy of m's current state (m borrowed; *out the caller's). */
int  em_gmatch_clone(const em_gmatch *m, em_gmatch **out, em_err *err);
void em_gmatch_destroy(em_gmatch *m);     /* accepts NULL */

/* Feed n bytes (borrowed). A token may end inside a UTF-8 character: the
 * partial character is kept and completed by the next call. Returns 0 when
 * the grammar allows the bytes; otherwise the state is unchanged and the
 * return is EM_EINVAL (not allowed by the grammar, or not valid UTF-8),
 * EM_ERANGE (a run-time limit above refused it) or EM_ENOMEM. n == 0 is a
 * no-op that returns 0. */
int  em_gmatch_accept(em_gmatch *m, const char *bytes, size_t n);
/* 1 when the text so far is a complete match (no partial character): the
 * end of generation is allowed here. */
int  em_gmatch_can_end(const em_gmatch *m);
/* 1 when complete and nothing more can follow: only the end remains. */
int  em_gmatch_done(const em_gmatch *m);
/* Number of parse stacks in the current state (for tests and metrics). */
uint32_t em_gmatch_n_stacks(const em_gmatch *m);

/* ---- vocabularies and token masks ---------------------------------------- */

enum {
    EM_GTOK_SPECIAL = 1u << 0,  /* control/special token: never allowed ...   */
    EM_GTOK_EOG     = 1u << 1,  /* ... except an end-of-generation token, which
                                 * is allowed exactly when em_gmatch_can_end */
};

typedef struct {
    const char *bytes;   /* the token's decoded bytes (borrowed for the call) */
    uint32_t    len;
    uint32_t    flags;   /* EM_GTOK_* */
} em_gvocab_token;

/* Build the trie of n_vocab tokens (toks borrowed; the bytes are copied).
 * Tokens with no bytes are never allowed (an empty token would let a
 * sequence stall), unless they are EOG tokens. *out the caller's. */
int  em_gvocab_create(const em_gvocab_token *toks, uint32_t n_vocab,
                      em_gvocab **out, em_err *err);
void em_gvocab_destroy(em_gvocab *v);     /* accepts NULL */

/* The vocabulary of tokenizer t (borrowed; core/grammar/grammar_tok.c): each
 * token's decoded bytes (em_tokenizer_piece), control tokens as special,
 * end-of-generation ids as EOG. *out is the caller's. */
struct em_tokenizer;
int  em_gvocab_from_tokenizer(const struct em_tokenizer *t, em_gvocab **out, em_err *err);
uint32_t em_gvocab_n_vocab(const em_gvocab *v);
uint32_t em_gvocab_n_nodes(const em_gvocab *v);   /* trie nodes (root included) */
/* Words a mask needs: (n_vocab + 31) / 32. */
size_t   em_gvocab_mask_words(const em_gvocab *v);

/* Token id's bytes as the vocabulary holds them (v's; valid while v
 * lives) and *len; "" and 0 for a special token or an id out of range. */
const char *em_gvocab_token_bytes(const em_gvocab *v, uint32_t id, uint32_t *len);

/* Feed token id's bytes to m (as em_gmatch_accept). An EOG token is accepted
 * (state unchanged) exactly when em_gmatch_can_end; a special token never
 * (EM_EINVAL); EM_ERANGE for an id out of range. */
int  em_gmatch_accept_token(em_gmatch *m, const em_gvocab *v, uint32_t id);

/* The tokens allowed next: bit i of mask_bits (mask_bits[i / 32] >> (i % 32))
 * is 1 when token i may follow, i.e. when em_gmatch_accept_token(m, v, i)
 * would succeed. mask_bits (caller-owned, em_gvocab_mask_words words) is
 * overwritten. cache (borrowed, may be NULL) must have been made for m's
 * grammar and v (EM_EINVAL otherwise); a state already in it is answered
 * from it. m is not const: it keeps memoized transitions between calls, but
 * its state does not change. */
int  em_gmatch_allowed(em_gmatch *m, const em_gvocab *v, em_gcache *cache,
                       uint32_t *mask_bits, em_err *err);

/* ---- the mask cache ------------------------------------------------------ */

typedef struct {
    uint64_t hits, misses, evictions;
    size_t   entries, bytes;
} em_gcache_stats;

/* A cache of at most max_bytes (masks and keys; at least one entry is always
 * kept) for grammar g and vocabulary v (both borrowed; must outlive it). Safe
 * to use from several threads at once. *out the caller's. */
int  em_gcache_create(const em_grammar *g, const em_gvocab *v, size_t max_bytes,
                      em_gcache **out, em_err *err);
void em_gcache_destroy(em_gcache *c);     /* accepts NULL */
void em_gcache_get_stats(em_gcache *c, em_gcache_stats *st);

/* ---- regular expressions ------------------------------------------------- */

/* Translate a regular expression (len bytes, borrowed) into GBNF text whose
 * rule `root` matches exactly the strings the expression matches in full
 * (^ and $ are allowed at the ends only; without them the match is still of
 * the whole text). Supported: literals, escapes (\n \t \r \f \v \0 \xHH
 * \uHHHH, escaped punctuation), ., classes [...] [^...] with ranges, \d \D
 * \w \W \s \S, groups ( ) (?: ) (?<name> ), alternation, ? * + {m} {m,}
 * {m,n} (lazy forms too: same language). Refused by name: backreferences,
 * lookaround, word boundaries, possessive quantifiers, anchors elsewhere.
 * *gbnf is malloc'd, NUL-terminated (caller frees), *gbnf_len its length. */
int  em_regex_to_gbnf(const char *re, size_t len, char **gbnf, size_t *gbnf_len,
                      em_err *err);

#endif
