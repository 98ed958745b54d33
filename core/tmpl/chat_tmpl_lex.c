/* chat_tmpl_lex.c — the chat-template lexer: newline normalisation of the
 * source and its division into tokens exactly as Jinja2's lexer does it
 * with trim_blocks and lstrip_blocks (data, {{ }}, {% %}, {# #}, raw
 * blocks, whitespace control with - and +, literals with Python's escapes,
 * bracket balancing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/tmpl/chat_tmpl_int.h"

int tmpl_normalize(const char *src, size_t len, char **out, size_t *out_len, em_err *err)
{
    char *d = malloc(len + 1);
    if (!d)
        return em_err_set(err, EM_ENOMEM, "template: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            d[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            d[n++] = src[i];
        }
    }
    if (n && d[n - 1] == '\n')   /* keep_trailing_newline=False */
        n--;
    d[n] = '\0';
    *out = d;
    *out_len = n;
    return 0;
}

typedef struct lexer {
    em_tmpl    *t;
    const char *s;
    size_t      n, pos;
    ttok       *toks;
    size_t      nt, cap;
    em_err     *err;
    char        stack[TL_NEST];   /* open brackets, as the closer each expects */
    size_t      sp;
} lexer;

static int lx_push(lexer *lx, uint8_t type, uint8_t op, size_t off, size_t len, ttok **tk)
{
    if (em_grow((void **)&lx->toks, &lx->cap, lx->nt, sizeof *lx->toks, 256))
        return em_err_set(lx->err, EM_ENOMEM, "template: out of memory");
    ttok *k = &lx->toks[lx->nt++];
    memset(k, 0, sizeof *k);
    k->type = type;
    k->op = op;
    k->off = (uint32_t)off;
    k->len = (uint32_t)len;
    if (tk)
        *tk = k;
    return 0;
}

/* Bytes of Python whitespace (regex \s) starting at p. */
static size_t ws_len(const char *s, size_t n, size_t p)
{
    size_t q = p;
    while (q < n) {
        unsigned char ch = (unsigned char)s[q];
        if (ch < 0x80) {
            if (ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f)) {
                q++;
                continue;
            }
            break;
        }
        size_t adv;
        uint32_t cp = tu_decode(s + q, n - q, &adv);
        if (!tu_is_space(cp))
            break;
        q += adv;
    }
    return q - p;
}

/* Start of the Python-whitespace suffix of s[a, b) (str.rstrip()). */
static size_t rstrip_at(const char *s, size_t a, size_t b)
{
    size_t st = 0, en = 0;
    tu_strip(s + a, b - a, NULL, 0, 2, &st, &en);
    return a + en;
}

static int starts(const char *s, size_t n, size_t p, const char *w)
{
    size_t l = strlen(w);
    return p + l <= n && memcmp(s + p, w, l) == 0;
}

/* Emit the data before a tag at [a, b), with the tag's whitespace control
 * (sign '-', '+' or 0) and lstrip_blocks unless the tag prints (var). */
static int lx_data(lexer *lx, size_t a, size_t b, char sign, int is_var, int line_starting)
{
    const char *s = lx->s;
    if (sign == '-') {
        b = rstrip_at(s, a, b);
    } else if (sign != '+' && !is_var) {
        size_t l = b;
        while (l > a && s[l - 1] != '\n')
            l--;
        if (l > a || line_starting) {
            size_t k = l;
            while (k < b && (s[k] == ' ' || s[k] == '\t'))
                k++;
            if (k == b)
                b = l;
        }
    }
    if (b > a)
        return lx_push(lx, TK_DATA, 0, a, b - a, NULL);
    return 0;
}

/* Python digits with single underscores between them: (\d+_)*\d+ */
static size_t digits_us(const char *s, size_t n, size_t p)
{
    size_t q = p;
    if (q >= n || s[q] < '0' || s[q] > '9')
        return 0;
    while (q < n) {
        if (s[q] >= '0' && s[q] <= '9')
            q++;
        else if (s[q] == '_' && q + 1 < n && s[q + 1] >= '0' && s[q + 1] <= '9')
            q++;
        else
            break;
    }
    return q - p;
}

