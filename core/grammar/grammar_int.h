/* grammar_int.h — what the files of core/grammar share: the compiled
 * grammar's flat program (grammar_parse.c writes it, grammar_match.c walks
 * it), the matcher's interned stacks (grammar_match.c, grammar_mask.c), the
 * text builder and the regex translator (grammar_regex.c, json_schema.c). */
#ifndef EM_GRAMMAR_INT_H
#define EM_GRAMMAR_INT_H

#include <stdint.h>
#include <stddef.h>

#include "core/grammar/grammar.h"

/* ---- the compiled grammar ------------------------------------------------
 * elems is one array of 32-bit elements: the alternatives of every rule, each
 * a sequence ending in EG_END. An element is EG_CHAR (arg: a code point set)
 * or EG_RULE (arg: a rule id). alts[a] is the position of alternative a's
 * first element; rule r's alternatives are alts[rules[r].first_alt ..
 * + n_alts). Code point sets are sorted disjoint inclusive ranges, with a
 * bitmap of their ASCII part. */
#define EG_END   0u
#define EG_CHAR  1u
#define EG_RULE  2u
#define EG_TYPE(e) ((e) >> 28)
#define EG_ARG(e)  ((e) & 0x0fffffffu)
#define EG_MK(t, a) (((uint32_t)(t) << 28) | (uint32_t)(a))

typedef struct { uint32_t lo, hi; } eg_range;
typedef struct { uint32_t first, n; uint64_t ascii[2]; } eg_cset;
typedef struct { uint32_t first_alt, n_alts; } eg_rule;

struct em_grammar {
    uint32_t *elems;  uint32_t n_elems;
    uint32_t *alts;   uint32_t n_alts;
    eg_rule  *rules;  uint32_t n_rules;
    eg_cset  *csets;  uint32_t n_csets;
    eg_range *ranges; uint32_t n_ranges;
    uint32_t  root;
};

/* 1 when set cs holds some code point in [lo, hi]. */
int eg_cset_meets(const em_grammar *g, uint32_t cs, uint32_t lo, uint32_t hi);

/* 1 when code point cp is in set cs. */
static inline int eg_cset_has(const em_grammar *g, uint32_t cs, uint32_t cp)
{
    const eg_cset *c = &g->csets[cs];
    if (cp < 128)
        return (int)((c->ascii[cp >> 6] >> (cp & 63)) & 1);
    return eg_cset_meets(g, cs, cp, cp);
}

/* Sort and merge r[0..n) in place (complemented over U+0000..U+10FFFF when
 * negate; r then needs room for n + 1); returns the new count. */
size_t eg_ranges_normalize(eg_range *r, size_t n, int negate);

/* ---- compile-time checks (grammar_check.c) --------------------------------
 * What the parser knows of the source, to name places in messages; the
 * arrays belong to the parser. */
typedef struct {
    const char        *src;
    size_t             len;
    uint32_t          *elem_src;   /* [n_elems] source offset of each element */
    uint32_t          *alt_rule;   /* [n_alts] the rule each alternative is of */
    uint32_t          *def_off;    /* [n_rules] a rule's definition (generated:
                                    * where its group or repetition stands) */
    const char       **names;      /* [n_rules] NULL for a generated rule */
    uint32_t          *name_len;   /* [n_rules] */
} eg_src_map;

