/* chat_tmpl_filters.c — Jinja2's builtin filters and tests as the chat
 * templates use them (tojson as transformers defines it), with Jinja's
 * signatures, defaults and quirks: map/select/sort/unique through
 * attribute paths, default's boolean flag, int's float fallback, indent's
 * splitlines, title's word rule, Markup strings from safe/escape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

enum {
    F_NONE, F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST,
    F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST,
    F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE,
    F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE,
    F_UPPER, F_WORDCOUNT,
};

static const struct { const char *name; int id; } filters[] = {
    { "abs", F_ABS }, { "attr", F_ATTR }, { "batch", F_BATCH }, { "capitalize", F_CAPITALIZE },
    { "center", F_CENTER }, { "count", F_LENGTH }, { "d", F_DEFAULT }, { "default", F_DEFAULT },
    { "dictsort", F_DICTSORT }, { "e", F_ESCAPE }, { "escape", F_ESCAPE }, { "first", F_FIRST },
    { "float", F_FLOAT }, { "forceescape", F_FORCEESCAPE }, { "format", F_FORMAT },
    { "indent", F_INDENT }, { "int", F_INT }, { "items", F_ITEMS }, { "join", F_JOIN },
    { "last", F_LAST }, { "length", F_LENGTH }, { "list", F_LIST }, { "lower", F_LOWER },
    { "map", F_MAP }, { "max", F_MAX }, { "min", F_MIN }, { "reject", F_REJECT },
    { "rejectattr", F_REJECTATTR }, { "replace", F_REPLACE }, { "reverse", F_REVERSE },
    { "round", F_ROUND }, { "safe", F_SAFE }, { "select", F_SELECT }, { "selectattr", F_SELECTATTR },
    { "sort", F_SORT }, { "string", F_STRING }, { "sum", F_SUM }, { "title", F_TITLE },
    { "tojson", F_TOJSON }, { "trim", F_TRIM }, { "truncate", F_TRUNCATE }, { "unique", F_UNIQUE },
    { "upper", F_UPPER }, { "wordcount", F_WORDCOUNT },
    /* Jinja has these; ember does not (none is in a known chat template) */
    { "filesizeformat", -1 }, { "groupby", -1 }, { "pprint", -1 }, { "random", -1 },
    { "slice", -1 }, { "striptags", -1 }, { "urlencode", -1 }, { "urlize", -1 },
    { "wordwrap", -1 }, { "xmlattr", -1 },
};

enum {
    T_NONE, T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_ESCAPED, T_EVEN, T_FALSE,
    T_FILTER, T_FLOAT, T_GE, T_GT, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LOWER, T_LT, T_MAPPING,
    T_NE, T_NONEV, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE, T_UNDEFINED,
    T_UPPER,
};

static const struct { const char *name; int id; } tests[] = {
    { "boolean", T_BOOLEAN }, { "callable", T_CALLABLE }, { "defined", T_DEFINED },
    { "divisibleby", T_DIVISIBLEBY }, { "eq", T_EQ }, { "equalto", T_EQ }, { "==", T_EQ },
    { "escaped", T_ESCAPED }, { "even", T_EVEN }, { "false", T_FALSE }, { "filter", T_FILTER },
    { "float", T_FLOAT }, { "ge", T_GE }, { ">=", T_GE }, { "gt", T_GT }, { "greaterthan", T_GT },
    { ">", T_GT }, { "in", T_IN }, { "integer", T_INTEGER }, { "iterable", T_ITERABLE },
    { "le", T_LE }, { "<=", T_LE }, { "lower", T_LOWER }, { "lt", T_LT }, { "lessthan", T_LT },
    { "<", T_LT }, { "mapping", T_MAPPING }, { "ne", T_NE }, { "!=", T_NE }, { "none", T_NONEV },
    { "number", T_NUMBER }, { "odd", T_ODD }, { "sameas", T_SAMEAS }, { "sequence", T_SEQUENCE },
    { "string", T_STRING }, { "test", T_TEST }, { "true", T_TRUE }, { "undefined", T_UNDEFINED },
    { "upper", T_UPPER },
};

int tf_filter_id(const char *name)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name))
            return filters[i].id;
    return 0;
}

int tf_test_id(const char *name)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!strcmp(tests[i].name, name))
            return tests[i].id;
    return 0;
}

int tf_escape(tctx *c, tbuf *b, const char *s, size_t n)
{
    int rc = 0;
    size_t run = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: continue;
        }
        if ((rc = tb_put(c, b, s + run, i - run)) == 0)
            rc = tb_put(c, b, rep, strlen(rep));
        run = i + 1;
    }
    return rc ? rc : tb_put(c, b, s + run, n - run);
}