static int is_digit_of(char ch, int base)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0' < base;
    if (base == 16)
        return (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
    return 0;
}

/* Length of an integer literal at p (0 if none) and its base. */
static size_t int_len(const char *s, size_t n, size_t p, int *base)
{
    if (p >= n || s[p] < '0' || s[p] > '9')
        return 0;
    if (s[p] == '0' && p + 1 < n) {
        char k = (char)(s[p + 1] | 0x20);
        int b = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 0;
        if (b) {   /* 0b(_?[01])+ */
            size_t q = p + 2, groups = 0;
            for (;;) {
                size_t r = q;
                if (r < n && s[r] == '_')
                    r++;
                if (r < n && is_digit_of(s[r], b)) {
                    q = r + 1;
                    groups++;
                } else {
                    break;
                }
            }
            if (groups) {
                *base = b;
                return q - p;
            }
        }
    }
    *base = 10;
    size_t q = p + 1;
    if (s[p] == '0') {   /* 0(_?0)* */
        for (;;) {
            size_t r = q;
            if (r < n && s[r] == '_')
                r++;
            if (r < n && s[r] == '0')
                q = r + 1;
            else
                break;
        }
        return q - p;
    }
    for (;;) {   /* [1-9](_?\d)* */
        size_t r = q;
        if (r < n && s[r] == '_')
            r++;
        if (r < n && s[r] >= '0' && s[r] <= '9')
            q = r + 1;
        else
            break;
    }
    return q - p;
}

/* Length of a float literal at p (0 if none). */
static size_t float_len(const char *s, size_t n, size_t p)
{
    if (p > 0 && s[p - 1] == '.')
        return 0;
    size_t a = digits_us(s, n, p);
    if (!a)
        return 0;
    size_t p1 = p + a, p2 = p1;
    if (p1 < n && s[p1] == '.') {
        size_t f = digits_us(s, n, p1 + 1);
        if (f)
            p2 = p1 + 1 + f;
    }
    if (p2 < n && (s[p2] == 'e' || s[p2] == 'E')) {
        size_t p3 = p2 + 1;
        if (p3 < n && (s[p3] == '+' || s[p3] == '-'))
            p3++;
        size_t d = digits_us(s, n, p3);
        if (d)
            return p3 + d - p;
    }
    return p2 > p1 ? p2 - p : 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)(ch | 0x20);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Decode a string literal's content [a, b) as Python's unicode-escape
 * codec does after Jinja's backslashreplace (so "\é" stays "\xe9"). */
