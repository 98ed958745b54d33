/* grammar_regex.c — regular expressions (the subset JSON Schema `pattern`
 * and a user's regex form use) translated into GBNF rules, plain or as the
 * JSON-encoded text of a string value; and the small text builder that the
 * GBNF generators share. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"
#include "core/grow.h"

#define MAX_CP 0x10FFFFu
#define RE_MAX_NEST 200

/* ---- text builder -------------------------------------------------------- */

void eg_sb_put(eg_sb *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (em_grow((void **)&b->s, &b->cap, b->len + n, 1, 256)) {   /* room for the NUL too */
        b->oom = 1;
        return;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void eg_sb_puts(eg_sb *b, const char *s) { eg_sb_put(b, s, strlen(s)); }

void eg_sb_printf(eg_sb *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (em_grow_vprintf(&b->s, &b->cap, &b->len, fmt, ap))
        b->oom = 1;
    va_end(ap);
}

void eg_sb_gbnf_char(eg_sb *b, uint32_t cp, int in_class)
{
    char c = (char)cp;
    if (cp == '\\' || cp == '"' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
        char e[2] = { '\\', c };
        eg_sb_put(b, e, 2);
    } else if (cp == '\n') {
        eg_sb_puts(b, "\\n");
    } else if (cp == '\t') {
        eg_sb_puts(b, "\\t");
    } else if (cp == '\r') {
        eg_sb_puts(b, "\\r");
    } else if (cp >= 0x20 && cp < 0x7F) {
        eg_sb_put(b, &c, 1);
    } else if (cp < 0x100) {
        eg_sb_printf(b, "\\x%02X", cp);
    } else if (cp < 0x10000) {
        eg_sb_printf(b, "\\u%04X", cp);
    } else {
        eg_sb_printf(b, "\\U%08X", cp);
    }
}

/* Decode one UTF-8 character of s[*i..n); invalid bytes decode as
 * themselves (U+0080..U+00FF), which callers only meet for bad input. */
static uint32_t next_cp(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[*i], len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len <= 1 || *i + len > n) {
        (*i)++;
        return c;
    }
    uint32_t cp = c & (0xFFu >> (len + 1));
    for (uint32_t k = 1; k < len; k++) {
        if ((u[*i + k] & 0xC0) != 0x80) {
            (*i)++;
            return c;
        }
        cp = (cp << 6) | (u[*i + k] & 0x3F);
    }
    if (cp > MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF) ||
        (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) {
        (*i)++;
        return c;
    }
    *i += len;
    return cp;
}

void eg_sb_gbnf_literal(eg_sb *b, const char *s, size_t n)
{
    eg_sb_put(b, "\"", 1);
    for (size_t i = 0; i < n;)
        eg_sb_gbnf_char(b, next_cp(s, n, &i), 0);
    eg_sb_put(b, "\"", 1);
}

/* ---- code point sets ----------------------------------------------------- */

typedef struct {
    eg_range *r;
    size_t    n, cap;
} rset;

static int rs_add(rset *s, uint32_t lo, uint32_t hi)
{
    if (em_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r, 8))
        return EM_ENOMEM;
    s->r[s->n++] = (eg_range){ lo, hi };
    return 0;
}

static int rs_add_set(rset *s, const rset *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (rs_add(s, t->r[i].lo, t->r[i].hi))
            return EM_ENOMEM;
    return 0;
}

static int rs_finish(rset *s, int negate)
{
    if (em_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r, 8))
        return EM_ENOMEM;
    s->n = eg_ranges_normalize(s->r, s->n, negate);
    return 0;
}

static int rs_has(const rset *s, uint32_t cp)
{
    for (size_t i = 0; i < s->n; i++)
        if (cp >= s->r[i].lo && cp <= s->r[i].hi)
            return 1;
    return 0;
}

/* \d \w \s and their negations into s. */
static int rs_class_escape(rset *s, char c)
{
    rset t = { 0 };
    int rc = 0;
    switch (c | 0x20) {
    case 'd':
        rc = rs_add(&t, '0', '9');
        break;
    case 'w':
        rc = rs_add(&t, '0', '9') || rs_add(&t, 'A', 'Z') || rs_add(&t, 'a', 'z') || rs_add(&t, '_', '_');
        break;
    default:   /* s: ECMAScript white space and line terminators */
        rc = rs_add(&t, 0x09, 0x0D) || rs_add(&t, 0x20, 0x20) || rs_add(&t, 0xA0, 0xA0) ||
             rs_add(&t, 0x1680, 0x1680) || rs_add(&t, 0x2000, 0x200A) || rs_add(&t, 0x2028, 0x2029) ||
             rs_add(&t, 0x202F, 0x202F) || rs_add(&t, 0x205F, 0x205F) || rs_add(&t, 0x3000, 0x3000) ||
             rs_add(&t, 0xFEFF, 0xFEFF);
        break;
    }
    if (!rc)
        rc = rs_finish(&t, c >= 'A' && c <= 'Z');
    if (!rc)
        rc = rs_add_set(s, &t);
    free(t.r);
    return rc ? EM_ENOMEM : 0;
}