static int type_error(tctx *c, const char *fn, const tval *v)
{
    return tc_fail(c, NULL, EM_EINVAL, "%s: unsupported value of type '%s'", fn, tv_type_name(v));
}

/* soft_str: a string stays itself (Markup included); anything else is str(). */
static int soft_str(tctx *c, const tval *v, tval *out)
{
    return tv_to_str(c, v, out);
}

int tf_int_arg(tctx *c, const char *fn, const tval *v, int64_t dflt, int64_t *out)
{
    if (v->t == TV_ABSENT) {
        *out = dflt;
        return 0;
    }
    if (v->t == TV_INT || v->t == TV_BOOL) {
        *out = v->u.i;
        return 0;
    }
    return tc_fail(c, NULL, EM_EINVAL, "%s: expected an integer, got '%s'", fn, tv_type_name(v));
}

/* ----------------------------------------------------------- filters */

static int f_tojson(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "ensure_ascii", "indent", "separators", "sort_keys" };
    tval p[4];
    int rc = targs_bind(c, "tojson", names, 4, a, p);
    if (rc)
        return rc;
    tjson_opts o = { .item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2 };
    o.ensure_ascii = p[0].t != TV_ABSENT && tv_truthy(&p[0]);
    o.sort_keys = p[3].t != TV_ABSENT && tv_truthy(&p[3]);
    char spaces[256];
    if (p[1].t != TV_ABSENT && p[1].t != TV_NONE) {
        o.indent_set = 1;
        o.item_sep = ",";
        o.item_sep_len = 1;
        if (p[1].t == TV_STR) {
            o.indent = tv_s(&p[1])->s;
            o.indent_len = tv_s(&p[1])->len;
        } else if (p[1].t == TV_INT || p[1].t == TV_BOOL) {
            int64_t w = p[1].u.i < 0 ? 0 : p[1].u.i;
            if (w > (int64_t)sizeof spaces)
                return tc_fail(c, NULL, EM_EUNSUPPORTED, "tojson: indent above %zu", sizeof spaces);
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            return type_error(c, "tojson indent", &p[1]);
        }
    }
    if (p[2].t != TV_ABSENT && p[2].t != TV_NONE) {
        const tlist *l = p[2].t == TV_LIST ? tv_l(&p[2]) : NULL;
        if (!l || l->n != 2 || l->v[0].t != TV_STR || l->v[1].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "tojson: separators must be two strings");
        o.item_sep = tv_s(&l->v[0])->s;
        o.item_sep_len = tv_s(&l->v[0])->len;
        o.key_sep = tv_s(&l->v[1])->s;
        o.key_sep_len = tv_s(&l->v[1])->len;
    }
    tbuf b = { 0 };
    if ((rc = tv_write_json(c, &b, v, &o, 0))) {
        tb_free(c, &b);
        return rc;
    }
    return ts_from_buf(c, &b, out);
}

static int f_length(tctx *c, const tval *v, tval *out)
{
    switch (v->t) {
    case TV_STR: *out = tv_int((int64_t)tv_s(v)->nchars); return 0;
    case TV_LIST: *out = tv_int((int64_t)tv_l(v)->n); return 0;
    case TV_DICT: *out = tv_int((int64_t)tv_d(v)->n); return 0;
    case TV_UNDEF: *out = tv_int(0); return 0;
    case TV_LOOP: *out = tv_int((int64_t)((const tloop *)v->u.o)->length); return 0;
    default:
        return tc_fail(c, NULL, EM_EINVAL, "object of type '%s' has no len()", tv_type_name(v));
    }
}

static int f_case(tctx *c, const tval *v, int how, tval *out)
{
    tval s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    tbuf b = { 0 };
    if (how == TCASE_TITLE) {   /* Jinja's title: words begin after [-\s({\[<] */
        const tstr *t = tv_s(&s);
        int start = 1;
        for (size_t i = 0; i < t->len && !rc;) {
            size_t adv;
            uint32_t cp = tu_decode(t->s + i, t->len - i, &adv);
            int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || tu_is_space(cp);
            if (sep) {
                rc = tb_put(c, &b, t->s + i, adv);
                start = 1;
            } else {
                rc = tu_case(c, &b, t->s + i, adv, start ? TCASE_UPPER : TCASE_LOWER);
                start = 0;
            }
            i += adv;
        }
    } else {
        rc = tu_case(c, &b, tv_s(&s)->s, tv_s(&s)->len, how);
    }
    uint8_t fl = how == TCASE_TITLE ? 0 : s.fl & TVF_SAFE;   /* title joins with str.join: plain */
    tv_drop(c, &s);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = fl;
    return 0;
}

