/* grammar_parse.c — GBNF source to the flat program of core/grammar/grammar_int.h:
 * the parser (rules, alternatives, groups, literals, classes, repetitions
 * expanded into generated rules), the checks that need the source (undefined
 * rules, a missing root, size limits), and the layout of the program;
 * grammar_check.c then refuses what could not run. Every error says
 * "grammar:LINE:COL: ..." (COL counts characters). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/grammar/grammar_int.h"
#include "core/grow.h"

#define EG_ALT 3u   /* build-time separator between a rule's alternatives */
#define MAX_CP 0x10FFFFu

typedef struct {
    uint32_t *v;       /* elements, EG_ALT between alternatives */
    uint32_t *src;     /* source offset of each element */
    size_t    n, cap, cap_src;
} pbody;

typedef struct {
    const char *name;  /* into the source, or owned (generated rules) */
    uint32_t    name_len;
    int         owned, defined;
    uint32_t    def_off, ref_off;
    pbody       body;
} prule;

typedef struct {
    const char *s;
    size_t      len, pos;
    prule      *rules;
    size_t      n_rules, cap_rules;
    uint32_t   *names;    /* open-addressed: rule index + 1, 0 empty */
    size_t      names_cap;
    eg_range   *ranges;
    size_t      n_ranges, cap_ranges;
    eg_cset    *csets;
    size_t      n_csets, cap_csets;
    uint32_t   *cs_tab;   /* open-addressed: cset index + 1 */
    size_t      cs_cap;
    eg_range   *tmp;      /* a class being built */
    size_t      n_tmp, cap_tmp;
    size_t      n_elems;  /* elements so far, ENDs included (the limit) */
    unsigned    nest;
    em_err     *err;
} gp;

/* ---- errors -------------------------------------------------------------- */

