/* chat_tmpl_format.c — string formatting in chat templates: str.format()
 * with replacement fields, conversions and the common format specs, and
 * printf-style "%" formatting (also the |format filter), both as Python
 * does them, Markup escaping included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

/* ---------------------------------------------------- str.format() */

static int fmt_pad(tctx *c, tbuf *b, const char *s, size_t n, size_t nchars, char align, const char *fill,
                   size_t fill_len, int64_t width)
{
    int rc = 0;
    int64_t pad = width > (int64_t)nchars ? width - (int64_t)nchars : 0;
    if (pad > (int64_t)TL_STRING)
        return tc_fail(c, NULL, EM_ERANGE, "format width too large");
    int64_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    for (int64_t i = 0; i < left && !rc; i++)
        rc = tb_put(c, b, fill, fill_len);
    if (!rc)
        rc = tb_put(c, b, s, n);
    for (int64_t i = 0; i < pad - left && !rc; i++)
        rc = tb_put(c, b, fill, fill_len);
    return rc;
}

/* One replacement field's value formatted with spec [[fill]align][sign][#][0][width][,][.prec][type]. */
static int fmt_value(tctx *c, tbuf *b, const tval *v, const char *spec, size_t n)
{
    char fill[4] = " ";
    size_t fill_len = 1, i = 0;
    char align = 0, sign = '-', type = 0;
    int alt = 0, zero = 0, comma = 0;
    int64_t width = -1, prec = -1;
    size_t adv = 0;
    if (n) {
        uint32_t cp = tu_decode(spec, n, &adv);
        if (adv < n && strchr("<>^=", spec[adv])) {
            fill_len = tu_encode(cp, fill);
            align = spec[adv];
            i = adv + 1;
        } else if (strchr("<>^=", spec[0])) {
            align = spec[0];
            i = 1;
        }
    }
    if (i < n && strchr("+- ", spec[i]))
        sign = spec[i++];
    if (i < n && spec[i] == '#')
        alt = 1, i++;
    if (i < n && spec[i] == '0')
        zero = 1, i++;
    if (i < n && spec[i] >= '0' && spec[i] <= '9') {
        width = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 100000000)
            width = width * 10 + (spec[i++] - '0');
    }
    if (i < n && (spec[i] == ',' || spec[i] == '_'))
        comma = 1, i++;
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 100000)
            prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n)
        type = spec[i++];
    if (i < n || comma)
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "format spec '%.*s' is not supported", (int)n, spec);
    if (zero && !align) {
        fill[0] = '0';
        fill_len = 1;
        align = '=';
    }
    char num[512];
    int rc;
    if (v->t == TV_STR || (!type && v->t != TV_INT && v->t != TV_FLOAT && v->t != TV_BOOL) || type == 's') {
        tval s;
        if (type && type != 's')
            return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c' for object of type 'str'", type);
        if ((rc = tv_to_str(c, v, &s)))
            return rc;
        const tstr *t = tv_s(&s);
        size_t len = t->len, nch = t->nchars;
        if (prec >= 0 && (size_t)prec < nch) {
            len = ts_offset(t, (size_t)prec);
            nch = (size_t)prec;
        }
        rc = fmt_pad(c, b, t->s, len, nch, align ? align : '<', fill, fill_len, width);
        tv_drop(c, &s);
        return rc;
    }
    if (v->t == TV_BOOL && !type) {
        rc = fmt_pad(c, b, v->u.i ? "True" : "False", v->u.i ? 4 : 5, v->u.i ? 4 : 5, align ? align : '<',
                     fill, fill_len, width);
        return rc;
    }
    int is_int = v->t == TV_INT || v->t == TV_BOOL;
    double f = is_int ? (double)v->u.i : v->u.f;
    int neg = is_int ? v->u.i < 0 : signbit(f);
    char body[400];
    if (!type)
        type = is_int ? 'd' : 'r';
    if (strchr("dxXobc", type)) {
        if (!is_int)
            return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c' for object of type 'float'", type);
        uint64_t mag = neg ? 0 - (uint64_t)v->u.i : (uint64_t)v->u.i;
        if (type == 'b') {
            size_t o = 0;
            char tmp[70];
            do {
                tmp[o++] = (char)('0' + (mag & 1));
                mag >>= 1;
            } while (mag);
            size_t k = 0;
            if (alt)
                body[k++] = '0', body[k++] = 'b';
            while (o)
                body[k++] = tmp[--o];
            body[k] = '\0';
        } else if (type == 'c') {
            char e[5] = { 0 };
            tu_encode((uint32_t)mag, e);
            snprintf(body, sizeof body, "%s", e);
            neg = 0;
        } else {
            snprintf(body, sizeof body, type == 'd' ? "%llu" : type == 'x' ? (alt ? "0x%llx" : "%llx")
                                                     : type == 'X' ? (alt ? "0X%llX" : "%llX")
                                                                   : (alt ? "0o%llo" : "%llo"),
                     (unsigned long long)mag);
        }
    } else if (strchr("eEfFgG%r", type)) {
        double m = fabs(f);
        if (type == 'r') {
            tv_write_float(body, sizeof body, m);
        } else if (type == '%') {
            snprintf(body, sizeof body, "%.*f%%", (int)(prec < 0 ? 6 : prec > 300 ? 300 : prec), m * 100);
        } else {
            char cf[8];
            snprintf(cf, sizeof cf, "%%%s.*%c", alt ? "#" : "", type);
            snprintf(body, sizeof body, cf, (int)(prec < 0 ? 6 : prec > 300 ? 300 : prec), m);
        }
    } else {
        return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c'", type);
    }
    size_t o = 0;
    if (neg)
        num[o++] = '-';
    else if (sign == '+')
        num[o++] = '+';
    else if (sign == ' ')
        num[o++] = ' ';
    size_t sign_len = o, bl = strlen(body);
    if (align == '=') {   /* padding between the sign and the digits */
        int64_t pad = width > (int64_t)(o + bl) ? width - (int64_t)(o + bl) : 0;
        if ((rc = tb_put(c, b, num, o)))
            return rc;
        for (int64_t k = 0; k < pad && !rc; k++)
            rc = tb_put(c, b, fill, fill_len);
        return rc ? rc : tb_put(c, b, body, bl);
    }
    (void)sign_len;
    memcpy(num + o, body, bl);
    o += bl;
    return fmt_pad(c, b, num, o, o, align ? align : '>', fill, fill_len, width);
}