/* trim(value, chars=None) is str(value).strip(chars) */
static int f_trim(tctx *c, const tval *v, const targs *a, tval *out)
{
    tval s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    rc = tm_call_method(c, &s, tm_method_id(&s, "strip", 5), a, out);
    tv_drop(c, &s);
    return rc;
}

static int f_indent(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "width", "first", "blank" };
    tval p[3], lines = tv_undef();
    int rc = targs_bind(c, "indent", names, 3, a, p);
    if (rc)
        return rc;
    if (v->t != TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "indent: expected a string, got '%s'", tv_type_name(v));
    tbuf ind = { 0 }, b = { 0 };
    if (p[0].t == TV_STR) {
        rc = tb_put(c, &ind, tv_s(&p[0])->s, tv_s(&p[0])->len);
    } else {
        int64_t w = 0;
        if (!(rc = tf_int_arg(c, "indent", &p[0], 4, &w)))
            for (int64_t i = 0; i < w && !rc; i++)
                rc = tb_putc(c, &ind, ' ');
    }
    int first = p[1].t != TV_ABSENT && tv_truthy(&p[1]);
    int blank = p[2].t != TV_ABSENT && tv_truthy(&p[2]);
    if (rc)
        goto done;
    /* s += "\n"; s.splitlines() */
    {
        const tstr *s = tv_s(v);
        tbuf sn = { 0 };
        if ((rc = tb_put(c, &sn, s->s, s->len)) || (rc = tb_putc(c, &sn, '\n'))) {
            tb_free(c, &sn);
            goto done;
        }
        rc = tu_splitlines(c, sn.p, sn.n, &lines);
        tb_free(c, &sn);
        if (rc)
            goto done;
    }
    const tlist *l = tv_l(&lines);
    const char *ip = ind.p ? ind.p : "";
    if (first)
        rc = tb_put(c, &b, ip, ind.n);
    for (size_t i = 0; i < l->n && !rc; i++) {
        const tstr *line = tv_s(&l->v[i]);
        if (i) {
            rc = tb_putc(c, &b, '\n');
            if (!rc && (blank || line->len))
                rc = tb_put(c, &b, ip, ind.n);
        }
        if (!rc)
            rc = tb_put(c, &b, line->s, line->len);
    }
    if (!rc) {
        rc = ts_from_buf(c, &b, out);
        if (!rc)
            out->fl = v->fl & TVF_SAFE;
    }
done:
    tb_free(c, &b);
    tb_free(c, &ind);
    tv_drop(c, &lines);
    return rc;
}

/* Python int(str, base): whitespace, sign, underscores, prefixes. */
static int parse_py_int(const char *s, size_t n, int base, int64_t *out)
{
    size_t st, en;
    tu_strip(s, n, NULL, 0, 3, &st, &en);
    s += st;
    n = en - st;
    int neg = 0;
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (i + 1 < n && s[i] == '0') {
        char p = (char)(s[i + 1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            i += 2;
            if (i < n && s[i] == '_')
                i++;
        }
    }
    if (base == 0)
        base = 10;
    if (i >= n)
        return -1;
    uint64_t v = 0;
    int last_us = 1;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (last_us)
                return -1;
            last_us = 1;
            continue;
        }
        int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z'
                                                           ? (s[i] | 0x20) - 'a' + 10 : 99;
        if (d >= base)
            return -1;
        if (v > (UINT64_C(9223372036854775808) - (uint64_t)d) / (uint64_t)base)
            return -2;
        v = v * (uint64_t)base + (uint64_t)d;
        last_us = 0;
    }
    if (last_us || (!neg && v > INT64_MAX))
        return last_us ? -1 : -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Python float(str). */