static int fail_at(gp *p, size_t off, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(gp *p, size_t off, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return eg_fail_at(p->s, p->len, off, p->err, code, "%s", msg);
}

static int oom(gp *p)
{
    return em_err_set(p->err, EM_ENOMEM, "grammar: out of memory");
}

/* ---- code point sets ----------------------------------------------------- */

static int cmp_range(const void *a, const void *b)
{
    const eg_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

size_t eg_ranges_normalize(eg_range *r, size_t n, int negate)
{
    qsort(r, n, sizeof *r, cmp_range);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (w > 0 && r[i].lo <= r[w - 1].hi + 1) {
            if (r[i].hi > r[w - 1].hi)
                r[w - 1].hi = r[i].hi;
        } else {
            r[w++] = r[i];
        }
    }
    if (!negate)
        return w;
    /* the gaps, written left to right: gap k (before range k) lands at an
     * index <= k, after range k was read */
    uint32_t next = 0;   /* the first code point not covered so far */
    size_t out = 0;
    for (size_t i = 0; i < w; i++) {
        eg_range cur = r[i];
        if (cur.lo > next)
            r[out++] = (eg_range){ next, cur.lo - 1 };
        next = cur.hi + 1;
    }
    if (next <= MAX_CP)
        r[out++] = (eg_range){ next, MAX_CP };
    return out;
}

static void tmp_normalize(gp *p, int negate)
{
    p->n_tmp = eg_ranges_normalize(p->tmp, p->n_tmp, negate);
}

static int tmp_add(gp *p, uint32_t lo, uint32_t hi)
{
    /* one extra slot is kept for a complement's final range */
    if (em_grow((void **)&p->tmp, &p->cap_tmp, p->n_tmp + 1, sizeof *p->tmp, 16))
        return oom(p);
    p->tmp[p->n_tmp++] = (eg_range){ lo, hi };
    return 0;
}

static uint64_t hash_ranges(const eg_range *r, size_t n)
{
    return XXH3_64bits(r, n * sizeof *r);
}

/* Rebuild the open-addressed table *tab (entries index + 1, 0 empty) at
 * twice its capacity (first when empty) for indexes 0..n-1 that hash() does
 * not skip (it returns 1 for those). */
static int tab_grow(gp *p, uint32_t **tab, size_t *cap, size_t first, size_t n,
                    int (*hash)(const gp *, size_t, uint64_t *))
{
    size_t nc = *cap ? *cap * 2 : first;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t)
        return oom(p);
    for (size_t i = 0; i < n; i++) {
        uint64_t hv;
        if (hash(p, i, &hv))
            continue;
        size_t h = (size_t)hv & (nc - 1);
        while (t[h])
            h = (h + 1) & (nc - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

static int cset_hash(const gp *p, size_t i, uint64_t *h)
{
    *h = hash_ranges(p->ranges + p->csets[i].first, p->csets[i].n);
    return 0;
}

static int cs_rehash(gp *p)
{
    return tab_grow(p, &p->cs_tab, &p->cs_cap, 256, p->n_csets, cset_hash);
}

/* The id of the set tmp[0..n_tmp) (already normalized), made if new. */
static int tmp_intern(gp *p, uint32_t *id)
{
    if ((p->n_csets + 1) * 2 > p->cs_cap && cs_rehash(p))
        return EM_ENOMEM;
    uint64_t hv = hash_ranges(p->tmp, p->n_tmp);
    size_t h = (size_t)hv & (p->cs_cap - 1);
    for (; p->cs_tab[h]; h = (h + 1) & (p->cs_cap - 1)) {
        const eg_cset *c = &p->csets[p->cs_tab[h] - 1];
        if (c->n == p->n_tmp && !memcmp(p->ranges + c->first, p->tmp, p->n_tmp * sizeof *p->tmp)) {
            *id = p->cs_tab[h] - 1;
            return 0;
        }
    }
    if (p->n_ranges + p->n_tmp > EM_GRAMMAR_MAX_ELEMS)
        return fail_at(p, p->pos, EM_ERANGE, "grammar too large: more than %u character ranges",
                       EM_GRAMMAR_MAX_ELEMS);
    for (size_t i = 0; i < p->n_tmp; i++) {
        if (em_grow((void **)&p->ranges, &p->cap_ranges, p->n_ranges, sizeof *p->ranges, 64))
            return oom(p);
        p->ranges[p->n_ranges++] = p->tmp[i];
    }
    if (em_grow((void **)&p->csets, &p->cap_csets, p->n_csets, sizeof *p->csets, 64))
        return oom(p);
    eg_cset *c = &p->csets[p->n_csets];
    c->first = (uint32_t)(p->n_ranges - p->n_tmp);
    c->n = (uint32_t)p->n_tmp;
    c->ascii[0] = c->ascii[1] = 0;
    for (size_t i = 0; i < p->n_tmp; i++)
        for (uint32_t cp = p->tmp[i].lo; cp <= p->tmp[i].hi && cp < 128; cp++)
            c->ascii[cp >> 6] |= 1ull << (cp & 63);
    p->cs_tab[h] = (uint32_t)p->n_csets + 1;
    *id = (uint32_t)p->n_csets++;
    return 0;
}

int eg_cset_meets(const em_grammar *g, uint32_t cs, uint32_t lo, uint32_t hi)
{
    const eg_cset *c = &g->csets[cs];
    const eg_range *r = g->ranges + c->first;
    /* first range whose hi >= lo */
    uint32_t a = 0, b = c->n;
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        if (r[mid].hi < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < c->n && r[a].lo <= hi;
}

/* ---- rules and bodies ---------------------------------------------------- */

static uint64_t hash_name(const char *s, size_t n)
{
    return XXH3_64bits(s, n);
}

static int new_rule(gp *p, const char *name, size_t name_len, int owned, size_t off, uint32_t *id)
{
    if (p->n_rules >= EM_GRAMMAR_MAX_RULES)
        return fail_at(p, off, EM_ERANGE, "grammar too large: more than %u rules (repetitions and groups count)",
                       EM_GRAMMAR_MAX_RULES);
    if (em_grow((void **)&p->rules, &p->cap_rules, p->n_rules, sizeof *p->rules, 32))
        return oom(p);
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = (uint32_t)name_len;
    r->owned = owned;
    r->def_off = r->ref_off = (uint32_t)off;
    *id = (uint32_t)p->n_rules++;
    return 0;
}

static int name_hash(const gp *p, size_t i, uint64_t *h)
{
    if (p->rules[i].owned)
        return 1;   /* generated rules have no name to find */
    *h = hash_name(p->rules[i].name, p->rules[i].name_len);
    return 0;
}

static int names_rehash(gp *p)
{
    return tab_grow(p, &p->names, &p->names_cap, 64, p->n_rules, name_hash);
}

/* The rule named s[off .. off+n), made (undefined yet) at its first mention. */
static int named_rule(gp *p, size_t off, size_t n, uint32_t *id)
{
    if ((p->n_rules + 1) * 2 > p->names_cap && names_rehash(p))
        return EM_ENOMEM;
    const char *name = p->s + off;
    size_t h = (size_t)hash_name(name, n) & (p->names_cap - 1);
    for (; p->names[h]; h = (h + 1) & (p->names_cap - 1)) {
        const prule *r = &p->rules[p->names[h] - 1];
        if (r->name_len == n && !memcmp(r->name, name, n)) {
            *id = p->names[h] - 1;
            return 0;
        }
    }
    int rc = new_rule(p, name, n, 0, off, id);
    if (rc)
        return rc;
    p->names[h] = *id + 1;
    return 0;
}

static int body_push(gp *p, uint32_t rule, uint32_t e, size_t off)
{
    pbody *b = &p->rules[rule].body;
    if (p->n_elems >= EM_GRAMMAR_MAX_ELEMS)
        return fail_at(p, off, EM_ERANGE,
                       "grammar too large: more than %u elements after expanding repetitions",
                       EM_GRAMMAR_MAX_ELEMS);
    if (em_grow((void **)&b->v, &b->cap, b->n, sizeof *b->v, 8) ||
        em_grow((void **)&b->src, &b->cap_src, b->n, sizeof *b->src, 8))
        return oom(p);
    b->src[b->n] = (uint32_t)off;
    b->v[b->n++] = e;
    if (e == EG_ALT || b->n == 1)
        p->n_elems++;   /* each alternative ends in an EG_END */
    p->n_elems++;
    return 0;
}

/* ---- lexing -------------------------------------------------------------- */

static int peek(const gp *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static int is_word(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skip blanks and # comments; newlines too when newline_ok. */
static void skip_space(gp *p, int newline_ok)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
                p->pos++;
        } else if ((c == '\n' || c == '\r') && newline_ok) {
            p->pos++;
        } else {
            break;
        }
    }
}

/* Decode one UTF-8 character at pos (strict); -1 when invalid. */
static int32_t read_utf8(gp *p)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    uint32_t c = s[0], cp, n;
    if (c < 0x80) {
        p->pos++;
        return (int32_t)c;
    }
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return -1;
    if (left < n)
        return -1;
    for (uint32_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > MAX_CP)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    p->pos += n;
    return (int32_t)cp;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (an escape or raw UTF-8) into *cp. */
static int read_char(gp *p, uint32_t *cp)
{
    size_t at = p->pos;
    if (p->s[p->pos] != '\\') {
        int32_t c = read_utf8(p);
        if (c < 0)
            return fail_at(p, at, EM_EFORMAT, "invalid UTF-8 in the grammar");
        *cp = (uint32_t)c;
        return 0;
    }
    p->pos++;
    int c = peek(p);
    p->pos++;
    int digits = 0;
    switch (c) {
    case 'n':  *cp = '\n'; return 0;
    case 'r':  *cp = '\r'; return 0;
    case 't':  *cp = '\t'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '/': case '^':
        *cp = (uint32_t)c;
        return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    case -1:
        return fail_at(p, at, EM_EFORMAT, "unterminated escape at the end of the grammar");
    default:
        if (c < 0x20 || c >= 0x7F)
            return fail_at(p, at, EM_EFORMAT, "bad escape '\\' followed by byte 0x%02x", (unsigned)c);
        return fail_at(p, at, EM_EFORMAT, "bad escape '\\%c' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- "
                       "\\xHH \\uHHHH \\UHHHHHHHH)", c);
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = hexval(peek(p));
        if (h < 0)
            return fail_at(p, at, EM_EFORMAT, "bad escape: \\%c needs %d hex digits", c, digits);
        v = (v << 4) | (uint32_t)h;
        p->pos++;
    }
    if (v > MAX_CP)
        return fail_at(p, at, EM_EFORMAT, "bad escape: U+%X is beyond U+10FFFF", v);
    if (v >= 0xD800 && v <= 0xDFFF)
        return fail_at(p, at, EM_EFORMAT, "bad escape: U+%04X is a surrogate, not a character", v);
    *cp = v;
    return 0;
}

static int emit_set(gp *p, uint32_t rule, size_t off)
{
    uint32_t cs;
    int rc = tmp_intern(p, &cs);
    return rc ? rc : body_push(p, rule, EG_MK(EG_CHAR, cs), off);
}

static int parse_literal(gp *p, uint32_t rule)
{
    size_t open = p->pos++;
    for (;;) {
        int c = peek(p);
        if (c == -1 || c == '\n' || c == '\r')
            return fail_at(p, open, EM_EFORMAT, c == -1 ? "unterminated string"
                           : "unterminated string (a newline inside \"...\" is written \\n)");
        if (c == '"') {
            p->pos++;
            return 0;
        }
        size_t at = p->pos;
        uint32_t cp;
        int rc = read_char(p, &cp);
        if (rc)
            return rc;
        p->n_tmp = 0;
        if ((rc = tmp_add(p, cp, cp)) || (rc = emit_set(p, rule, at)))
            return rc;
    }
}

static int parse_class(gp *p, uint32_t rule)
{
    size_t open = p->pos++;
    int negate = peek(p) == '^';
    if (negate)
        p->pos++;
    p->n_tmp = 0;
    for (;;) {
        int c = peek(p);
        if (c == -1 || c == '\n' || c == '\r')
            return fail_at(p, open, EM_EFORMAT, "unterminated character class");
        if (c == ']')
            break;
        size_t at = p->pos;
        uint32_t lo, hi;
        int rc = read_char(p, &lo);
        if (rc)
            return rc;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']') {
            p->pos++;
            if (peek(p) == '\n' || peek(p) == '\r')
                return fail_at(p, open, EM_EFORMAT, "unterminated character class");
            if ((rc = read_char(p, &hi)))
                return rc;
            if (hi < lo)
                return fail_at(p, at, EM_EFORMAT, "bad range: U+%04X-U+%04X runs backwards", lo, hi);
        }
        if ((rc = tmp_add(p, lo, hi)))
            return rc;
    }
    p->pos++;
    if (p->n_tmp == 0)
        return fail_at(p, open, EM_EFORMAT, "empty character class");
    tmp_normalize(p, negate);
    if (p->n_tmp == 0)
        return fail_at(p, open, EM_EFORMAT, "character class matches no character");
    return emit_set(p, rule, open);
}

static int parse_uint(gp *p, uint32_t *v, size_t at)
{
    int c = peek(p);
    if (c < '0' || c > '9')
        return fail_at(p, at, EM_EFORMAT, "expecting a number in { }");
    uint64_t x = 0;
    while ((c = peek(p)) >= '0' && c <= '9') {
        x = x * 10 + (uint64_t)(c - '0');
        if (x > EM_GRAMMAR_MAX_REPEAT)
            return fail_at(p, at, EM_ERANGE, "repetition bound exceeds the limit of %u",
                           EM_GRAMMAR_MAX_REPEAT);
        p->pos++;
    }
    *v = (uint32_t)x;
    return 0;
}

/* ---- repetitions --------------------------------------------------------- */

/* item: a single element. Generated rule: [item (tail)] | "" . */
static int rep_rule(gp *p, uint32_t item, uint32_t tail, int has_tail, size_t off, uint32_t *id)
{
    int rc = new_rule(p, NULL, 0, 1, off, id);
    if (rc)
        return rc;
    p->rules[*id].defined = 1;
    if ((rc = body_push(p, *id, item, off)))
        return rc;
    if (has_tail && (rc = body_push(p, *id, tail, off)))
        return rc;
    return body_push(p, *id, EG_ALT, off);
}

/* Apply {min,max} (max UINT32_MAX: unbounded) to the items at
 * rule's body [start, n) (the last symbol written). */
static int repeat(gp *p, uint32_t rule, size_t start, uint32_t min, uint32_t max, size_t off)
{
    pbody *b = &p->rules[rule].body;
    size_t count = b->n - start;
    if (count == 0)
        return 0;   /* "" repeated is still "" */
    uint32_t item;
    int rc;
    if (count == 1) {
        item = b->v[start];
    } else {
        /* several elements (a literal): one generated rule holds them */
        uint32_t sub;
        if ((rc = new_rule(p, NULL, 0, 1, off, &sub)))
            return rc;
        b = &p->rules[rule].body;
        p->rules[sub].defined = 1;
        for (size_t i = start; i < b->n; i++) {
            if ((rc = body_push(p, sub, b->v[i], b->src[i])))
                return rc;
            b = &p->rules[rule].body;
        }
        item = EG_MK(EG_RULE, sub);
    }
    p->n_elems -= b->n - start;
    b->n = start;
    for (uint32_t i = 0; i < min; i++)
        if ((rc = body_push(p, rule, item, off)))
            return rc;
    if (max == UINT32_MAX) {
        uint32_t star;
        if ((rc = new_rule(p, NULL, 0, 1, off, &star)))
            return rc;
        p->rules[star].defined = 1;
        if ((rc = body_push(p, star, item, off)) ||
            (rc = body_push(p, star, EG_MK(EG_RULE, star), off)) ||
            (rc = body_push(p, star, EG_ALT, off)))
            return rc;
        return body_push(p, rule, EG_MK(EG_RULE, star), off);
    }
    if (max == min)
        return 0;
    uint32_t prev = 0;
    for (uint32_t k = 0; k < max - min; k++)
        if ((rc = rep_rule(p, item, EG_MK(EG_RULE, prev), k > 0, off, &prev)))
            return rc;
    return body_push(p, rule, EG_MK(EG_RULE, prev), off);
}

/* ---- rules, alternatives, sequences -------------------------------------- */

static int parse_alternates(gp *p, uint32_t rule, int nested, size_t open);

/* One sequence into rule's body; *items counts what it held (a "" counts). */
static int parse_sequence(gp *p, uint32_t rule, int nested, int *items)
{
    size_t last = (size_t)-1;   /* body index where the last symbol starts */
    *items = 0;
    for (;;) {
        skip_space(p, nested);
        int c = peek(p);
        size_t at = p->pos;
        size_t here = p->rules[rule].body.n;
        int rc = 0;
        if (c == '"') {
            rc = parse_literal(p, rule);
        } else if (c == '[') {
            rc = parse_class(p, rule);
        } else if (c == '.') {
            p->pos++;
            p->n_tmp = 0;
            if (!(rc = tmp_add(p, 0, MAX_CP)))
                rc = emit_set(p, rule, at);
        } else if (c == '(') {
            if (++p->nest > EM_GRAMMAR_MAX_NEST)
                return fail_at(p, at, EM_ERANGE, "groups nested deeper than %u", EM_GRAMMAR_MAX_NEST);
            p->pos++;
            uint32_t sub;
            if ((rc = new_rule(p, NULL, 0, 1, at, &sub)))
                return rc;
            p->rules[sub].defined = 1;
            if ((rc = parse_alternates(p, sub, 1, at)))
                return rc;
            skip_space(p, 1);
            if (peek(p) != ')')
                return fail_at(p, peek(p) == -1 ? at : p->pos, EM_EFORMAT,
                               peek(p) == -1 ? "unclosed group: expecting ')'" : "expecting ')'");
            p->pos++;
            p->nest--;
            rc = body_push(p, rule, EG_MK(EG_RULE, sub), at);
        } else if (is_word(c)) {
            while (is_word(peek(p)))
                p->pos++;
            size_t name_end = p->pos;
            skip_space(p, nested);
            if (p->pos + 3 <= p->len && !memcmp(p->s + p->pos, "::=", 3))
                return fail_at(p, at, EM_EFORMAT, nested ? "expecting ')' before the next rule"
                               : "expecting a newline before the next rule");
            p->pos = name_end;
            uint32_t ref;
            if ((rc = named_rule(p, at, name_end - at, &ref)))
                return rc;
            rc = body_push(p, rule, EG_MK(EG_RULE, ref), at);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == (size_t)-1)
                return fail_at(p, at, EM_EFORMAT, "'%c' repeats nothing: it must follow a symbol", c);
            uint32_t min = 0, max = UINT32_MAX;
            p->pos++;
            if (c == '+') {
                min = 1;
            } else if (c == '?') {
                max = 1;
            } else if (c == '{') {
                skip_space(p, 0);
                if ((rc = parse_uint(p, &min, at)))
                    return rc;
                skip_space(p, 0);
                max = min;
                if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, 0);
                    max = UINT32_MAX;
                    if (peek(p) >= '0' && peek(p) <= '9' && (rc = parse_uint(p, &max, at)))
                        return rc;
                    skip_space(p, 0);
                }
                if (peek(p) != '}')
                    return fail_at(p, at, EM_EFORMAT, "expecting '}' to close the repetition");
                p->pos++;
                if (max < min)
                    return fail_at(p, at, EM_EFORMAT, "repetition {%u,%u}: the maximum is below the minimum",
                                   min, max);
            }
            if ((rc = repeat(p, rule, last, min, max, at)))
                return rc;
            last = (size_t)-1;   /* x** is an error, as in llama.cpp */
            continue;
        } else if (c == '<') {
            return fail_at(p, at, EM_EFORMAT, "token references <...> are not supported");
        } else {
            return 0;   /* the caller decides what may stand here */
        }
        if (rc)
            return rc;
        last = here;
        (*items)++;
    }
}