static int lx_string(lexer *lx, size_t a, size_t b, tstr **out)
{
    const char *s = lx->s;
    char *d = malloc(b - a + 1 > 16 ? (b - a) * 2 + 16 : 32);
    if (!d)
        return em_err_set(lx->err, EM_ENOMEM, "template: out of memory");
    size_t o = 0;
    int rc = 0;
    for (size_t i = a; i < b;) {
        if (s[i] != '\\') {
            d[o++] = s[i++];
            continue;
        }
        size_t at = i;
        char e = s[i + 1];   /* a backslash is always followed by a character */
        i += 2;
        uint32_t cp = 0;
        int ndig = 0, want = 0;
        switch (e) {
        case '\n': continue;
        case '\\': d[o++] = '\\'; continue;
        case '\'': d[o++] = '\''; continue;
        case '"': d[o++] = '"'; continue;
        case 'a': d[o++] = '\a'; continue;
        case 'b': d[o++] = '\b'; continue;
        case 'f': d[o++] = '\f'; continue;
        case 'n': d[o++] = '\n'; continue;
        case 'r': d[o++] = '\r'; continue;
        case 't': d[o++] = '\t'; continue;
        case 'v': d[o++] = '\v'; continue;
        case 'x': want = 2; break;
        case 'u': want = 4; break;
        case 'U': want = 8; break;
        case 'N':
            rc = tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, at, "\\N{...} escapes are not supported");
            goto done;
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < b && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += tu_encode(cp, d + o);
                continue;
            }
            if ((unsigned char)e >= 0x80) {   /* backslash + the character's own escape */
                size_t adv;
                uint32_t c2 = tu_decode(s + i - 1, b - (i - 1), &adv);
                i = i - 1 + adv;
                int w = c2 < 0x100 ? 2 : c2 < 0x10000 ? 4 : 8;
                o += (size_t)sprintf(d + o, "\\%c%0*x", w == 2 ? 'x' : w == 4 ? 'u' : 'U', w,
                                     (unsigned)c2);
                continue;
            }
            d[o++] = '\\';   /* unknown escape: kept as written */
            d[o++] = e;
            continue;
        }
        for (; ndig < want && i < b && hexval(s[i]) >= 0; ndig++)
            cp = cp * 16 + (uint32_t)hexval(s[i++]);
        if (ndig < want) {
            rc = tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, at, "truncated \\%c escape in a string", e);
            goto done;
        }
        if (cp > 0x10FFFF) {
            rc = tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, at, "illegal Unicode character in a string");
            goto done;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            rc = tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, at, "lone surrogate in a string");
            goto done;
        }
        o += tu_encode(cp, d + o);
    }
    tval v;
    if ((rc = ts_new_immortal(lx->t, d, o, &v)))
        rc = em_err_set(lx->err, rc, "template: out of memory");
    else
        *out = tv_s(&v);
done:
    free(d);
    return rc;
}

static const struct { const char *text; uint8_t op; } ops[] = {
    { "//", OP_FLOORDIV }, { "**", OP_POW }, { "==", OP_EQ }, { "!=", OP_NE },
    { ">=", OP_GTEQ }, { "<=", OP_LTEQ },
    { "+", OP_ADD }, { "-", OP_SUB }, { "/", OP_DIV }, { "*", OP_MUL }, { "%", OP_MOD },
    { "~", OP_TILDE }, { "[", OP_LBRACKET }, { "]", OP_RBRACKET }, { "(", OP_LPAREN },
    { ")", OP_RPAREN }, { "{", OP_LBRACE }, { "}", OP_RBRACE }, { ">", OP_GT },
    { "<", OP_LT }, { "=", OP_ASSIGN }, { ".", OP_DOT }, { ":", OP_COLON },
    { "|", OP_PIPE }, { ",", OP_COMMA }, { ";", OP_SEMICOLON },
};

/* Tokens of one {{ }} or {% %} tag from lx->pos to its end (which it
 * consumes, with trim_blocks / '-' whitespace). *eof when the source ends
 * first (the parser reports it). */