static int parse_py_float(const char *s, size_t n, double *out)
{
    size_t st, en;
    tu_strip(s, n, NULL, 0, 3, &st, &en);
    char buf[256];
    size_t o = 0;
    for (size_t i = st; i < en; i++) {
        if (s[i] == '_') {
            if (i == st || i + 1 >= en || !(s[i - 1] >= '0' && s[i - 1] <= '9') ||
                !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return -1;
            continue;
        }
        if (o + 1 >= sizeof buf || (unsigned char)s[i] >= 0x80)
            return -1;
        buf[o++] = s[i];
    }
    buf[o] = '\0';
    if (!o)
        return -1;
    /* strtod also takes hex floats and "infinity"/"nan(...)" forms; Python takes inf/nan words */
    for (size_t i = 0; i < o; i++)
        if ((buf[i] | 0x20) == 'x' || buf[i] == '(')
            return -1;
    char *end;
    double v = strtod(buf, &end);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static int big_float(tctx *c, double f)
{
    if (isinf(f))
        return tc_fail(c, NULL, EM_EINVAL, "cannot convert float infinity to integer");
    return tc_fail(c, NULL, EM_ERANGE, "integer too large (ember's integers are 64-bit)");
}

static int f_int(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "default", "base" };
    tval p[2];
    int rc = targs_bind(c, "int", names, 2, a, p);
    if (rc)
        return rc;
    int64_t base = 10;
    if ((rc = tf_int_arg(c, "int", &p[1], 10, &base)))
        return rc;
    switch (v->t) {
    case TV_INT:
    case TV_BOOL: *out = tv_int(v->u.i); return 0;
    case TV_FLOAT:
        if (isnan(v->u.f))
            break;
        if (isinf(v->u.f) || fabs(v->u.f) >= 9.2233720368547758e18)
            return big_float(c, v->u.f);
        *out = tv_int((int64_t)v->u.f);
        return 0;
    case TV_UNDEF:
        return te_undef_error(c, v);
    case TV_STR: {
        int64_t i;
        double f;
        int r = (base == 0 || (base >= 2 && base <= 36)) ? parse_py_int(tv_s(v)->s, tv_s(v)->len, (int)base, &i) : -1;
        if (r == -2)
            return tc_fail(c, NULL, EM_ERANGE, "integer too large (ember's integers are 64-bit)");
        if (r == 0) {
            *out = tv_int(i);
            return 0;
        }
        if (parse_py_float(tv_s(v)->s, tv_s(v)->len, &f) == 0 && !isnan(f)) {
            if (isinf(f) || fabs(f) >= 9.2233720368547758e18)
                return big_float(c, f);
            *out = tv_int((int64_t)f);
            return 0;
        }
        break;
    }
    default:
        break;
    }
    *out = p[0].t == TV_ABSENT ? tv_int(0) : tv_ref(p[0]);
    return 0;
}

static int f_float(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "default" };
    tval p[1];
    int rc = targs_bind(c, "float", names, 1, a, p);
    if (rc)
        return rc;
    double f;
    switch (v->t) {
    case TV_INT:
    case TV_BOOL: *out = tv_float((double)v->u.i); return 0;
    case TV_FLOAT: *out = *v; return 0;
    case TV_UNDEF: return te_undef_error(c, v);
    case TV_STR:
        if (parse_py_float(tv_s(v)->s, tv_s(v)->len, &f) == 0) {
            *out = tv_float(f);
            return 0;
        }
        break;
    default:
        break;
    }
    *out = p[0].t == TV_ABSENT ? tv_float(0.0) : tv_ref(p[0]);
    return 0;
}

static int f_round(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "precision", "method" };
    tval p[2];
    int64_t prec = 0;
    int rc = targs_bind(c, "round", names, 2, a, p);
    if (rc || (rc = tf_int_arg(c, "round", &p[0], 0, &prec)))
        return rc;
    const char *method = p[1].t == TV_STR ? tv_s(&p[1])->s : "common";
    if (p[1].t != TV_ABSENT && p[1].t != TV_STR)
        method = "?";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return tc_fail(c, NULL, EM_EINVAL, "method must be common, ceil or floor");
    if (v->t == TV_UNDEF)
        return te_undef_error(c, v);
    if (v->t != TV_INT && v->t != TV_BOOL && v->t != TV_FLOAT)
        return tc_fail(c, NULL, EM_EINVAL, "type %s doesn't define __round__ method", tv_type_name(v));
    if (prec > 300)
        prec = 300;
    if (prec < -300)
        prec = -300;
    double x = v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
    if (strcmp(method, "common")) {
        double scale = pow(10.0, (double)prec);
        double r = (method[0] == 'c' ? ceil(x * scale) : floor(x * scale)) / scale;
        *out = tv_float(r);
        return 0;
    }
    if (v->t != TV_FLOAT) {   /* round(int, n) stays an int */
        if (prec >= 0) {
            *out = tv_int(v->u.i);
            return 0;
        }
        double scale = pow(10.0, (double)-prec), q = (double)v->u.i / scale, r = nearbyint(q);
        *out = tv_int((int64_t)(r * scale));
        return 0;
    }
    if (isnan(x) || isinf(x)) {
        *out = *v;
        return 0;
    }
    char buf[512];
    if (prec >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)(prec > 340 ? 340 : prec), x);
        *out = tv_float(strtod(buf, NULL));
    } else {
        double scale = pow(10.0, (double)-prec);
        snprintf(buf, sizeof buf, "%.0f", x / scale);
        *out = tv_float(strtod(buf, NULL) * scale);
    }
    return 0;
}