static int parse_alternates(gp *p, uint32_t rule, int nested, size_t open)
{
    int n_alts = 0, items = 0, rc;
    for (;;) {
        if ((rc = parse_sequence(p, rule, nested, &items)))
            return rc;
        n_alts++;
        if (!nested) {
            /* ember extension: a line that starts with | continues the rule */
            size_t save = p->pos;
            skip_space(p, 1);
            if (peek(p) != '|')
                p->pos = save;
        }
        if (peek(p) != '|')
            break;
        p->pos++;
        skip_space(p, 1);
        if ((rc = body_push(p, rule, EG_ALT, p->pos)))
            return rc;
    }
    if (n_alts == 1 && items == 0)
        return fail_at(p, nested ? open : p->pos, EM_EFORMAT,
                       nested ? "empty group (write \"\" to match nothing)"
                              : "empty rule (write \"\" to match nothing)");
    return 0;
}

static int parse_rule(gp *p)
{
    size_t at = p->pos;
    if (!is_word(peek(p)))
        return fail_at(p, at, EM_EFORMAT, "expecting a rule name");
    while (is_word(peek(p)))
        p->pos++;
    size_t name_end = p->pos;
    skip_space(p, 0);
    if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3))
        return fail_at(p, p->pos, EM_EFORMAT, "expecting ::= after the rule name");
    uint32_t id;
    int rc = named_rule(p, at, name_end - at, &id);
    if (rc)
        return rc;
    prule *r = &p->rules[id];
    if (r->defined) {
        unsigned line, col;
        eg_line_col(p->s, p->len, r->def_off, &line, &col);
        return fail_at(p, at, EM_EFORMAT, "rule '%.*s' defined twice (first at %u:%u)",
                       (int)r->name_len, r->name, line, col);
    }
    r->defined = 1;
    r->def_off = (uint32_t)at;
    p->pos += 3;
    skip_space(p, 1);
    if ((rc = parse_alternates(p, id, 0, at)))
        return rc;
    int c = peek(p);
    if (c != -1 && c != '\n' && c != '\r') {
        if (c == ')')
            return fail_at(p, p->pos, EM_EFORMAT, "unexpected ')' with no group open");
        if (c >= 0x20 && c < 0x7F)
            return fail_at(p, p->pos, EM_EFORMAT, "unexpected '%c'", c);
        return fail_at(p, p->pos, EM_EFORMAT, "unexpected byte 0x%02x", (unsigned)c);
    }
    skip_space(p, 1);
    return 0;
}