static int lx_tag(lexer *lx, int is_var, int *line_starting, int *eof)
{
    const char *s = lx->s;
    size_t n = lx->n;
    int rc;
    lx->sp = 0;
    for (;;) {
        size_t p = lx->pos;
        if (lx->sp == 0) {
            size_t end = 0;
            if (is_var) {
                if (starts(s, n, p, "-}}"))
                    end = p + 3 + ws_len(s, n, p + 3);
                else if (starts(s, n, p, "}}"))
                    end = p + 2;
            } else {
                if (starts(s, n, p, "+%}"))
                    end = p + 3;
                else if (starts(s, n, p, "-%}"))
                    end = p + 3 + ws_len(s, n, p + 3);
                else if (starts(s, n, p, "%}"))
                    end = p + 2 + (p + 2 < n && s[p + 2] == '\n');
            }
            if (end) {
                if ((rc = lx_push(lx, is_var ? TK_VAR_END : TK_BLOCK_END, 0, p, end - p, NULL)))
                    return rc;
                lx->pos = end;
                *line_starting = s[end - 1] == '\n';
                return 0;
            }
        }
        if (p >= n) {
            *eof = 1;
            return 0;
        }
        size_t w = ws_len(s, n, p);
        if (w) {
            lx->pos += w;
            continue;
        }
        ttok *tk;
        size_t l;
        int base;
        if ((l = float_len(s, n, p))) {
            char buf[128];
            size_t o = 0;
            for (size_t i = p; i < p + l && o < sizeof buf - 1; i++)
                if (s[i] != '_')
                    buf[o++] = s[i];
            buf[o] = '\0';
            if ((rc = lx_push(lx, TK_FLOAT, 0, p, l, &tk)))
                return rc;
            tk->v.f = strtod(buf, NULL);
            lx->pos += l;
            continue;
        }
        if ((l = int_len(s, n, p, &base))) {
            uint64_t v = 0;
            size_t i = p + (base != 10 ? 2 : 0);
            for (; i < p + l; i++) {
                if (s[i] == '_')
                    continue;
                uint64_t dgt = (uint64_t)hexval(s[i]);
                if (v > (UINT64_C(0x7fffffffffffffff) - dgt) / (uint64_t)base)
                    return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p,
                                        "integer literal too large (ember's integers are 64-bit)");
                v = v * (uint64_t)base + dgt;
            }
            if ((rc = lx_push(lx, TK_INT, 0, p, l, &tk)))
                return rc;
            tk->v.i = (int64_t)v;
            lx->pos += l;
            continue;
        }
        char ch = s[p];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t q = p + 1;
            while (q < n && ((s[q] >= 'a' && s[q] <= 'z') || (s[q] >= 'A' && s[q] <= 'Z') ||
                             (s[q] >= '0' && s[q] <= '9') || s[q] == '_'))
                q++;
            if ((rc = lx_push(lx, TK_NAME, 0, p, q - p, NULL)))
                return rc;
            lx->pos = q;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t q = p + 1;
            while (q < n && s[q] != ch) {
                if (s[q] == '\\' && q + 1 < n)
                    q++;
                q++;
            }
            if (q >= n)
                return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p, "unterminated string");
            tstr *str = NULL;
            if ((rc = lx_string(lx, p + 1, q, &str)) || (rc = lx_push(lx, TK_STRING, 0, p, q + 1 - p, &tk)))
                return rc;
            tk->v.s = str;
            lx->pos = q + 1;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (starts(s, n, p, ops[k].text))
                break;
        if (k == sizeof ops / sizeof ops[0]) {
            size_t adv;
            uint32_t cp = tu_decode(s + p, n - p, &adv);
            if (cp >= 0x20 && cp != 0x7f)
                return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p, "unexpected character '%.*s'",
                                    (int)adv, s + p);
            return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p, "unexpected character U+%04X", cp);
        }
        uint8_t op = ops[k].op;
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (lx->sp == sizeof lx->stack)
                return tmpl_fail_at(lx->t, lx->err, EM_ERANGE, p,
                                    "brackets nested deeper than %d (EM_TMPL_MAX_NESTING)", TL_NEST);
            lx->stack[lx->sp++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            if (!lx->sp)
                return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p, "unexpected '%c'", ch);
            char want = lx->stack[--lx->sp];
            if (want != ch)
                return tmpl_fail_at(lx->t, lx->err, EM_EFORMAT, p, "unexpected '%c', expected '%c'",
                                    ch, want);
        }
        if ((rc = lx_push(lx, TK_OP, op, p, strlen(ops[k].text), NULL)))
            return rc;
        lx->pos += strlen(ops[k].text);
    }
}

/* The end of "{%[-+]? \s* endraw \s* (+%} | -%}\s* | %}\n?)" at p, or 0. */
static size_t endraw_at(const char *s, size_t n, size_t p, char *sign)
{
    if (!starts(s, n, p, "{%"))
        return 0;
    size_t q = p + 2;
    *sign = 0;
    if (q < n && (s[q] == '-' || s[q] == '+'))
        *sign = s[q++];
    q += ws_len(s, n, q);
    if (!starts(s, n, q, "endraw"))
        return 0;
    q += 6;
    q += ws_len(s, n, q);
    if (starts(s, n, q, "+%}"))
        return q + 3;
    if (starts(s, n, q, "-%}"))
        return q + 3 + ws_len(s, n, q + 3);
    if (starts(s, n, q, "%}"))
        return q + 2 + (q + 2 < n && s[q + 2] == '\n');
    return 0;
}