static int f_replace(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "old", "new", "count" };
    tval p[3], s, old = tv_undef(), nw = tv_undef();
    int rc = targs_bind(c, "replace", names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT || p[1].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "replace() needs old and new");
    if ((rc = tv_to_str(c, v, &s)))
        return rc;
    if (!(rc = tv_to_str(c, &p[0], &old)) && !(rc = tv_to_str(c, &p[1], &nw))) {
        /* the str method does the work: build its argument list */
        targs ma = { 0 };
        tval margs[3] = { old, nw, p[2].t == TV_ABSENT || p[2].t == TV_NONE ? tv_int(-1) : p[2] };
        ma.pos = margs;
        ma.npos = 3;
        int id = tm_method_id(&s, "replace", 7);
        tval plain = s;
        plain.fl = 0;
        rc = tm_call_method(c, &plain, id, &ma, out);
    }
    tv_drop(c, &old);
    tv_drop(c, &nw);
    tv_drop(c, &s);
    return rc;
}

static int f_truncate(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "length", "killwords", "end", "leeway" };
    tval p[4], s;
    int64_t length = 0, leeway = 0;
    int rc = targs_bind(c, "truncate", names, 4, a, p);
    if (rc || (rc = tf_int_arg(c, "truncate", &p[0], 255, &length)) ||
        (rc = tf_int_arg(c, "truncate", &p[3], 5, &leeway)))
        return rc;
    if (p[3].t == TV_NONE)
        leeway = 5;
    const char *end = "...";
    size_t end_len = 3, end_chars = 3;
    if (p[2].t == TV_STR) {
        end = tv_s(&p[2])->s;
        end_len = tv_s(&p[2])->len;
        end_chars = tv_s(&p[2])->nchars;
    }
    if (length < (int64_t)end_chars)
        return tc_fail(c, NULL, EM_EINVAL, "expected length >= %zu, got %lld", end_chars, (long long)length);
    if (leeway < 0)
        return tc_fail(c, NULL, EM_EINVAL, "expected leeway >= 0, got %lld", (long long)leeway);
    if (v->t != TV_STR) {   /* len(s) of the value itself; only strings get cut */
        tval n;
        if ((rc = f_length(c, v, &n)))
            return rc;
        if (n.u.i <= length + leeway) {
            *out = tv_ref(*v);
            return 0;
        }
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "truncate: only strings can be cut, not '%s'", tv_type_name(v));
    }
    s = tv_ref(*v);
    const tstr *t = tv_s(&s);
    if ((int64_t)t->nchars <= length + leeway) {
        *out = s;
        return 0;
    }
    size_t cut = ts_offset(t, (size_t)(length - (int64_t)end_chars));
    if (!(p[1].t != TV_ABSENT && tv_truthy(&p[1]))) {   /* rsplit(" ", 1)[0] */
        for (size_t i = cut; i-- > 0;)
            if (t->s[i] == ' ') {
                cut = i;
                break;
            }
    }
    tbuf b = { 0 };
    if ((rc = tb_put(c, &b, t->s, cut)) || (rc = tb_put(c, &b, end, end_len)))
        tb_free(c, &b);
    else
        rc = ts_from_buf(c, &b, out);
    tv_drop(c, &s);
    return rc;
}

static int f_center(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "width" };
    tval p[1], s;
    int rc = targs_bind(c, "center", names, 1, a, p);
    if (rc || (rc = soft_str(c, v, &s)))
        return rc;
    tval w = p[0].t == TV_ABSENT ? tv_int(80) : p[0];
    targs ma = { &w, 1, NULL, NULL, 0 };
    rc = tm_call_method(c, &s, tm_method_id(&s, "center", 6), &ma, out);
    tv_drop(c, &s);
    return rc;
}

static int f_wordcount(tctx *c, const tval *v, tval *out)
{
    tval s;
    int rc = soft_str(c, v, &s);
    if (rc)
        return rc;
    const tstr *t = tv_s(&s);
    int64_t n = 0;
    int in = 0;
    for (size_t i = 0; i < t->len;) {
        size_t adv;
        uint32_t cp = tu_decode(t->s + i, t->len - i, &adv);
        int w = cp == '_' || tu_is_alnum(cp);
        if (w && !in)
            n++;
        in = w;
        i += adv;
    }
    tv_drop(c, &s);
    *out = tv_int(n);
    return 0;
}