/* ---- layout -------------------------------------------------------------- */

/* The flat program into g, and what the checks need to name places into map
 * (its arrays owned by the caller: free with map_free). */
static int layout(gp *p, em_grammar *g, eg_src_map *map)
{
    size_t n_alts = 0, n_elems = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        const pbody *b = &p->rules[r].body;
        n_alts++;
        n_elems += b->n + 1;
        for (size_t i = 0; i < b->n; i++)
            n_alts += b->v[i] == EG_ALT;
    }
    map->src = p->s;
    map->len = p->len;
    g->elems = malloc(n_elems * sizeof *g->elems);
    map->elem_src = malloc(n_elems * sizeof *map->elem_src);
    g->alts = malloc(n_alts * sizeof *g->alts);
    map->alt_rule = malloc(n_alts * sizeof *map->alt_rule);
    g->rules = malloc(p->n_rules * sizeof *g->rules);
    map->def_off = malloc((p->n_rules + 1) * sizeof *map->def_off);
    map->names = malloc((p->n_rules + 1) * sizeof *map->names);
    map->name_len = malloc((p->n_rules + 1) * sizeof *map->name_len);
    if (!g->elems || !map->elem_src || !g->alts || !map->alt_rule || !g->rules || !map->def_off ||
        !map->names || !map->name_len)
        return oom(p);
    uint32_t e = 0, a = 0;
    for (size_t r = 0; r < p->n_rules; r++) {
        const pbody *b = &p->rules[r].body;
        map->def_off[r] = p->rules[r].def_off;
        map->names[r] = p->rules[r].owned ? NULL : p->rules[r].name;
        map->name_len[r] = p->rules[r].name_len;
        g->rules[r].first_alt = a;
        map->alt_rule[a] = (uint32_t)r;
        g->alts[a++] = e;
        for (size_t i = 0; i < b->n; i++) {
            map->elem_src[e] = b->src[i];
            if (b->v[i] == EG_ALT) {
                g->elems[e++] = EG_MK(EG_END, 0);
                map->alt_rule[a] = (uint32_t)r;
                g->alts[a++] = e;
            } else {
                g->elems[e++] = b->v[i];
            }
        }
        map->elem_src[e] = p->rules[r].def_off;
        g->elems[e++] = EG_MK(EG_END, 0);
        g->rules[r].n_alts = a - g->rules[r].first_alt;
    }
    g->n_elems = e;
    g->n_alts = a;
    g->n_rules = (uint32_t)p->n_rules;
    return 0;
}