int tm_str_format(tctx *c, const tval *self, const targs *a, tval *out)
{
    const tstr *s = tv_s(self);
    tbuf b = { 0 };
    int rc = 0;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s->len && !rc;) {
        char ch = s->s[i];
        if (ch == '}' ) {
            if (i + 1 < s->len && s->s[i + 1] == '}') {
                rc = tb_putc(c, &b, '}');
                i += 2;
                continue;
            }
            rc = tc_fail(c, NULL, EM_EINVAL, "Single '}' encountered in format string");
            break;
        }
        if (ch != '{') {
            rc = tb_putc(c, &b, ch);
            i++;
            continue;
        }
        if (i + 1 < s->len && s->s[i + 1] == '{') {
            rc = tb_putc(c, &b, '{');
            i += 2;
            continue;
        }
        size_t j = i + 1, depth = 1;
        while (j < s->len && depth) {
            if (s->s[j] == '{')
                depth++;
            else if (s->s[j] == '}')
                depth--;
            if (depth)
                j++;
        }
        if (j >= s->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "expected '}' before end of string");
            break;
        }
        /* field: name[.attr|[key]]*[!conv][:spec] */
        const char *f = s->s + i + 1;
        size_t fl = j - i - 1, k = 0;
        while (k < fl && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':')
            k++;
        tval v;
        if (k == 0 || (f[0] >= '0' && f[0] <= '9')) {
            size_t idx = auto_idx;
            if (k) {
                idx = 0;
                for (size_t q = 0; q < k; q++)
                    idx = idx * 10 + (size_t)(f[q] - '0');
            } else {
                auto_idx++;
            }
            if (idx >= a->npos) {
                rc = tc_fail(c, NULL, EM_EINVAL, "Replacement index %zu out of range for positional args tuple",
                             idx);
                break;
            }
            v = tv_ref(a->pos[idx]);
        } else {
            size_t q;
            for (q = 0; q < a->nkw; q++)
                if (strlen(a->kname[q]) == k && !memcmp(a->kname[q], f, k))
                    break;
            if (q == a->nkw) {
                rc = tc_fail(c, NULL, EM_EINVAL, "KeyError: '%.*s'", (int)k, f);
                break;
            }
            v = tv_ref(a->kval[q]);
        }
        while (!rc && k < fl && (f[k] == '.' || f[k] == '[')) {
            size_t st = k + 1, en = st;
            char close = f[k] == '.' ? 0 : ']';
            while (en < fl && (close ? f[en] != ']' : (f[en] != '.' && f[en] != '[' && f[en] != '!' &&
                                                        f[en] != ':')))
                en++;
            tval key, nv;
            int digits = en > st;
            for (size_t q = st; q < en; q++)
                digits &= f[q] >= '0' && f[q] <= '9';
            if (close && digits) {
                int64_t x = 0;
                for (size_t q = st; q < en && x < 1000000000; q++)
                    x = x * 10 + (f[q] - '0');
                key = tv_int(x);
            } else if ((rc = ts_new(c, f + st, en - st, &key))) {
                break;
            }
            rc = close ? te_getitem(c, &v, &key, &nv) : te_getattr(c, &v, &key, &nv);
            tv_drop(c, &key);
            tv_drop(c, &v);
            if (rc)
                break;
            v = nv;
            k = close ? en + 1 : en;
        }
        if (rc)
            break;
        char conv = 0;
        if (k + 1 < fl && f[k] == '!') {
            conv = f[k + 1];
            k += 2;
        }
        const char *spec = "";
        size_t spec_len = 0;
        if (k < fl && f[k] == ':') {
            spec = f + k + 1;
            spec_len = fl - k - 1;
        } else if (k < fl) {
            tv_drop(c, &v);
            rc = tc_fail(c, NULL, EM_EINVAL, "invalid format field");
            break;
        }
        if (conv == 'r' || conv == 'a' || conv == 's') {
            tbuf rb = { 0 };
            tval sv;
            rc = conv == 's' ? tv_write_str(c, &rb, &v) : tv_write_repr(c, &rb, &v);
            tv_drop(c, &v);
            if (rc || (rc = ts_from_buf(c, &rb, &sv))) {
                tb_free(c, &rb);
                break;
            }
            v = sv;
        } else if (conv) {
            tv_drop(c, &v);
            rc = tc_fail(c, NULL, EM_EINVAL, "Unknown conversion specifier %c", conv);
            break;
        }
        if (v.t == TV_UNDEF && !spec_len)
            rc = 0;
        else
            rc = fmt_value(c, &b, &v, spec, spec_len);
        tv_drop(c, &v);
        i = j + 1;
    }
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = self->fl & TVF_SAFE;
    return 0;
}