/* Line and column (in characters) of byte offset off of s[0..len). */
void eg_line_col(const char *s, size_t len, size_t off, unsigned *line, unsigned *col);
/* "grammar:LINE:COL: <fmt...>" for offset off of src into err; returns code. */
int eg_fail_at(const char *src, size_t len, size_t off, em_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* 0 when g can run: every reachable rule can finish and no left recursion
 * grows the stack; otherwise EM_EFORMAT (EM_ENOMEM) with the place in err. */
int eg_grammar_check(const em_grammar *g, const eg_src_map *map, em_err *err);

/* ---- the matcher ---------------------------------------------------------
 * A parse stack is a node of a persistent linked list (pos: the position of
 * the element to match next, parent: the rest), interned so that one stack
 * has one id: node 0 is the empty stack (the grammar is complete). Every
 * stack in a set has an EG_CHAR element on top, or is node 0. Sets of stacks
 * are interned too (sorted ids; set 0 means "rejected"), and the step from a
 * set by one byte is memoized, so the mask walk of a vocabulary trie costs a
 * hash lookup per trie node once the transitions are known. The arena only
 * grows while a matcher is in use; when it is large, the next call rebuilds
 * it from the current state alone. A partial UTF-8 character is an
 * encoded word: bits 0-20 the value so far, 21-22 the bytes still due,
 * 23-24 the character's length - 1 (0: none pending). */
#define EG_LIMIT UINT32_MAX   /* a step refused by a run-time limit */

typedef struct { uint32_t pos, parent, depth; } eg_node;
typedef struct { uint32_t off, n; } eg_set;

struct em_gmatch {
    const em_grammar *g;
    eg_node  *nodes;    size_t n_nodes, cap_nodes;
    uint32_t *mark;     size_t cap_mark;           /* [cap_nodes] visit stamps */
    uint32_t  gen;
    uint32_t *node_tab; size_t node_tab_cap;       /* node id, 0 = empty slot */
    uint32_t *pool;     size_t n_pool, cap_pool;   /* members of every set */
    eg_set   *sets;     size_t n_sets, cap_sets;   /* [0] unused */
    uint32_t *set_tab;  size_t set_tab_cap;
    uint64_t *memo_key; uint32_t *memo_val; size_t n_memo, memo_cap;
    uint32_t *work;     size_t cap_work;
    uint32_t *out;      size_t n_out, cap_out;
    uint32_t  cur;      /* the current set (>= 1) */
    uint32_t  partial;  /* the current partial character */
};

/* The state after one more byte from (set, partial): the new set (the same
 * set while a character is incomplete), 0 when the byte is not allowed,
 * EG_LIMIT when a limit refused it; *partial_out is the new partial. */
uint32_t eg_step(em_gmatch *m, uint32_t set, uint32_t partial, uint8_t byte, uint32_t *partial_out);
/* Rebuild the arena around the current state when it has grown large
 * (call between operations only). EM_ENOMEM leaves m as it was. */
int eg_maybe_compact(em_gmatch *m);
/* The current state as a canonical key (independent of this arena's ids):
 * the stacks sorted by content, then the partial character. *key is
 * malloc'd (caller frees), *n its length in words. */
int eg_state_key(const em_gmatch *m, uint32_t **key, size_t *n);

/* ---- growable text (grammar_regex.c) ------------------------------------- */

typedef struct {
    char  *s;
    size_t len, cap;
    int    oom;        /* set once an append failed; the text is then unusable */
} eg_sb;

void eg_sb_put(eg_sb *b, const char *s, size_t n);
void eg_sb_puts(eg_sb *b, const char *s);
void eg_sb_printf(eg_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append code point cp as a GBNF string-literal or class character: plain
 * when printable ASCII that needs no escape, \xHH / \uHHHH / \UHHHHHHHH
 * otherwise. in_class also escapes ] [ - ^. */
void eg_sb_gbnf_char(eg_sb *b, uint32_t cp, int in_class);
/* Append bytes as one GBNF string literal "..." (valid UTF-8 expected;
 * invalid bytes are written as \xHH, i.e. as the code point of that value). */
void eg_sb_gbnf_literal(eg_sb *b, const char *s, size_t n);

/* ---- regex translation (grammar_regex.c) ---------------------------------
 * Translate re into GBNF rules appended to out: the rule named `name`
 * matches what re matches in full. Further rules it needs are named
 * name-N. With json, the expression constrains a decoded JSON string and the
 * rules match its JSON-encoded text (without the quotes): " and \ appear as
 * \" and \\, control characters as their escapes. what names the expression
 * in error messages ("pattern at #/properties/id"). */
int eg_regex_emit(const char *re, size_t len, const char *name, int json,
                  const char *what, eg_sb *out, em_err *err);

#endif