static void write_class(eg_sb *b, const eg_range *r, size_t n)
{
    eg_sb_put(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        eg_sb_gbnf_char(b, r[i].lo, 1);
        if (r[i].hi != r[i].lo) {
            if (r[i].hi > r[i].lo + 1)
                eg_sb_put(b, "-", 1);
            eg_sb_gbnf_char(b, r[i].hi, 1);
        }
    }
    eg_sb_put(b, "]", 1);
}

static const char *json_short_escape(uint32_t cp)
{
    switch (cp) {
    case '\b': return "b";
    case '\f': return "f";
    case '\n': return "n";
    case '\r': return "r";
    case '\t': return "t";
    default:   return NULL;
    }
}

/* One character of set s (normalized, non-empty) as GBNF: a class, or in
 * JSON mode a group of the class of what JSON writes as itself and the
 * escapes of the rest. */
static int write_set(eg_sb *b, const rset *s, int json)
{
    if (!json) {
        if (s->n == 1 && s->r[0].lo == s->r[0].hi) {
            eg_sb_put(b, "\"", 1);
            eg_sb_gbnf_char(b, s->r[0].lo, 0);
            eg_sb_put(b, "\"", 1);
        } else {
            write_class(b, s->r, s->n);
        }
        return 0;
    }
    /* safe = s minus controls, '"' and '\' */
    rset safe = { 0 };
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo < 0x20 ? 0x20 : s->r[i].lo, hi = s->r[i].hi;
        for (uint32_t cut = 0; cut < 2 && lo <= hi; cut++) {
            uint32_t x = cut ? '\\' : '"';
            if (x < lo || x > hi)
                continue;
            if (x > lo && rs_add(&safe, lo, x - 1))
                goto oom;
            lo = x + 1;
        }
        if (lo <= hi && rs_add(&safe, lo, hi))
            goto oom;
    }
    if (rs_finish(&safe, 0))
        goto oom;
    int alts = 0;
    eg_sb_put(b, "(", 1);
    if (safe.n) {
        write_class(b, safe.r, safe.n);
        alts++;
    }
    if (rs_has(s, '"')) {
        eg_sb_puts(b, alts++ ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
    }
    if (rs_has(s, '\\')) {
        eg_sb_puts(b, alts++ ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
    }
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!rs_has(s, c))
            continue;
        if (alts++)
            eg_sb_puts(b, " | ");
        const char *e = json_short_escape(c);
        if (e)
            eg_sb_printf(b, "\"\\\\%s\"", e);
        else
            eg_sb_printf(b, "\"\\\\u00%X\" [%X%c]", c >> 4, c & 15u,
                         (c & 15u) >= 10 ? (char)('a' + (c & 15u) - 10) : (char)('0' + (c & 15u)));
    }
    eg_sb_put(b, ")", 1);
    free(safe.r);
    return 0;
oom:
    free(safe.r);
    return EM_ENOMEM;
}

/* ---- the regex parser ---------------------------------------------------- */

typedef struct {
    const char *s;
    size_t      n, i;
    int         json;
    const char *what;
    em_err     *err;
    eg_sb      *out;
    const char *name;     /* the rule being written: name-any is its helper */
    int         uses_any;
    unsigned    depth;
} rx;