/* ------------------------------------------------- printf-style % */

int tu_percent_format(tctx *c, const tval *fmt, const tval *args, tval *out)
{
    const tstr *f = tv_s(fmt);
    const tval *argv = args;
    size_t argc = 1, next = 0;
    const tdict *map = NULL;
    int rc = 0;
    if (args->t == TV_LIST && (args->fl & TVF_TUPLE)) {
        argv = tv_l(args)->v;
        argc = tv_l(args)->n;
    } else if (args->t == TV_DICT) {
        map = tv_d(args);
    }
    /* Python counts anything with __getitem__ but a tuple or str as a mapping
     * here (lists, Undefined): no "not all arguments converted" for them */
    int mapping = map != NULL || args->t == TV_UNDEF || (args->t == TV_LIST && !(args->fl & TVF_TUPLE));
    tbuf b = { 0 };
    for (size_t i = 0; i < f->len && !rc;) {
        const char *pc = memchr(f->s + i, '%', f->len - i);
        size_t stop = pc ? (size_t)(pc - f->s) : f->len;
        if ((rc = tb_put(c, &b, f->s + i, stop - i)) || !pc)
            break;
        i = stop + 1;
        const tval *v = NULL;
        tval keyed = tv_undef();
        if (i < f->len && f->s[i] == '(') {
            size_t e = i + 1, depth = 1;
            while (e < f->len && depth) {
                depth += f->s[e] == '(' ? 1 : f->s[e] == ')' ? -1 : 0;
                if (depth)
                    e++;
            }
            if (args->t == TV_UNDEF) {
                rc = te_undef_error(c, args);
                break;
            }
            if (!map || e >= f->len) {
                rc = tc_fail(c, NULL, EM_EINVAL, map ? "incomplete format key" : "format requires a mapping");
                break;
            }
            long at;
            td_get_str(map, f->s + i + 1, e - i - 1, &at);
            if (at < 0) {
                rc = tc_fail(c, NULL, EM_EINVAL, "KeyError: '%.*s'", (int)(e - i - 1), f->s + i + 1);
                break;
            }
            keyed = map->v[at];
            v = &keyed;
            i = e + 1;
        }
        char flags[8] = { 0 };
        size_t nf = 0;
        while (i < f->len && strchr("-+ #0", f->s[i]) && nf < 6)
            flags[nf++] = f->s[i++];
        int64_t width = -1, prec = -1;
        if (i < f->len && f->s[i] == '*') {
            if (next >= argc || (argv[next].t != TV_INT && argv[next].t != TV_BOOL)) {
                rc = tc_fail(c, NULL, EM_EINVAL, "* wants int");
                break;
            }
            width = argv[next++].u.i;
            i++;
        } else {
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9')
                width = (width < 0 ? 0 : width) * 10 + (f->s[i++] - '0');
        }
        if (i < f->len && f->s[i] == '.') {
            i++;
            prec = 0;
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && prec < 10000)
                prec = prec * 10 + (f->s[i++] - '0');
        }
        while (i < f->len && strchr("hlL", f->s[i]))
            i++;
        if (i >= f->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "incomplete format");
            break;
        }
        char type = f->s[i++];
        if (type == '%') {
            rc = tb_putc(c, &b, '%');
            continue;
        }
        if (!v) {
            if (mapping) {
                v = args;
            } else {
                if (next >= argc) {
                    rc = tc_fail(c, NULL, EM_EINVAL, "not enough arguments for format string");
                    break;
                }
                v = &argv[next++];
            }
        }
        if (width > (int64_t)TL_STRING) {
            rc = tc_fail(c, NULL, EM_ERANGE, "format width too large");
            break;
        }
        int left = strchr(flags, '-') != NULL, zero = strchr(flags, '0') != NULL && !left;
        char cfmt[32], tmp[512];
        if (type == 's' || type == 'r' || type == 'a') {
            tbuf sb = { 0 };
            rc = type == 's' ? tv_write_str(c, &sb, v) : tv_write_repr(c, &sb, v);
            if (!rc) {
                const char *sp = sb.p ? sb.p : "";
                size_t len = sb.n, nch = 0;
                for (size_t q = 0; q < len; q++)
                    nch += ((unsigned char)sp[q] & 0xC0) != 0x80;
                if (prec >= 0 && (size_t)prec < nch) {
                    size_t q = 0, k = 0;
                    while (q < len && k < (size_t)prec) {
                        q++;
                        while (q < len && ((unsigned char)sp[q] & 0xC0) == 0x80)
                            q++;
                        k++;
                    }
                    len = q;
                    nch = (size_t)prec;
                }
                if (!rc && (fmt->fl & TVF_SAFE) && !(v->t == TV_STR && (v->fl & TVF_SAFE))) {
                    /* Markup % x escapes what x prints as */
                    tbuf eb = { 0 };
                    if (!(rc = tf_escape(c, &eb, sp, len))) {
                        tb_free(c, &sb);
                        sb = eb;
                        sp = sb.p ? sb.p : "";
                        len = sb.n;
                        nch = 0;
                        for (size_t q = 0; q < len; q++)
                            nch += ((unsigned char)sp[q] & 0xC0) != 0x80;
                    } else {
                        tb_free(c, &eb);
                    }
                }
                if (!rc)
                    rc = fmt_pad(c, &b, sp, len, nch, left ? '<' : '>', " ", 1, width);
            }
            tb_free(c, &sb);
            continue;
        }
        if (v->t == TV_UNDEF) {
            rc = te_undef_error(c, v);
            break;
        }
        int is_num = v->t == TV_INT || v->t == TV_BOOL || v->t == TV_FLOAT;
        snprintf(cfmt, sizeof cfmt, "%%%s%s%s*.*", left ? "-" : "", strchr(flags, '+') ? "+" :
                 strchr(flags, ' ') ? " " : "", strchr(flags, '#') ? "#" : "");
        size_t cl = strlen(cfmt);
        if (zero)
            memmove(cfmt + 2, cfmt + 1, cl), cfmt[1] = '0', cl++;
        int w = (int)(width < 0 ? 0 : width), pr = (int)(prec < 0 ? -1 : prec > 300 ? 300 : prec);
        if (strchr("diu", type)) {
            if (!is_num) {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%%c format: a real number is required, not %s", type,
                             tv_type_name(v));
                break;
            }
            long long x = v->t == TV_FLOAT ? (long long)v->u.f : (long long)v->u.i;
            snprintf(cfmt + cl, sizeof cfmt - cl, "lld");
            snprintf(tmp, sizeof tmp, cfmt, w, pr, x);
        } else if (strchr("xXo", type)) {
            if (v->t != TV_INT && v->t != TV_BOOL) {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%%c format: an integer is required, not %s", type,
                             tv_type_name(v));
                break;
            }
            long long x = (long long)v->u.i;
            unsigned long long mag = x < 0 ? 0 - (unsigned long long)x : (unsigned long long)x;
            char body[80];
            snprintf(body, sizeof body, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", mag);
            char pre[4] = "";
            if (strchr(flags, '#'))
                snprintf(pre, sizeof pre, "0%c", type == 'o' ? 'o' : type);
            snprintf(tmp, sizeof tmp, "%s%s%s", x < 0 ? "-" : strchr(flags, '+') ? "+" : "", pre, body);
            rc = fmt_pad(c, &b, tmp, strlen(tmp), strlen(tmp), left ? '<' : '>', zero ? "0" : " ", 1, width);
            continue;
        } else if (strchr("eEfFgG", type)) {
            if (!is_num) {
                rc = tc_fail(c, NULL, EM_EINVAL, "must be real number, not %s", tv_type_name(v));
                break;
            }
            double x = v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
            snprintf(cfmt + cl, sizeof cfmt - cl, "%c", type);
            snprintf(tmp, sizeof tmp, cfmt, w, pr < 0 ? 6 : pr, x);
        } else if (type == 'c') {
            char e[5] = { 0 };
            if (v->t == TV_STR && tv_s(v)->nchars == 1)
                snprintf(e, sizeof e, "%s", tv_s(v)->s);
            else if (v->t == TV_INT && v->u.i >= 0 && v->u.i <= 0x10FFFF && !(v->u.i >= 0xD800 && v->u.i <= 0xDFFF))
                tu_encode((uint32_t)v->u.i, e);
            else {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%c requires int or char");
                break;
            }
            rc = fmt_pad(c, &b, e, strlen(e), 1, left ? '<' : '>', " ", 1, width);
            continue;
        } else {
            rc = tc_fail(c, NULL, EM_EINVAL, "unsupported format character '%c'", type);
            break;
        }
        rc = tb_put(c, &b, tmp, strlen(tmp));
    }
    if (!rc && !mapping && next < argc)
        rc = tc_fail(c, NULL, EM_EINVAL, "not all arguments converted during string formatting");
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = fmt->fl & TVF_SAFE;
    return 0;
}
