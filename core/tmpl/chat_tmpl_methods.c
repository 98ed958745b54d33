/* chat_tmpl_methods.c — the Python side of chat templates: the str, dict
 * and list methods the sandbox allows (strip, split, startswith, replace,
 * find, join, get, items, ...; mutating ones are refused as the sandbox
 * refuses them) and the globals (range, namespace, dict, raise_exception,
 * strftime_now). */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

/* Byte offset -> code point index. */
static size_t char_index(const tstr *s, size_t off)
{
    if (s->nchars == s->len)
        return off;
    size_t n = 0;
    for (size_t i = 0; i < off; i++)
        n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return n;
}

/* ------------------------------------------------------------ methods */

enum {
    TM_NONE,
    TM_S_CAPITALIZE, TM_S_CASEFOLD, TM_S_CENTER, TM_S_COUNT, TM_S_ENDSWITH, TM_S_FIND, TM_S_FORMAT,
    TM_S_INDEX, TM_S_ISALNUM, TM_S_ISALPHA, TM_S_ISDECIMAL, TM_S_ISDIGIT, TM_S_ISLOWER,
    TM_S_ISNUMERIC, TM_S_ISSPACE, TM_S_ISTITLE, TM_S_ISUPPER, TM_S_JOIN, TM_S_LJUST, TM_S_LOWER,
    TM_S_LSTRIP, TM_S_PARTITION, TM_S_REMOVEPREFIX, TM_S_REMOVESUFFIX, TM_S_REPLACE, TM_S_RFIND,
    TM_S_RINDEX, TM_S_RJUST, TM_S_RPARTITION, TM_S_RSPLIT, TM_S_RSTRIP, TM_S_SPLIT, TM_S_SPLITLINES,
    TM_S_STARTSWITH, TM_S_STRIP, TM_S_SWAPCASE, TM_S_TITLE, TM_S_UPPER, TM_S_ZFILL,
    TM_D_GET, TM_D_ITEMS, TM_D_KEYS, TM_D_VALUES, TM_D_COPY,
    TM_L_COUNT, TM_L_INDEX, TM_L_COPY,
    TM_N,
};

static const char *const method_names[TM_N] = {
    "", "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index",
    "isalnum", "isalpha", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle",
    "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix",
    "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "zfill",
    "get", "items", "keys", "values", "copy",
    "count", "index", "copy",
};

const char *tm_method_name(int id)
{
    return id > 0 && id < TM_N ? method_names[id] : "method";
}

static int name_is(const char *name, size_t len, const char *w)
{
    return strlen(w) == len && memcmp(name, w, len) == 0;
}

int tm_method_id(const tval *v, const char *name, size_t len)
{
    if (v->t == TV_STR) {
        for (int i = TM_S_CAPITALIZE; i <= TM_S_ZFILL; i++)
            if (name_is(name, len, method_names[i]))
                return i;
        return 0;
    }
    if (v->t == TV_DICT) {
        for (int i = TM_D_GET; i <= TM_D_COPY; i++)
            if (name_is(name, len, method_names[i]))
                return i;
        static const char *const unsafe[] = { "clear", "pop", "popitem", "setdefault", "update" };
        for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
            if (name_is(name, len, unsafe[i]))
                return -1;
        return 0;
    }
    if (v->t == TV_LIST && !(v->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))) {
        for (int i = TM_L_COUNT; i <= TM_L_COPY; i++)
            if (name_is(name, len, method_names[i]) && !(i == TM_L_COPY && (v->fl & TVF_TUPLE)))
                return i;
        static const char *const unsafe[] = { "append", "clear", "extend", "insert", "pop",
                                              "remove", "reverse", "sort" };
        if (!(v->fl & TVF_TUPLE))
            for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
                if (name_is(name, len, unsafe[i]))
                    return -1;
    }
    return 0;
}

/* Python slice-adjusted [start, end) in code points of s, as byte offsets. */
static int str_range(tctx *c, const tstr *s, const tval *start, const tval *end, size_t *a, size_t *b)
{
    int64_t n = (int64_t)s->nchars, st = 0, en = n;
    if (start && start->t != TV_ABSENT && start->t != TV_NONE) {
        if (start->t != TV_INT && start->t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "slice indices must be integers or None");
        st = start->u.i < 0 ? start->u.i + n : start->u.i;
    }
    if (end && end->t != TV_ABSENT && end->t != TV_NONE) {
        if (end->t != TV_INT && end->t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "slice indices must be integers or None");
        en = end->u.i < 0 ? end->u.i + n : end->u.i;
    }
    if (st < 0)
        st = 0;
    if (en > n)
        en = n;
    if (en < 0)
        en = 0;
    if (st > n) {   /* empty, past the end */
        *a = *b = s->len + 1;
        return 0;
    }
    *a = ts_offset(s, (size_t)st);
    *b = en < st ? *a : ts_offset(s, (size_t)en);
    return 0;
}