static int rx_fail(rx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rx_fail(rx *x, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return em_err_set(x->err, EM_EUNSUPPORTED, "%s: %s (at offset %zu)", x->what, msg, x->i);
}

static int rx_peek(const rx *x) { return x->i < x->n ? (unsigned char)x->s[x->i] : -1; }

static int hexv(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int rx_hex(rx *x, int digits, uint32_t *cp)
{
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexv(rx_peek(x));
        if (h < 0)
            return rx_fail(x, "bad escape: expecting %d hex digits", digits);
        v = (v << 4) | (uint32_t)h;
        x->i++;
    }
    if (v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
        return rx_fail(x, "bad escape: U+%04X is not a character", v);
    *cp = v;
    return 0;
}

/* After a backslash: a single character into *cp (return 0), or a class
 * escape added to set (return 1), or an error (< 0). in_class: \b is a
 * backspace there. */
static int rx_escape(rx *x, uint32_t *cp, rset *set, int in_class)
{
    int c = rx_peek(x);
    if (c == -1)
        return rx_fail(x, "the pattern ends in a backslash");
    x->i++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        return rs_class_escape(set, (char)c) ? EM_ENOMEM : 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return rx_hex(x, 2, cp);
    case 'u':
        if (rx_peek(x) == '{') {
            x->i++;
            uint32_t v = 0;
            int nd = 0, h;
            while ((h = hexv(rx_peek(x))) >= 0 && nd < 7) {
                v = (v << 4) | (uint32_t)h;
                x->i++;
                nd++;
            }
            if (!nd || rx_peek(x) != '}' || v > MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
                return rx_fail(x, "bad escape \\u{...}");
            x->i++;
            *cp = v;
            return 0;
        }
        return rx_hex(x, 4, cp);
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 0;
        }
        return rx_fail(x, "word boundaries (\\b) are not supported");
    case 'B':
        return rx_fail(x, "word boundaries (\\B) are not supported");
    case 'k':
        return rx_fail(x, "backreferences (\\k<name>) are not supported");
    case 'p': case 'P':
        return rx_fail(x, "Unicode property escapes (\\%c{...}) are not supported", c);
    case 'c':
        return rx_fail(x, "control escapes (\\cX) are not supported");
    default:
        if (c >= '1' && c <= '9')
            return rx_fail(x, "backreferences (\\%c) are not supported", c);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rx_fail(x, "unknown escape \\%c", c);
        x->i--;
        *cp = next_cp(x->s, x->n, &x->i);   /* escaped punctuation or any other char */
        return 0;
    }
}

static int rx_class(rx *x)
{
    size_t open = x->i++;
    rset set = { 0 };
    int negate = rx_peek(x) == '^', rc = 0;
    if (negate)
        x->i++;
    int any = 0;
    for (;;) {
        int c = rx_peek(x);
        if (c == -1) {
            x->i = open;
            rc = rx_fail(x, "unterminated character class");
            goto done;
        }
        if (c == ']')
            break;
        uint32_t lo, hi;
        int k = 0;
        if (c == '\\') {
            x->i++;
            if ((k = rx_escape(x, &lo, &set, 1)) < 0) {
                rc = k;
                goto done;
            }
        } else {
            lo = next_cp(x->s, x->n, &x->i);
        }
        any = 1;
        if (k == 1)
            continue;   /* a class escape was added */
        hi = lo;
        if (rx_peek(x) == '-' && x->i + 1 < x->n && x->s[x->i + 1] != ']') {
            x->i++;
            if (rx_peek(x) == '\\') {
                x->i++;
                rset dummy = { 0 };
                k = rx_escape(x, &hi, &dummy, 1);
                free(dummy.r);
                if (k < 0) {
                    rc = k;
                    goto done;
                }
                if (k == 1) {
                    rc = rx_fail(x, "a class escape cannot end a range");
                    goto done;
                }
            } else {
                hi = next_cp(x->s, x->n, &x->i);
            }
            if (hi < lo) {
                rc = rx_fail(x, "range out of order in character class");
                goto done;
            }
        }
        if (rs_add(&set, lo, hi)) {
            rc = EM_ENOMEM;
            goto done;
        }
    }
    x->i++;
    if (!any && !negate) {
        rc = rx_fail(x, "empty character class [] matches nothing");
        goto done;
    }
    if (rs_finish(&set, negate)) {
        rc = EM_ENOMEM;
        goto done;
    }
    if (set.n == 0) {
        rc = rx_fail(x, "character class matches nothing");
        goto done;
    }
    rc = write_set(x->out, &set, x->json);
done:
    free(set.r);
    return rc;
}

/* ECMAScript '.': anything but a line terminator. */
static int rx_dot(rx *x)
{
    rset set = { 0 };
    int rc = rs_add(&set, '\n', '\n') || rs_add(&set, '\r', '\r') || rs_add(&set, 0x2028, 0x2029) ||
             rs_finish(&set, 1) ? EM_ENOMEM : write_set(x->out, &set, x->json);
    free(set.r);
    return rc;
}

static int rx_single(rx *x, uint32_t cp)
{
    rset set = { 0 };
    int rc = rs_add(&set, cp, cp) ? EM_ENOMEM : write_set(x->out, &set, x->json);
    free(set.r);
    return rc;
}

static int rx_alt(rx *x, int top);

static int rx_num(rx *x, uint32_t *v)
{
    uint64_t acc = 0;
    int nd = 0;
    while (rx_peek(x) >= '0' && rx_peek(x) <= '9') {
        acc = acc * 10 + (uint64_t)(rx_peek(x) - '0');
        if (acc > EM_GRAMMAR_MAX_REPEAT)
            return rx_fail(x, "repetition bound exceeds the limit of %u", EM_GRAMMAR_MAX_REPEAT);
        x->i++;
        nd++;
    }
    *v = (uint32_t)acc;
    return nd ? 0 : 1;
}

/* A quantifier at x->i, if any, written after the atom. {...} that is not a
 * well-formed quantifier is a literal '{', as in ECMAScript. */
static int rx_quant(rx *x, int *had)
{
    int c = rx_peek(x);
    *had = 0;
    if (c == '*' || c == '+' || c == '?') {
        x->i++;
        char q = (char)c;
        eg_sb_put(x->out, &q, 1);
        *had = 1;
    } else if (c == '{') {
        size_t save = x->i++;
        uint32_t m = 0, n = 0;
        int rc = rx_num(x, &m), open = 0, has_n = 0;
        if (rc < 0)
            return rc;
        if (rc == 1) {
            x->i = save;
            return 0;
        }
        if (rx_peek(x) == ',') {
            x->i++;
            open = 1;
            if ((rc = rx_num(x, &n)) < 0)
                return rc;
            has_n = rc == 0;
        }
        if (rx_peek(x) != '}') {
            x->i = save;
            return 0;
        }
        x->i++;
        if (has_n && n < m)
            return rx_fail(x, "repetition {%u,%u}: the maximum is below the minimum", m, n);
        if (!open)
            eg_sb_printf(x->out, "{%u}", m);
        else if (!has_n)
            eg_sb_printf(x->out, "{%u,}", m);
        else
            eg_sb_printf(x->out, "{%u,%u}", m, n);
        *had = 1;
    }
    if (*had) {
        if (rx_peek(x) == '?')
            x->i++;   /* lazy: the same strings */
        else if (rx_peek(x) == '+')
            return rx_fail(x, "possessive quantifiers are not supported");
        c = rx_peek(x);
        if (c == '*' || c == '+' || c == '?' || c == '{')
            return rx_fail(x, "nothing to repeat before '%c'", c);
    }
    return 0;
}

/* One sequence; stops at '|', ')' or the end. */
static int rx_seq(rx *x)
{
    int items = 0;
    for (;;) {
        int c = rx_peek(x), rc = 0;
        if (c == -1 || c == '|' || c == ')')
            break;
        if (items)
            eg_sb_put(x->out, " ", 1);
        if (c == '(') {
            if (++x->depth > RE_MAX_NEST)
                return rx_fail(x, "groups nested deeper than %d", RE_MAX_NEST);
            x->i++;
            if (rx_peek(x) == '?') {
                const char *r = x->s + x->i, *end = x->s + x->n;
                if (end - r >= 2 && r[1] == ':') {
                    x->i += 2;
                } else if (end - r >= 2 && (r[1] == '=' || r[1] == '!')) {
                    return rx_fail(x, "lookahead (?%c...) is not supported", r[1]);
                } else if (end - r >= 3 && r[1] == '<' && (r[2] == '=' || r[2] == '!')) {
                    return rx_fail(x, "lookbehind (?<%c...) is not supported", r[2]);
                } else if (end - r >= 2 && (r[1] == '<' || (r[1] == 'P' && end - r >= 3 && r[2] == '<'))) {
                    while (x->i < x->n && x->s[x->i] != '>')
                        x->i++;
                    if (x->i >= x->n)
                        return rx_fail(x, "unterminated group name");
                    x->i++;
                } else {
                    return rx_fail(x, "group flags or extensions (?...) are not supported");
                }
            }
            eg_sb_put(x->out, "(", 1);
            if ((rc = rx_alt(x, 0)))
                return rc;
            if (rx_peek(x) != ')')
                return rx_fail(x, "missing ')'");
            x->i++;
            x->depth--;
            eg_sb_put(x->out, ")", 1);
        } else if (c == '[') {
            rc = rx_class(x);
        } else if (c == '.') {
            x->i++;
            rc = rx_dot(x);
        } else if (c == '\\') {
            x->i++;
            uint32_t cp;
            rset set = { 0 };
            int k = rx_escape(x, &cp, &set, 0);
            if (k < 0)
                rc = k;
            else if (k == 1)
                rc = rs_finish(&set, 0) ? EM_ENOMEM : write_set(x->out, &set, x->json);
            else
                rc = rx_single(x, cp);
            free(set.r);
        } else if (c == '^' || c == '$') {
            return rx_fail(x, "anchor '%c' is only supported at the %s of the pattern", c,
                           c == '^' ? "start" : "end");
        } else if (c == '*' || c == '+' || c == '?') {
            return rx_fail(x, "nothing to repeat before '%c'", c);
        } else {
            rc = rx_single(x, next_cp(x->s, x->n, &x->i));
        }
        if (rc)
            return rc;
        int had;
        if ((rc = rx_quant(x, &had)))
            return rc;
        items++;
    }
    if (!items)
        eg_sb_puts(x->out, "\"\"");
    return 0;
}

/* Alternatives. At the top level each branch may start with ^ and end with
 * $; a branch without them may have anything before or after it (the rule
 * `<name>-any`). */
static int rx_alt(rx *x, int top)
{
    for (int branch = 0;; branch++) {
        if (branch)
            eg_sb_puts(x->out, " | ");
        int start = 1, end = 1;
        if (top) {
            start = rx_peek(x) == '^';
            if (start)
                x->i++;
            /* find this branch's end (a top-level '|' or the end) for a $ */
            size_t j = x->i, dollar = (size_t)-1;
            int depth = 0, in_class = 0;
            for (; j < x->n; j++) {
                char c = x->s[j];
                if (c == '\\') {
                    dollar = (size_t)-1;
                    j++;
                    continue;
                }
                dollar = !in_class && c == '$' ? j : (size_t)-1;
                if (in_class) {
                    in_class = c != ']';
                    continue;
                }
                if (c == '[')
                    in_class = 1;
                else if (c == '(')
                    depth++;
                else if (c == ')')
                    depth--;
                else if (c == '|' && depth == 0)
                    break;
            }
            if (j > x->n)
                j = x->n;   /* a trailing backslash: rx_escape reports it */
            end = j > x->i && dollar == j - 1;
            if (!start) {
                eg_sb_printf(x->out, "%s-any* ", x->name);
                x->uses_any = 1;
            }
            eg_sb_put(x->out, "(", 1);
            size_t save_n = x->n;
            if (end)
                x->n = j - 1;   /* parse without the $ */
            int rc = rx_seq(x);
            if (rc == 0 && x->i < x->n && x->s[x->i] == ')')
                rc = rx_fail(x, "unmatched ')'");
            x->n = save_n;
            if (rc)
                return rc;
            if (end)
                x->i = j;
            eg_sb_put(x->out, ")", 1);
            if (!end) {
                eg_sb_printf(x->out, " %s-any*", x->name);
                x->uses_any = 1;
            }
        } else {
            int rc = rx_seq(x);
            if (rc)
                return rc;
        }
        if (rx_peek(x) != '|')
            return 0;
        x->i++;
    }
}

int eg_regex_emit(const char *re, size_t len, const char *name, int json, const char *what, eg_sb *out,
                  em_err *err)
{
    rx x = { .s = re ? re : "", .n = re ? len : 0, .json = json, .what = what, .err = err, .out = out,
             .name = name };
    eg_sb_printf(out, "%s ::= ", name);
    int rc = rx_alt(&x, 1);
    if (rc == 0 && x.i < x.n)
        rc = rx_fail(&x, "unmatched ')'");
    if (rc)
        return rc;
    eg_sb_puts(out, "\n");
    if (x.uses_any) {
        rset all = { 0 };
        eg_sb_printf(out, "%s-any ::= ", name);
        rc = rs_add(&all, 0, MAX_CP) || rs_finish(&all, 0) ? EM_ENOMEM : write_set(out, &all, json);
        free(all.r);
        eg_sb_puts(out, "\n");
    }
    if (rc || out->oom)
        return em_err_set(err, EM_ENOMEM, "%s: out of memory", what);
    return 0;
}

int em_regex_to_gbnf(const char *re, size_t len, char **gbnf, size_t *gbnf_len, em_err *err)
{
    eg_sb out = { 0 };
    *gbnf = NULL;
    *gbnf_len = 0;
    int rc = eg_regex_emit(re, len, "root", 0, "regex", &out, err);
    if (rc) {
        free(out.s);
        return rc;
    }
    *gbnf = out.s;
    *gbnf_len = out.len;
    return 0;
}