static int f_escape(tctx *c, const tval *v, int force, tval *out)
{
    int rc;
    if (v->t == TV_STR && (v->fl & TVF_SAFE) && !force) {
        *out = tv_ref(*v);
        return 0;
    }
    tval s;
    if ((rc = tv_to_str(c, v, &s)))
        return rc;
    tbuf b = { 0 };
    rc = tf_escape(c, &b, tv_s(&s)->s, tv_s(&s)->len);
    tv_drop(c, &s);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = TVF_SAFE;
    return 0;
}

int tf_apply_filter(tctx *c, int id, const tval *v, const targs *a, tval *out)
{
    int rc;
    tval p[2];
    switch (id) {
    case F_TOJSON: return f_tojson(c, v, a, out);
    case F_LENGTH: return f_length(c, v, out);
    case F_UPPER: return f_case(c, v, TCASE_UPPER, out);
    case F_LOWER: return f_case(c, v, TCASE_LOWER, out);
    case F_CAPITALIZE: return f_case(c, v, TCASE_CAPITALIZE, out);
    case F_TITLE: return f_case(c, v, TCASE_TITLE, out);
    case F_TRIM: return f_trim(c, v, a, out);
    case F_JOIN: return tfs_join(c, v, a, out);
    case F_FIRST: return tfs_first_last(c, v, 0, out);
    case F_LAST: return tfs_first_last(c, v, 1, out);
    case F_LIST: return tfs_list(c, v, out);
    case F_ITEMS: return tfs_items(c, v, 0, out);
    case F_DICTSORT: return tfs_dictsort(c, v, a, out);
    case F_SELECT: return tfs_select(c, v, a, 1, 0, out);
    case F_REJECT: return tfs_select(c, v, a, 0, 0, out);
    case F_SELECTATTR: return tfs_select(c, v, a, 1, 1, out);
    case F_REJECTATTR: return tfs_select(c, v, a, 0, 1, out);
    case F_MAP: return tfs_map(c, v, a, out);
    case F_SORT: return tfs_sort(c, TFS_SORT, v, a, out);
    case F_UNIQUE: return tfs_sort(c, TFS_UNIQUE, v, a, out);
    case F_MIN: return tfs_sort(c, TFS_MIN, v, a, out);
    case F_MAX: return tfs_sort(c, TFS_MAX, v, a, out);
    case F_INDENT: return f_indent(c, v, a, out);
    case F_INT: return f_int(c, v, a, out);
    case F_FLOAT: return f_float(c, v, a, out);
    case F_ROUND: return f_round(c, v, a, out);
    case F_REPLACE: return f_replace(c, v, a, out);
    case F_TRUNCATE: return f_truncate(c, v, a, out);
    case F_SUM: return tfs_sum(c, v, a, out);
    case F_REVERSE: return tfs_reverse(c, v, out);
    case F_BATCH: return tfs_batch(c, v, a, out);
    case F_CENTER: return f_center(c, v, a, out);
    case F_WORDCOUNT: return f_wordcount(c, v, out);
    case F_ESCAPE: return f_escape(c, v, 0, out);
    case F_FORCEESCAPE: return f_escape(c, v, 1, out);
    case F_STRING:
        return soft_str(c, v, out);
    case F_SAFE:
        if ((rc = tv_to_str(c, v, out)))
            return rc;
        out->fl = TVF_SAFE;
        return 0;
    case F_DEFAULT: {
        static const char *const names[] = { "default_value", "boolean" };
        if ((rc = targs_bind(c, "default", names, 2, a, p)))
            return rc;
        int boolean = p[1].t != TV_ABSENT && tv_truthy(&p[1]);
        if (v->t == TV_UNDEF || (boolean && !tv_truthy(v))) {
            if (p[0].t == TV_ABSENT)
                return ts_new(c, "", 0, out);
            *out = tv_ref(p[0]);
        } else {
            *out = tv_ref(*v);
        }
        return 0;
    }
    case F_ABS:
        if (v->t == TV_INT || v->t == TV_BOOL) {
            if (v->u.i == INT64_MIN)
                return tc_fail(c, NULL, EM_ERANGE, "integer overflow");
            *out = tv_int(v->u.i < 0 ? -v->u.i : v->u.i);
            return 0;
        }
        if (v->t == TV_FLOAT) {
            *out = tv_float(fabs(v->u.f));
            return 0;
        }
        if (v->t == TV_UNDEF)
            return te_undef_error(c, v);
        return tc_fail(c, NULL, EM_EINVAL, "bad operand type for abs(): '%s'", tv_type_name(v));
    case F_ATTR: {
        static const char *const names[] = { "name" };
        if ((rc = targs_bind(c, "attr", names, 1, a, p)))
            return rc;
        if (p[0].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "attribute name must be string");
        /* getattr() only: a dict's keys are not its attributes */
        if (v->t == TV_DICT && tm_method_id(v, tv_s(&p[0])->s, tv_s(&p[0])->len) == 0) {
            *out = te_undef_msg(c, "'dict object' has no attribute '%.200s'", tv_s(&p[0])->s);
            return 0;
        }
        return te_getattr(c, v, &p[0], out);
    }
    case F_FORMAT: {
        tval s, args;
        if (a->npos && a->nkw)
            return tc_fail(c, NULL, EM_EINVAL, "can't handle positional and keyword arguments at the same time");
        if ((rc = soft_str(c, v, &s)))
            return rc;
        if (a->nkw) {
            rc = td_new(c, 0, &args);
            for (size_t i = 0; i < a->nkw && !rc; i++) {
                tval k;
                if (!(rc = ts_cstr(c, a->kname[i], &k)))
                    rc = td_set(c, &args, k, tv_ref(a->kval[i]));
            }
        } else {
            rc = tl_new(c, a->npos, TVF_TUPLE, &args);
            for (size_t i = 0; i < a->npos && !rc; i++)
                rc = tl_push(c, &args, tv_ref(a->pos[i]));
        }
        if (!rc)
            rc = tu_percent_format(c, &s, &args, out);
        tv_drop(c, &args);
        tv_drop(c, &s);
        return rc;
    }
    default:
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "filter not supported");
    }
}