int tmpl_lex(em_tmpl *t, ttok **toks, size_t *n_toks, em_err *err)
{
    lexer lx = { .t = t, .s = t->src, .n = t->src_len, .err = err };
    const char *s = lx.s;
    size_t n = lx.n;
    int line_starting = 1, rc = 0;
    while (lx.pos < n) {
        const char *q0 = s + lx.pos;
        size_t q = lx.pos;
        for (;;) {
            const char *hit = memchr(q0, '{', (size_t)(s + n - q0));
            if (!hit) {
                q = n;
                break;
            }
            q = (size_t)(hit - s);
            if (q + 1 < n && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))
                break;
            q0 = hit + 1;
        }
        if (q >= n) {
            rc = lx_push(&lx, TK_DATA, 0, lx.pos, n - lx.pos, NULL);
            lx.pos = n;
            break;
        }
        char kind = s[q + 1], sign = 0;
        size_t p = q + 2;
        if (p < n && (s[p] == '-' || s[p] == '+'))
            sign = s[p++];
        /* {% raw %}: the root rule tries it first */
        size_t raw_end = 0;
        if (kind == '%') {
            size_t r = p + ws_len(s, n, p);
            if (starts(s, n, r, "raw")) {
                r += 3;
                r += ws_len(s, n, r);
                if (starts(s, n, r, "-%}"))
                    raw_end = r + 3 + ws_len(s, n, r + 3);
                else if (starts(s, n, r, "%}"))
                    raw_end = r + 2;
            }
        }
        if ((rc = lx_data(&lx, lx.pos, q, sign, kind == '{', line_starting)))
            goto done;
        if (raw_end) {
            line_starting = s[raw_end - 1] == '\n';
            size_t k = raw_end, e = 0;
            char esign = 0;
            for (;;) {
                const char *hit = memchr(s + k, '{', n - k);
                if (!hit)
                    break;
                k = (size_t)(hit - s);
                if ((e = endraw_at(s, n, k, &esign)))
                    break;
                k++;
            }
            if (!e) {
                rc = tmpl_fail_at(t, err, EM_EFORMAT, q, "missing end of raw directive");
                goto done;
            }
            if ((rc = lx_data(&lx, raw_end, k, esign, 0, line_starting)))
                goto done;
            lx.pos = e;
            line_starting = s[e - 1] == '\n';
            continue;
        }
        if (kind == '#') {
            const char *hit = NULL;
            for (size_t k = p; k + 1 < n; k++)
                if (s[k] == '#' && s[k + 1] == '}') {
                    hit = s + k;
                    break;
                }
            if (!hit) {
                rc = tmpl_fail_at(t, err, EM_EFORMAT, q, "missing end of comment tag");
                goto done;
            }
            size_t c = (size_t)(hit - s), end = c + 2;
            if (c > p && s[c - 1] == '-')
                end += ws_len(s, n, end);
            else if (!(c > p && s[c - 1] == '+') && end < n && s[end] == '\n')
                end++;
            lx.pos = end;
            line_starting = s[end - 1] == '\n';
            continue;
        }
        if ((rc = lx_push(&lx, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, 0, q, p - q, NULL)))
            goto done;
        lx.pos = p;
        line_starting = 0;
        int eof = 0;
        if ((rc = lx_tag(&lx, kind == '{', &line_starting, &eof)))
            goto done;
        if (eof)
            break;
    }
    rc = lx_push(&lx, TK_EOF, 0, n, 0, NULL);
done:
    if (rc) {
        free(lx.toks);
        lx.toks = NULL;
        lx.nt = 0;
    }
    *toks = lx.toks;
    *n_toks = lx.nt;
    return rc;
}