static void map_free(eg_src_map *map)
{
    free(map->elem_src);
    free(map->alt_rule);
    free(map->def_off);
    free(map->names);
    free(map->name_len);
}

/* ---- entry --------------------------------------------------------------- */

void em_grammar_destroy(em_grammar *g)
{
    if (!g)
        return;
    free(g->elems);
    free(g->alts);
    free(g->rules);
    free(g->csets);
    free(g->ranges);
    free(g);
}

uint32_t em_grammar_n_rules(const em_grammar *g) { return g->n_rules; }
uint32_t em_grammar_n_elems(const em_grammar *g) { return g->n_elems; }

int em_grammar_compile(const char *src, size_t len, const char *root, em_grammar **out, em_err *err)
{
    gp p = { .s = src ? src : "", .len = src ? len : 0, .err = err };
    em_grammar *g = NULL;
    eg_src_map map = { 0 };
    int rc;
    *out = NULL;
    if (!root)
        root = "root";
    if (len > EM_GRAMMAR_MAX_SRC) {
        rc = em_err_set(err, EM_ERANGE, "grammar:1:1: grammar too large: %zu bytes (the limit is %u)",
                        len, EM_GRAMMAR_MAX_SRC);
        goto done;
    }
    skip_space(&p, 1);
    while (p.pos < p.len)
        if ((rc = parse_rule(&p)))
            goto done;
    for (size_t r = 0; r < p.n_rules; r++)
        if (!p.rules[r].defined) {
            rc = fail_at(&p, p.rules[r].ref_off, EM_EFORMAT, "undefined rule '%.*s'",
                         (int)(p.rules[r].name_len > 200 ? 200 : p.rules[r].name_len), p.rules[r].name);
            goto done;
        }
    uint32_t root_id = UINT32_MAX;
    size_t rlen = strlen(root);
    for (size_t r = 0; r < p.n_rules; r++)
        if (!p.rules[r].owned && p.rules[r].name_len == rlen && !memcmp(p.rules[r].name, root, rlen)) {
            root_id = (uint32_t)r;
            break;
        }
    if (root_id == UINT32_MAX) {
        rc = fail_at(&p, p.len, EM_EFORMAT, "no rule '%.100s' (the start rule)", root);
        goto done;
    }
    g = calloc(1, sizeof *g);
    if (!g) {
        rc = oom(&p);
        goto done;
    }
    g->root = root_id;
    if ((rc = layout(&p, g, &map)))
        goto done;
    g->csets = p.csets;
    g->n_csets = (uint32_t)p.n_csets;
    g->ranges = p.ranges;
    g->n_ranges = (uint32_t)p.n_ranges;
    p.csets = NULL;
    p.ranges = NULL;
    if ((rc = eg_grammar_check(g, &map, err)))
        goto done;
    *out = g;
    g = NULL;
    rc = 0;
done:
    for (size_t r = 0; r < p.n_rules; r++) {
        free(p.rules[r].body.v);
        free(p.rules[r].body.src);
    }
    free(p.rules);
    free(p.names);
    free(p.ranges);
    free(p.csets);
    free(p.cs_tab);
    free(p.tmp);
    map_free(&map);
    em_grammar_destroy(g);
    return rc;
}