int tf_filter_by_name(tctx *c, const char *name, const tval *value, const targs *a, tval *out)
{
    int id = tf_filter_id(name);
    if (id <= 0)
        return tc_fail(c, NULL, EM_EINVAL, id ? "filter '%s' is not supported by ember" : "unknown filter '%s'",
                       name);
    return tf_apply_filter(c, id, value, a, out);
}

/* ------------------------------------------------------------- tests */

static int test_arg(tctx *c, const char *name, const targs *a, const tval **arg)
{
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "test '%s' takes no keyword arguments", name);
    if (a->npos != 1)
        return tc_fail(c, NULL, EM_EINVAL, "test '%s' takes exactly one argument (%zu given)", name, a->npos);
    *arg = &a->pos[0];
    return 0;
}

static int str_case_test(tctx *c, const tval *v, int upper, int *r)
{
    tval s;
    int rc = tv_to_str(c, v, &s);
    if (rc)
        return rc;
    const tstr *t = tv_s(&s);
    int cased = 0, ok = 1;
    for (size_t i = 0; i < t->len;) {
        size_t adv;
        uint32_t cp = tu_decode(t->s + i, t->len - i, &adv);
        if (tu_is_cased(cp)) {
            cased = 1;
            if (upper ? tu_upper(cp) != cp : tu_lower(cp) != cp)
                ok = 0;
        }
        i += adv;
    }
    tv_drop(c, &s);
    *r = cased && ok;
    return 0;
}