static int need_str(tctx *c, const char *m, const tval *v)
{
    if (v->t == TV_STR)
        return 0;
    return tc_fail(c, NULL, EM_EINVAL, "%s arg must be str, not %s", m, tv_type_name(v));
}

static int make_str(tctx *c, const char *s, size_t n, uint8_t safe, tval *out)
{
    int rc = ts_new(c, s, n, out);
    if (!rc)
        out->fl = safe;
    return rc;
}

static int m_split(tctx *c, const tval *self, const targs *a, int right, tval *out)
{
    static const char *const names[] = { "sep", "maxsplit" };
    tval p[2];
    int rc = targs_bind(c, right ? "rsplit" : "split", names, 2, a, p);
    if (rc)
        return rc;
    const tstr *s = tv_s(self);
    int64_t maxs = -1;
    if (p[1].t != TV_ABSENT) {
        if (p[1].t != TV_INT && p[1].t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "maxsplit must be an integer");
        maxs = p[1].u.i;
    }
    uint64_t left = maxs < 0 ? UINT64_MAX : (uint64_t)maxs;
    uint8_t safe = self->fl & TVF_SAFE;
    if ((rc = tc_steps(c, s->len / 16 + 1)) || (rc = tl_new(c, 0, 0, out)))
        return rc;
    tval piece;
    if (p[0].t == TV_ABSENT || p[0].t == TV_NONE) {
        if (!right) {
            size_t i = 0, n = s->len;
            while (left-- > 0) {
                size_t adv;
                while (i < n && tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if (i == n)
                    break;
                size_t j = i;
                while (i < n && !tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if ((rc = make_str(c, s->s + j, i - j, safe, &piece)) || (rc = tl_push(c, out, piece)))
                    goto fail;
            }
            if (i < n) {
                size_t adv;
                while (i < n && tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if (i < n && ((rc = make_str(c, s->s + i, n - i, safe, &piece)) ||
                              (rc = tl_push(c, out, piece))))
                    goto fail;
            }
            return 0;
        }
        /* rsplit on whitespace: collect from the right, then reverse */
        size_t i = s->len;
        while (left-- > 0) {
            size_t adv;
            while (i > 0) {
                size_t ps = tu_prev(s->s, i);
                if (!tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if (i == 0)
                break;
            size_t j = i;
            while (i > 0) {
                size_t ps = tu_prev(s->s, i);
                if (tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if ((rc = make_str(c, s->s + i, j - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                goto fail;
        }
        if (i > 0) {
            size_t adv;
            while (i > 0) {
                size_t ps = tu_prev(s->s, i);
                if (!tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if (i > 0 && ((rc = make_str(c, s->s, i, safe, &piece)) || (rc = tl_push(c, out, piece))))
                goto fail;
        }
    } else {
        if ((rc = need_str(c, "sep", &p[0])))
            goto fail;
        const tstr *sep = tv_s(&p[0]);
        if (!sep->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "empty separator");
            goto fail;
        }
        if (!right) {
            size_t i = 0;
            for (;;) {
                const char *hit = left ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
                if (!hit)
                    break;
                left--;
                size_t h = (size_t)(hit - s->s);
                if ((rc = make_str(c, s->s + i, h - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                    goto fail;
                i = h + sep->len;
            }
            if ((rc = make_str(c, s->s + i, s->len - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                goto fail;
            return 0;
        }
        size_t end = s->len;
        while (left) {
            size_t h = SIZE_MAX;
            for (size_t k = end; k >= sep->len; k--)
                if (memcmp(s->s + k - sep->len, sep->s, sep->len) == 0) {
                    h = k - sep->len;
                    break;
                }
            if (h == SIZE_MAX)
                break;
            left--;
            if ((rc = make_str(c, s->s + h + sep->len, end - h - sep->len, safe, &piece)) ||
                (rc = tl_push(c, out, piece)))
                goto fail;
            end = h;
        }
        if ((rc = make_str(c, s->s, end, safe, &piece)) || (rc = tl_push(c, out, piece)))
            goto fail;
    }
    /* right splits were collected backwards */
    tlist *l = tv_l(out);
    for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
        tval t = l->v[i];
        l->v[i] = l->v[j];
        l->v[j] = t;
    }
    return 0;
fail:
    tv_drop(c, out);
    return rc;
}

static int m_affix(tctx *c, const tval *self, const targs *a, int ends, int *res)
{
    static const char *const names[] = { "prefix", "start", "end" };
    tval p[3];
    int rc = targs_bind(c, ends ? "endswith" : "startswith", names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes at least 1 argument", ends ? "endswith" : "startswith");
    const tstr *s = tv_s(self);
    size_t lo, hi;
    if ((rc = str_range(c, s, &p[1], &p[2], &lo, &hi)))
        return rc;
    const tval *cands = &p[0];
    size_t nc = 1;
    if (p[0].t == TV_LIST && (p[0].fl & TVF_TUPLE)) {
        cands = tv_l(&p[0])->v;
        nc = tv_l(&p[0])->n;
    } else if (p[0].t != TV_STR) {
        return tc_fail(c, NULL, EM_EINVAL, "%s first arg must be str or a tuple of str, not %s",
                       ends ? "endswith" : "startswith", tv_type_name(&p[0]));
    }
    *res = 0;
    if (lo > s->len)
        return 0;
    for (size_t i = 0; i < nc && !*res; i++) {
        if (cands[i].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "tuple for %s must only contain str",
                           ends ? "endswith" : "startswith");
        const tstr *x = tv_s(&cands[i]);
        if (x->len <= hi - lo)
            *res = memcmp(ends ? s->s + hi - x->len : s->s + lo, x->s, x->len) == 0;
    }
    return 0;
}

/* find / rfind / index / rindex / count */
static int m_find(tctx *c, const tval *self, const targs *a, int id, tval *out)
{
    static const char *const names[] = { "sub", "start", "end" };
    tval p[3];
    int rc = targs_bind(c, method_names[id], names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT || (rc = need_str(c, method_names[id], &p[0])))
        return rc ? rc : tc_fail(c, NULL, EM_EINVAL, "%s() takes at least 1 argument", method_names[id]);
    const tstr *s = tv_s(self), *sub = tv_s(&p[0]);
    size_t lo, hi;
    if ((rc = str_range(c, s, &p[1], &p[2], &lo, &hi)) || (rc = tc_steps(c, s->len / 64)))
        return rc;
    if (id == TM_S_COUNT) {
        int64_t n = 0;
        if (lo <= s->len) {
            if (!sub->len) {
                n = (int64_t)(char_index(s, hi) - char_index(s, lo)) + 1;
            } else {
                for (size_t i = lo; i + sub->len <= hi;) {
                    const char *hit = memmem(s->s + i, hi - i, sub->s, sub->len);
                    if (!hit)
                        break;
                    n++;
                    i = (size_t)(hit - s->s) + sub->len;
                }
            }
        }
        *out = tv_int(n);
        return 0;
    }
    long found = -1;
    if (lo <= s->len && sub->len <= hi - lo) {
        if (id == TM_S_FIND || id == TM_S_INDEX) {
            const char *hit = memmem(s->s + lo, hi - lo, sub->s, sub->len);
            if (hit)
                found = (long)(hit - s->s);
        } else {
            for (size_t k = hi - sub->len + 1; k-- > lo;)
                if (memcmp(s->s + k, sub->s, sub->len) == 0) {
                    found = (long)k;
                    break;
                }
        }
    }
    if (found < 0 && (id == TM_S_INDEX || id == TM_S_RINDEX))
        return tc_fail(c, NULL, EM_EINVAL, "substring not found");
    *out = tv_int(found < 0 ? -1 : (int64_t)char_index(s, (size_t)found));
    return 0;
}

static int m_replace(tctx *c, const tval *self, const targs *a, tval *out)
{
    static const char *const names[] = { "old", "new", "count" };
    tval p[3];
    int rc = targs_bind(c, "replace", names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT || p[1].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "replace() takes at least 2 arguments");
    if ((rc = need_str(c, "replace", &p[0])) || (rc = need_str(c, "replace", &p[1])))
        return rc;
    int64_t count = -1;
    if (p[2].t != TV_ABSENT) {
        if (p[2].t != TV_INT && p[2].t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "replace() count must be an integer");
        count = p[2].u.i;
    }
    const tstr *s = tv_s(self), *old = tv_s(&p[0]), *nw = tv_s(&p[1]);
    uint64_t left = count < 0 ? UINT64_MAX : (uint64_t)count;
    tbuf b = { 0 };
    int safe = self->fl & TVF_SAFE;
    if ((rc = tc_steps(c, s->len / 64)))
        return rc;
    if (!old->len) {
        for (size_t i = 0; i <= s->len && !rc;) {
            if (left) {
                rc = safe && !(p[1].fl & TVF_SAFE) ? tf_escape(c, &b, nw->s, nw->len)
                                                    : tb_put(c, &b, nw->s, nw->len);
                left--;
            }
            if (i == s->len || rc)
                break;
            size_t adv;
            tu_decode(s->s + i, s->len - i, &adv);
            rc = tb_put(c, &b, s->s + i, adv);
            i += adv;
        }
    } else {
        size_t i = 0;
        while (!rc) {
            const char *hit = left ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!hit)
                break;
            left--;
            size_t h = (size_t)(hit - s->s);
            if (!(rc = tb_put(c, &b, s->s + i, h - i)))
                rc = safe && !(p[1].fl & TVF_SAFE) ? tf_escape(c, &b, nw->s, nw->len)
                                                    : tb_put(c, &b, nw->s, nw->len);
            i = h + old->len;
        }
        if (!rc)
            rc = tb_put(c, &b, s->s + i, s->len - i);
    }
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = (uint8_t)safe;
    return 0;
}

static int m_join(tctx *c, const tval *self, const targs *a, tval *out)
{
    static const char *const names[] = { "iterable" };
    tval p[1], items;
    int rc = targs_bind(c, "join", names, 1, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "join() takes exactly one argument");
    if ((rc = te_iterate(c, &p[0], &items)))
        return rc;
    const tstr *sep = tv_s(self);
    int safe = self->fl & TVF_SAFE;
    tbuf b = { 0 };
    const tlist *l = tv_l(&items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        const tval *x = &l->v[i];
        if (x->t != TV_STR) {
            rc = tc_fail(c, NULL, EM_EINVAL, "sequence item %zu: expected str instance, %s found", i,
                         tv_type_name(x));
            break;
        }
        if (i)
            rc = tb_put(c, &b, sep->s, sep->len);
        if (!rc)
            rc = safe && !(x->fl & TVF_SAFE) ? tf_escape(c, &b, tv_s(x)->s, tv_s(x)->len)
                                              : tb_put(c, &b, tv_s(x)->s, tv_s(x)->len);
    }
    tv_drop(c, &items);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = (uint8_t)safe;
    return 0;
}

static int m_pad(tctx *c, const tval *self, const targs *a, int id, tval *out)
{
    static const char *const names[] = { "width", "fillchar" };
    tval p[2];
    int rc = targs_bind(c, method_names[id], names, id == TM_S_ZFILL ? 1 : 2, a, p);
    if (rc)
        return rc;
    if (p[0].t != TV_INT && p[0].t != TV_BOOL)
        return tc_fail(c, NULL, EM_EINVAL, "%s() needs an integer width", method_names[id]);
    const tstr *s = tv_s(self);
    const char *fill = " ";
    size_t fill_len = 1;
    if (id != TM_S_ZFILL && p[1].t != TV_ABSENT) {
        if (p[1].t != TV_STR || tv_s(&p[1])->nchars != 1)
            return tc_fail(c, NULL, EM_EINVAL, "The fill character must be exactly one character long");
        fill = tv_s(&p[1])->s;
        fill_len = tv_s(&p[1])->len;
    }
    int64_t width = p[0].u.i, len = (int64_t)s->nchars;
    if (width <= len)
        return make_str(c, s->s, s->len, self->fl & TVF_SAFE, out);
    if (width > (int64_t)TL_STRING)
        return tc_fail(c, NULL, EM_ERANGE, "a string would pass %zu MiB (EM_TMPL_MAX_STRING)",
                       (size_t)TL_STRING >> 20);
    int64_t marg = width - len, left;
    if (id == TM_S_CENTER)
        left = marg / 2 + (marg & width & 1);
    else if (id == TM_S_LJUST)
        left = 0;
    else
        left = marg;
    tbuf b = { 0 };
    size_t body = 0;
    if (id == TM_S_ZFILL) {
        fill = "0";
        if (s->len && (s->s[0] == '+' || s->s[0] == '-')) {
            rc = tb_putc(c, &b, s->s[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; i < left && !rc; i++)
        rc = tb_put(c, &b, fill, fill_len);
    if (!rc)
        rc = tb_put(c, &b, s->s + body, s->len - body);
    for (int64_t i = 0; i < marg - left && !rc; i++)
        rc = tb_put(c, &b, fill, fill_len);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = self->fl & TVF_SAFE;
    return 0;
}

static int m_partition(tctx *c, const tval *self, const targs *a, int right, tval *out)
{
    if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "%spartition() takes exactly one str argument", right ? "r" : "");
    const tstr *s = tv_s(self), *sep = tv_s(&a->pos[0]);
    if (!sep->len)
        return tc_fail(c, NULL, EM_EINVAL, "empty separator");
    long at = -1;
    if (!right) {
        const char *hit = memmem(s->s, s->len, sep->s, sep->len);
        if (hit)
            at = (long)(hit - s->s);
    } else {
        for (size_t k = s->len; k >= sep->len; k--)
            if (memcmp(s->s + k - sep->len, sep->s, sep->len) == 0) {
                at = (long)(k - sep->len);
                break;
            }
    }
    size_t cut[4];
    if (at < 0) {
        size_t e = right ? 0 : s->len;
        cut[0] = 0; cut[1] = e; cut[2] = e; cut[3] = e;
        if (right) {
            cut[1] = 0; cut[2] = 0; cut[3] = 0;
        }
    } else {
        cut[0] = 0; cut[1] = (size_t)at; cut[2] = (size_t)at + sep->len; cut[3] = s->len;
    }
    int rc = tl_new(c, 3, TVF_TUPLE, out);
    tval x;
    uint8_t safe = self->fl & TVF_SAFE;
    if (at < 0 && right) {   /* ('', '', s) */
        if (!rc && !(rc = make_str(c, "", 0, safe, &x)))
            rc = tl_push(c, out, x);
        if (!rc && !(rc = make_str(c, "", 0, safe, &x)))
            rc = tl_push(c, out, x);
        if (!rc && !(rc = make_str(c, s->s, s->len, safe, &x)))
            rc = tl_push(c, out, x);
    } else if (at < 0) {
        if (!rc && !(rc = make_str(c, s->s, s->len, safe, &x)))
            rc = tl_push(c, out, x);
        for (int k = 0; k < 2 && !rc; k++)
            if (!(rc = make_str(c, "", 0, safe, &x)))
                rc = tl_push(c, out, x);
    } else {
        for (int k = 0; k < 3 && !rc; k++)
            if (!(rc = make_str(c, s->s + cut[k], cut[k + 1] - cut[k], safe, &x)))
                rc = tl_push(c, out, x);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}

static int m_is(const tstr *s, int id)
{
    if (!s->len)
        return 0;
    int cased = 0, prev_cased = 0, title_ok = 1, all = 1;
    for (size_t i = 0; i < s->len;) {
        size_t adv;
        uint32_t cp = tu_decode(s->s + i, s->len - i, &adv);
        int digit = (cp >= '0' && cp <= '9') || (cp >= 0x660 && cp <= 0x669) ||
                    (cp >= 0xFF10 && cp <= 0xFF19);
        switch (id) {
        case TM_S_ISALNUM: all &= tu_is_alnum(cp); break;
        case TM_S_ISALPHA: all &= tu_is_alnum(cp) && !digit && !(cp >= 0xB2 && cp <= 0xBE); break;
        case TM_S_ISDECIMAL:
        case TM_S_ISDIGIT:
        case TM_S_ISNUMERIC: all &= digit; break;
        case TM_S_ISSPACE: all &= tu_is_space(cp); break;
        case TM_S_ISLOWER:
        case TM_S_ISUPPER:
            if (tu_is_cased(cp)) {
                cased = 1;
                if (id == TM_S_ISLOWER ? tu_upper(cp) == cp && tu_lower(cp) != cp
                                       : tu_lower(cp) == cp && tu_upper(cp) != cp)
                    all = 0;
            }
            break;
        case TM_S_ISTITLE: {
            int c2 = tu_is_cased(cp), up = c2 && tu_lower(cp) != cp;
            if (c2) {
                if (up == prev_cased)
                    title_ok = 0;
                cased = 1;
            }
            prev_cased = c2;
            break;
        }
        default: break;
        }
        i += adv;
    }
    if (id == TM_S_ISLOWER || id == TM_S_ISUPPER)
        return cased && all;
    if (id == TM_S_ISTITLE)
        return cased && title_ok;
    return all;
}

/* ------------------------------------------------ dict / list methods */

static int m_dict(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    const tdict *d = tv_d(self);
    int rc;
    if (id == TM_D_GET) {
        if (a->nkw || a->npos < 1 || a->npos > 2)
            return tc_fail(c, NULL, EM_EINVAL, "get expected 1 or 2 arguments, got %zu", a->npos + a->nkw);
        long at;
        if ((rc = td_find(c, d, &a->pos[0], &at)))
            return rc;
        *out = at >= 0 ? tv_ref(d->v[at]) : a->npos == 2 ? tv_ref(a->pos[1]) : tv_none();
        return 0;
    }
    if (a->npos || a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no arguments", method_names[id]);
    if ((rc = tc_steps(c, d->n)))
        return rc;
    if (id == TM_D_COPY) {
        if ((rc = td_new(c, 0, out)))
            return rc;
        for (size_t i = 0; i < d->n && !rc; i++)
            rc = td_set(c, out, tv_ref(d->k[i]), tv_ref(d->v[i]));
        if (rc)
            tv_drop(c, out);
        return rc;
    }
    uint8_t fl = id == TM_D_ITEMS ? TVF_ITEMS : id == TM_D_KEYS ? TVF_KEYS : TVF_VALUES;
    if ((rc = tl_new(c, d->n, fl, out)))
        return rc;
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (id == TM_D_KEYS) {
            rc = tl_push(c, out, tv_ref(d->k[i]));
        } else if (id == TM_D_VALUES) {
            rc = tl_push(c, out, tv_ref(d->v[i]));
        } else {
            tval pair;
            if ((rc = tl_new(c, 2, TVF_TUPLE, &pair)))
                break;
            if ((rc = tl_push(c, &pair, tv_ref(d->k[i]))) || (rc = tl_push(c, &pair, tv_ref(d->v[i]))))
                tv_drop(c, &pair);
            else
                rc = tl_push(c, out, pair);
        }
    }
    if (rc)
        tv_drop(c, out);
    return rc;
}

static int m_list(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    const tlist *l = tv_l(self);
    int rc;
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no keyword arguments", method_names[id]);
    if ((rc = tc_steps(c, l->n)))
        return rc;
    if (id == TM_L_COPY) {
        if (a->npos)
            return tc_fail(c, NULL, EM_EINVAL, "copy() takes no arguments");
        if ((rc = tl_new(c, l->n, 0, out)))
            return rc;
        for (size_t i = 0; i < l->n && !rc; i++)
            rc = tl_push(c, out, tv_ref(l->v[i]));
        if (rc)
            tv_drop(c, out);
        return rc;
    }
    if (a->npos < 1 || (id == TM_L_COUNT && a->npos > 1) || a->npos > 3)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes %s argument", method_names[id],
                       id == TM_L_COUNT ? "exactly one" : "1 to 3");
    int64_t n = (int64_t)l->n, st = 0, en = n, count = 0;
    if (a->npos > 1 && (a->pos[1].t == TV_INT || a->pos[1].t == TV_BOOL))
        st = a->pos[1].u.i < 0 ? a->pos[1].u.i + n : a->pos[1].u.i;
    if (a->npos > 2 && (a->pos[2].t == TV_INT || a->pos[2].t == TV_BOOL))
        en = a->pos[2].u.i < 0 ? a->pos[2].u.i + n : a->pos[2].u.i;
    if (st < 0)
        st = 0;
    if (en > n)
        en = n;
    for (int64_t i = st; i < en; i++) {
        int eq;
        if ((rc = tv_eq(c, &l->v[i], &a->pos[0], &eq)))
            return rc;
        if (eq && id == TM_L_INDEX) {
            *out = tv_int(i);
            return 0;
        }
        count += eq;
    }
    if (id == TM_L_INDEX) {
        tbuf b = { 0 };
        tv_write_repr(c, &b, &a->pos[0]);
        rc = tc_fail(c, NULL, EM_EINVAL, "%.200s is not in list", b.p ? b.p : "value");
        tb_free(c, &b);
        return rc;
    }
    *out = tv_int(count);
    return 0;
}

int tm_call_method(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    int rc, r;
    if (id >= TM_D_GET && id <= TM_D_COPY)
        return m_dict(c, self, id, a, out);
    if (id >= TM_L_COUNT && id <= TM_L_COPY)
        return m_list(c, self, id, a, out);
    const tstr *s = tv_s(self);
    uint8_t safe = self->fl & TVF_SAFE;
    switch (id) {
    case TM_S_SPLIT: return m_split(c, self, a, 0, out);
    case TM_S_RSPLIT: return m_split(c, self, a, 1, out);
    case TM_S_STARTSWITH:
    case TM_S_ENDSWITH:
        if ((rc = m_affix(c, self, a, id == TM_S_ENDSWITH, &r)))
            return rc;
        *out = tv_bool(r);
        return 0;
    case TM_S_FIND:
    case TM_S_RFIND:
    case TM_S_INDEX:
    case TM_S_RINDEX:
    case TM_S_COUNT: return m_find(c, self, a, id, out);
    case TM_S_REPLACE: return m_replace(c, self, a, out);
    case TM_S_JOIN: return m_join(c, self, a, out);
    case TM_S_CENTER:
    case TM_S_LJUST:
    case TM_S_RJUST:
    case TM_S_ZFILL: return m_pad(c, self, a, id, out);
    case TM_S_PARTITION:
    case TM_S_RPARTITION: return m_partition(c, self, a, id == TM_S_RPARTITION, out);
    case TM_S_FORMAT: return tm_str_format(c, self, a, out);
    case TM_S_STRIP:
    case TM_S_LSTRIP:
    case TM_S_RSTRIP: {
        static const char *const names[] = { "chars" };
        tval p[1];
        if ((rc = targs_bind(c, method_names[id], names, 1, a, p)))
            return rc;
        const char *chars = NULL;
        size_t nch = 0;
        if (p[0].t == TV_STR) {
            chars = tv_s(&p[0])->s;
            nch = tv_s(&p[0])->len;
        } else if (p[0].t != TV_ABSENT && p[0].t != TV_NONE) {
            return tc_fail(c, NULL, EM_EINVAL, "%s arg must be None or str", method_names[id]);
        }
        size_t st, en;
        tu_strip(s->s, s->len, chars, nch, id == TM_S_STRIP ? 3 : id == TM_S_LSTRIP ? 1 : 2, &st, &en);
        return make_str(c, s->s + st, en - st, safe, out);
    }
    case TM_S_REMOVEPREFIX:
    case TM_S_REMOVESUFFIX: {
        if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "%s() takes exactly one str argument", method_names[id]);
        const tstr *x = tv_s(&a->pos[0]);
        size_t st = 0, en = s->len;
        if (x->len <= s->len) {
            if (id == TM_S_REMOVEPREFIX && !memcmp(s->s, x->s, x->len))
                st = x->len;
            else if (id == TM_S_REMOVESUFFIX && x->len && !memcmp(s->s + s->len - x->len, x->s, x->len))
                en = s->len - x->len;
        }
        return make_str(c, s->s + st, en - st, safe, out);
    }
    case TM_S_SPLITLINES: {
        static const char *const names[] = { "keepends" };
        tval p[1];
        if ((rc = targs_bind(c, "splitlines", names, 1, a, p)))
            return rc;
        if (p[0].t != TV_ABSENT && tv_truthy(&p[0]))
            return tc_fail(c, NULL, EM_EUNSUPPORTED, "splitlines(keepends=True) is not supported");
        return tu_splitlines(c, s->s, s->len, out);
    }
    default:
        break;
    }
    if (a->npos || a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no arguments", tm_method_name(id));
    int how = -1;
    switch (id) {
    case TM_S_UPPER: how = TCASE_UPPER; break;
    case TM_S_LOWER:
    case TM_S_CASEFOLD: how = TCASE_LOWER; break;
    case TM_S_CAPITALIZE: how = TCASE_CAPITALIZE; break;
    case TM_S_TITLE: how = TCASE_TITLE; break;
    case TM_S_SWAPCASE: how = TCASE_SWAP; break;
    default:
        *out = tv_bool(m_is(s, id));
        return 0;
    }
    tbuf b = { 0 };
    if ((rc = tu_case(c, &b, s->s, s->len, how)) || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = safe;
    return 0;
}

/* ------------------------------------------------------------ globals */

static const char *const global_names[TF_N] = { "", "range", "namespace", "dict", "raise_exception",
                                                "strftime_now", "" };

int tg_global_id(const char *name)
{
    for (int i = 1; i < TF_N; i++)
        if (global_names[i][0] && !strcmp(global_names[i], name))
            return i;
    return 0;
}

const char *tg_global_name(int id)
{
    return id > 0 && id < TF_N ? global_names[id] : "function";
}

static int g_range(tctx *c, const targs *a, tval *out)
{
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return tc_fail(c, NULL, EM_EINVAL, "range expected 1 to 3 arguments, got %zu", a->npos);
    int64_t v[3] = { 0, 0, 1 };
    for (size_t i = 0; i < a->npos; i++) {
        if (a->pos[i].t != TV_INT && a->pos[i].t != TV_BOOL)
            return a->pos[i].t == TV_UNDEF ? te_undef_error(c, &a->pos[i])
                                           : tc_fail(c, NULL, EM_EINVAL, "'%s' object cannot be interpreted as an integer",
                                                     tv_type_name(&a->pos[i]));
    }
    if (a->npos == 1) {
        v[1] = a->pos[0].u.i;
    } else {
        v[0] = a->pos[0].u.i;
        v[1] = a->pos[1].u.i;
        if (a->npos == 3)
            v[2] = a->pos[2].u.i;
    }
    if (v[2] == 0)
        return tc_fail(c, NULL, EM_EINVAL, "range() arg 3 must not be zero");
    double count = 0;
    if (v[2] > 0 && v[1] > v[0])
        count = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
    else if (v[2] < 0 && v[1] < v[0])
        count = ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
    if (count > EM_TMPL_MAX_RANGE)
        return tc_fail(c, NULL, EM_ERANGE, "Range too big. The sandbox blocks ranges larger than "
                       "MAX_RANGE (%d).", EM_TMPL_MAX_RANGE);
    int rc = tc_steps(c, (uint64_t)count);
    if (rc || (rc = tl_new(c, (size_t)count, 0, out)))
        return rc;
    for (int64_t i = 0, x = v[0]; i < (int64_t)count && !rc; i++, x += v[2])
        rc = tl_push(c, out, tv_int(x));
    if (rc)
        tv_drop(c, out);
    return rc;
}

/* dict(*args, **kwargs) for dict() and namespace() */
static int g_dict(tctx *c, const targs *a, int ns, tval *out)
{
    int rc;
    if (a->npos > 1)
        return tc_fail(c, NULL, EM_EINVAL, "%s expected at most 1 argument, got %zu", ns ? "namespace" : "dict",
                       a->npos);
    if ((rc = td_new(c, ns, out)))
        return rc;
    if (a->npos) {
        const tval *src = &a->pos[0];
        if (src->t == TV_DICT) {
            for (size_t i = 0; i < tv_d(src)->n && !rc; i++)
                rc = td_set(c, out, tv_ref(tv_d(src)->k[i]), tv_ref(tv_d(src)->v[i]));
        } else {
            tval items;
            if (!(rc = te_iterate(c, src, &items))) {
                for (size_t i = 0; i < tv_l(&items)->n && !rc; i++) {
                    tval pair;
                    if ((rc = te_iterate(c, &tv_l(&items)->v[i], &pair)))
                        break;
                    if (tv_l(&pair)->n != 2)
                        rc = tc_fail(c, NULL, EM_EINVAL, "dictionary update sequence element #%zu has length %zu; "
                                     "2 is required", i, tv_l(&pair)->n);
                    else
                        rc = td_set(c, out, tv_ref(tv_l(&pair)->v[0]), tv_ref(tv_l(&pair)->v[1]));
                    tv_drop(c, &pair);
                }
                tv_drop(c, &items);
            }
        }
    }
    for (size_t i = 0; i < a->nkw && !rc; i++) {
        tval k;
        if (!(rc = ts_cstr(c, a->kname[i], &k)))
            rc = td_set(c, out, k, tv_ref(a->kval[i]));
    }
    if (!rc && ns)
        rc = tc_register_ns(c, out);
    if (rc)
        tv_drop(c, out);
    return rc;
}

static int g_strftime(tctx *c, const targs *a, tval *out)
{
    if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "strftime_now() takes one string argument");
    const tstr *f = tv_s(&a->pos[0]);
    if (f->len > 4096)
        return tc_fail(c, NULL, EM_ERANGE, "strftime_now: format longer than 4096 bytes");
    /* datetime.strftime: %f is microseconds (always 0 here), and a NUL ends C's format */
    tbuf fb = { 0 };
    int rc = 0;
    for (size_t i = 0; i < f->len && !rc; i++) {
        if (f->s[i] == '%' && i + 1 < f->len && f->s[i + 1] == 'f') {
            rc = tb_put(c, &fb, "000000", 6);
            i++;
        } else if (f->s[i] == '%' && i + 1 < f->len && f->s[i + 1] == '%') {
            rc = tb_put(c, &fb, "%%", 2);
            i++;
        } else if (f->s[i] == '\0') {
            rc = tc_fail(c, NULL, EM_EINVAL, "embedded null character");
        } else {
            rc = tb_putc(c, &fb, f->s[i]);
        }
    }
    if (rc) {
        tb_free(c, &fb);
        return rc;
    }
    if (!fb.n) {
        tb_free(c, &fb);
        return ts_new(c, "", 0, out);
    }
    locale_t loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!loc) {
        tb_free(c, &fb);
        return tc_fail(c, NULL, EM_ENOMEM, "strftime_now: no C locale");
    }
    size_t cap = 256;
    char *buf = NULL;
    size_t n = 0;
    for (; cap <= ((size_t)1 << 20); cap *= 4) {
        char *nb = realloc(buf, cap);
        if (!nb) {
            rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
            break;
        }
        buf = nb;
        n = strftime_l(buf, cap, fb.p, &c->now, loc);
        if (n)
            break;
    }
    freelocale(loc);
    tb_free(c, &fb);
    if (!rc)
        rc = ts_new(c, buf, n, out);
    free(buf);
    return rc;
}

int tg_call_global(tctx *c, int id, const targs *a, tval *out)
{
    switch (id) {
    case TF_RANGE: return g_range(c, a, out);
    case TF_NAMESPACE: return g_dict(c, a, 1, out);
    case TF_DICT: return g_dict(c, a, 0, out);
    case TF_STRFTIME: return g_strftime(c, a, out);
    case TF_RAISE: {
        if (a->npos < 1) {
            tc_fail(c, NULL, EM_EINVAL, "raise_exception() called without a message");
            return EM_EINVAL;
        }
        tbuf b = { 0 };
        int rc = tv_write_str(c, &b, &a->pos[0]);
        if (rc) {
            tb_free(c, &b);
            return rc;
        }
        rc = tc_fail(c, NULL, EM_EINVAL, "%s", b.p ? b.p : "");
        tb_free(c, &b);
        return rc;
    }
    default:
        return tc_fail(c, NULL, EM_EINVAL, "unknown function");
    }
}