int tf_apply_test(tctx *c, int id, const tval *v, const targs *a, int *r)
{
    const tval *arg = NULL;
    int rc = 0, cmp;
    tval m;
    if (id != T_DIVISIBLEBY && id != T_EQ && id != T_NE && id != T_LT && id != T_LE && id != T_GT &&
        id != T_GE && id != T_IN && id != T_SAMEAS && (a->npos || a->nkw))
        return tc_fail(c, NULL, EM_EINVAL, "this test takes no arguments");
    switch (id) {
    case T_DEFINED: *r = v->t != TV_UNDEF; return 0;
    case T_UNDEFINED: *r = v->t == TV_UNDEF; return 0;
    case T_NONEV: *r = v->t == TV_NONE; return 0;
    case T_BOOLEAN: *r = v->t == TV_BOOL; return 0;
    case T_TRUE: *r = v->t == TV_BOOL && v->u.i; return 0;
    case T_FALSE: *r = v->t == TV_BOOL && !v->u.i; return 0;
    case T_INTEGER: *r = v->t == TV_INT; return 0;
    case T_FLOAT: *r = v->t == TV_FLOAT; return 0;
    case T_NUMBER: *r = v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL; return 0;
    case T_STRING: *r = v->t == TV_STR; return 0;
    case T_MAPPING: *r = v->t == TV_DICT; return 0;
    case T_ITERABLE:
        *r = v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_UNDEF || v->t == TV_LOOP;
        return 0;
    case T_SEQUENCE:
        *r = v->t == TV_STR || (v->t == TV_LIST && !(v->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))) ||
             v->t == TV_DICT || v->t == TV_UNDEF;
        return 0;
    case T_CALLABLE:
        *r = v->t == TV_MACRO || v->t == TV_FUNC || v->t == TV_METHOD || v->t == TV_LOOP ||
             v->t == TV_UNDEF;   /* Undefined has __call__ */
        return 0;
    case T_ESCAPED: *r = v->t == TV_STR && (v->fl & TVF_SAFE); return 0;
    case T_LOWER: return str_case_test(c, v, 0, r);
    case T_UPPER: return str_case_test(c, v, 1, r);
    case T_ODD:
    case T_EVEN: {
        tval two = tv_int(2);
        if ((rc = te_arith(c, OP_MOD, v, &two, &m)))
            return rc;
        tval one = tv_int(id == T_ODD ? 1 : 0);
        rc = tv_eq(c, &m, &one, r);
        tv_drop(c, &m);
        return rc;
    }
    case T_FILTER:
    case T_TEST:
        if (v->t != TV_STR) {
            *r = 0;
            return 0;
        }
        *r = (id == T_FILTER ? tf_filter_id(tv_s(v)->s) : tf_test_id(tv_s(v)->s)) > 0;
        return 0;
    default:
        break;
    }
    if ((rc = test_arg(c, "comparison", a, &arg)))
        return rc;
    switch (id) {
    case T_DIVISIBLEBY: {
        if ((rc = te_arith(c, OP_MOD, v, arg, &m)))
            return rc;
        tval zero = tv_int(0);
        rc = tv_eq(c, &m, &zero, r);
        tv_drop(c, &m);
        return rc;
    }
    case T_EQ: return tv_eq(c, v, arg, r);
    case T_NE: rc = tv_eq(c, v, arg, r); *r = !*r; return rc;
    case T_LT: rc = tv_cmp(c, v, arg, &cmp, "<"); *r = cmp == -1; return rc;
    case T_LE: rc = tv_cmp(c, v, arg, &cmp, "<="); *r = cmp == -1 || cmp == 0; return rc;
    case T_GT: rc = tv_cmp(c, v, arg, &cmp, ">"); *r = cmp == 1; return rc;
    case T_GE: rc = tv_cmp(c, v, arg, &cmp, ">="); *r = cmp == 1 || cmp == 0; return rc;
    case T_IN: {
        switch (arg->t) {
        case TV_STR:
        case TV_LIST:
        case TV_DICT:
        case TV_UNDEF:
            break;
        default:
            return tc_fail(c, NULL, EM_EINVAL, "argument of type '%s' is not iterable", tv_type_name(arg));
        }
        if (arg->t == TV_STR) {
            if (v->t != TV_STR)
                return tc_fail(c, NULL, EM_EINVAL, "'in <string>' requires string as left operand, not %s",
                               tv_type_name(v));
            *r = tv_s(v)->len == 0 ||
                 memmem(tv_s(arg)->s, tv_s(arg)->len, tv_s(v)->s, tv_s(v)->len) != NULL;
            return 0;
        }
        *r = 0;
        if (arg->t == TV_LIST) {
            for (size_t i = 0; i < tv_l(arg)->n && !*r && !rc; i++)
                rc = tv_eq(c, &tv_l(arg)->v[i], v, r);
            return rc;
        }
        if (arg->t == TV_DICT) {
            long at;
            if ((rc = td_find(c, tv_d(arg), v, &at)))
                return rc;
            *r = at >= 0;
        }
        return 0;
    }
    case T_SAMEAS:
        if (v->t != arg->t)
            *r = 0;
        else if (tv_is_obj(v))
            *r = v->u.o == arg->u.o;
        else if (v->t == TV_FLOAT)
            *r = v->u.f == arg->u.f;
        else
            *r = v->u.i == arg->u.i;
        return 0;
    default:
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "test not supported");
    }
}

int tf_test_by_name(tctx *c, const char *name, const tval *value, const targs *a, int *result)
{
    int id = tf_test_id(name);
    if (id <= 0)
        return tc_fail(c, NULL, EM_EINVAL, id ? "test '%s' is not supported by ember" : "unknown test '%s'", name);
    return tf_apply_test(c, id, value, a, result);
}
