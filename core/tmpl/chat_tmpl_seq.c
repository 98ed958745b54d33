/* chat_tmpl_seq.c — the chat-template filters over sequences: join, first,
 * last, list, items, dictsort, select/reject(attr), map, sort, unique,
 * min, max, sum, reverse, batch; with Jinja's attribute paths ("a.b",
 * "0", several comma-separated for sort) and Python's stable sort. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

int tfs_list(tctx *c, const tval *iterable, tval *out)
{
    tval items;
    int rc = te_iterate(c, iterable, &items);
    if (rc)
        return rc;
    if (items.fl == 0) {
        *out = items;
        return 0;
    }
    const tlist *l = tv_l(&items);
    if (!(rc = tl_new(c, l->n, 0, out)))
        for (size_t i = 0; i < l->n && !rc; i++)
            rc = tl_push(c, out, tv_ref(l->v[i]));
    if (rc)
        tv_drop(c, out);
    tv_drop(c, &items);
    return rc;
}

/* ------------------------------------------------- attribute getters */

typedef struct {
    tval parts[8];        /* each a string or an int */
    size_t n;
} apath;

typedef struct {
    apath  paths[8];
    size_t n;
    int    lower;         /* postprocess: lower() strings */
    tval   dflt;          /* replaces undefined results (map) */
} getter;

static void getter_free(tctx *c, getter *g)
{
    for (size_t i = 0; i < g->n; i++)
        for (size_t k = 0; k < g->paths[i].n; k++)
            tv_drop(c, &g->paths[i].parts[k]);
    g->n = 0;
}

static int path_parse(tctx *c, const char *s, size_t len, apath *p)
{
    p->n = 0;
    size_t a = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '.')
            continue;
        if (p->n == 8)
            return tc_fail(c, NULL, EM_EUNSUPPORTED, "attribute path too long");
        int digits = i > a;
        for (size_t k = a; k < i; k++)
            digits &= s[k] >= '0' && s[k] <= '9';
        int rc;
        if (digits && i - a < 18) {
            int64_t v = 0;
            for (size_t k = a; k < i; k++)
                v = v * 10 + (s[k] - '0');
            p->parts[p->n] = tv_int(v);
        } else if ((rc = ts_new(c, s + a, i - a, &p->parts[p->n]))) {
            return rc;
        }
        p->n++;
        a = i + 1;
    }
    return 0;
}

/* make_attrgetter (multi: attribute may list several, comma-separated) */
static int getter_init(tctx *c, getter *g, const tval *attr, int multi, int lower)
{
    memset(g, 0, sizeof *g);
    g->lower = lower;
    g->dflt.t = TV_ABSENT;
    if (attr->t == TV_ABSENT || attr->t == TV_NONE) {
        g->n = 1;   /* the item itself */
        return 0;
    }
    if (attr->t != TV_STR) {
        g->n = 1;
        g->paths[0].parts[0] = tv_ref(*attr);
        g->paths[0].n = 1;
        return 0;
    }
    const tstr *s = tv_s(attr);
    size_t a = 0;
    for (size_t i = 0; i <= s->len; i++) {
        if (i < s->len && !(multi && s->s[i] == ','))
            continue;
        if (g->n == 8) {
            getter_free(c, g);
            return tc_fail(c, NULL, EM_EUNSUPPORTED, "too many sort attributes");
        }
        int rc = path_parse(c, s->s + a, i - a, &g->paths[g->n]);
        g->n++;
        if (rc) {
            getter_free(c, g);
            return rc;
        }
        a = i + 1;
    }
    return 0;
}

static int lower_val(tctx *c, tval *v)
{
    if (v->t != TV_STR)
        return 0;
    tbuf b = { 0 };
    int rc = tu_case(c, &b, tv_s(v)->s, tv_s(v)->len, TCASE_LOWER);
    uint8_t fl = v->fl;
    tval r;
    if (rc || (rc = ts_from_buf(c, &b, &r))) {
        tb_free(c, &b);
        return rc;
    }
    r.fl = fl & TVF_SAFE;
    tv_drop(c, v);
    *v = r;
    return 0;
}

static int path_get(tctx *c, const getter *g, const apath *p, const tval *item, tval *out)
{
    tval v = tv_ref(*item);
    int rc = 0;
    for (size_t k = 0; k < p->n; k++) {
        tval next;
        rc = te_getitem(c, &v, &p->parts[k], &next);
        tv_drop(c, &v);
        if (rc)
            return rc;
        v = next;
        if (g->dflt.t != TV_ABSENT && g->dflt.t != TV_NONE && v.t == TV_UNDEF) {
            tv_drop(c, &v);
            v = tv_ref(g->dflt);
        }
    }
    if (g->lower && (rc = lower_val(c, &v))) {
        tv_drop(c, &v);
        return rc;
    }
    *out = v;
    return 0;
}

/* The key of item: one value, or (multi) a list of one per path. */
static int getter_key(tctx *c, const getter *g, const tval *item, int multi, tval *out)
{
    if (!multi)
        return path_get(c, g, &g->paths[0], item, out);
    int rc = tl_new(c, g->n, 0, out);
    for (size_t i = 0; !rc && i < g->n; i++) {
        tval v;
        if (!(rc = path_get(c, g, &g->paths[i], item, &v)))
            rc = tl_push(c, out, v);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}

/* ---------------------------------------------------------- sorting */

typedef struct {
    tval   key;
    size_t idx;
} sort_ent;

/* Stable merge sort by key with Python's <; reverse keeps equal keys in
 * their original order, as sorted(reverse=True) does. */
static int sort_ents(tctx *c, sort_ent *e, size_t n, int reverse)
{
    if (n < 2)
        return 0;
    sort_ent *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return tc_fail(c, NULL, EM_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t w = 1; w < n && !rc; w *= 2) {
        for (size_t lo = 0; lo < n && !rc; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp;
                /* take from the right only when it comes strictly first */
                rc = tv_cmp(c, &e[j].key, &e[i].key, &cmp, "<");
                if (rc)
                    break;
                if ((!reverse && cmp == -1) || (reverse && cmp == 1))
                    tmp[k++] = e[j++];
                else
                    tmp[k++] = e[i++];
            }
            if (rc)
                break;
            while (i < mid)
                tmp[k++] = e[i++];
            while (j < hi)
                tmp[k++] = e[j++];
            memcpy(e + lo, tmp + lo, (hi - lo) * sizeof *e);
        }
        if (!rc)
            rc = tc_steps(c, n);
    }
    free(tmp);
    return rc;
}

/* sorted(items, key=getter) into a new list of the items. */
static int sort_by(tctx *c, const tval *items, const getter *g, int multi, int reverse, uint8_t fl,
                   tval *out)
{
    const tlist *l = tv_l(items);
    sort_ent *e = calloc(l->n ? l->n : 1, sizeof *e);
    if (!e)
        return tc_fail(c, NULL, EM_ENOMEM, "out of memory");
    int rc = 0;
    size_t made = 0;
    for (; made < l->n && !rc; made++) {
        e[made].idx = made;
        rc = getter_key(c, g, &l->v[made], multi, &e[made].key);
        if (rc)
            break;
    }
    if (!rc)
        rc = sort_ents(c, e, l->n, reverse);
    if (!rc && !(rc = tl_new(c, l->n, fl, out)))
        for (size_t i = 0; i < l->n && !rc; i++)
            rc = tl_push(c, out, tv_ref(l->v[e[i].idx]));
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    for (size_t i = 0; i < made; i++)
        tv_drop(c, &e[i].key);
    free(e);
    return rc;
}

int tfs_join(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "d", "attribute" };
    tval p[2], items, sep = tv_undef();
    int rc = targs_bind(c, "join", names, 2, a, p);
    if (rc || (rc = te_iterate(c, v, &items)))
        return rc;
    getter g = { 0 };
    int have_attr = p[1].t != TV_ABSENT && p[1].t != TV_NONE;
    if (have_attr && (rc = getter_init(c, &g, &p[1], 0, 0)))
        goto done;
    if (p[0].t != TV_ABSENT && (rc = tv_to_str(c, &p[0], &sep)))
        goto done;
    tbuf b = { 0 };
    const tlist *l = tv_l(&items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (i && sep.t == TV_STR)
            rc = tb_put(c, &b, tv_s(&sep)->s, tv_s(&sep)->len);
        if (rc)
            break;
        if (have_attr) {
            tval x;
            if (!(rc = path_get(c, &g, &g.paths[0], &l->v[i], &x))) {
                rc = tv_write_str(c, &b, &x);
                tv_drop(c, &x);
            }
        } else {
            rc = tv_write_str(c, &b, &l->v[i]);
        }
    }
    if (rc)
        tb_free(c, &b);
    else
        rc = ts_from_buf(c, &b, out);
done:
    getter_free(c, &g);
    tv_drop(c, &sep);
    tv_drop(c, &items);
    return rc;
}

int tfs_first_last(tctx *c, const tval *v, int last, tval *out)
{
    if (v->t == TV_LIST || v->t == TV_STR || v->t == TV_DICT || v->t == TV_UNDEF) {
        size_t n = v->t == TV_LIST ? tv_l(v)->n : v->t == TV_STR ? tv_s(v)->nchars :
                   v->t == TV_DICT ? tv_d(v)->n : 0;
        if (!n) {
            *out = te_undef_msg(c, "No %s item, sequence was empty.", last ? "last" : "first");
            return 0;
        }
        tval k = tv_int(last ? (int64_t)n - 1 : 0);
        if (v->t == TV_DICT) {
            *out = tv_ref(tv_d(v)->k[last ? n - 1 : 0]);
            return 0;
        }
        int rc = te_getitem(c, v, &k, out);
        if (!rc && out->t == TV_STR && !last)
            out->fl = 0;   /* first: next(iter(s)) gives a plain str; last: reversed() indexes, Markup stays */
        return rc;
    }
    return tc_fail(c, NULL, EM_EINVAL, "'%s' object is not iterable", tv_type_name(v));
}

int tfs_items(tctx *c, const tval *v, uint8_t fl, tval *out)
{
    if (v->t == TV_UNDEF)
        return tl_new(c, 0, 0, out);
    if (v->t != TV_DICT)
        return tc_fail(c, NULL, EM_EINVAL, "Can only get item pairs from a mapping.");
    const tdict *d = tv_d(v);
    int rc = tl_new(c, d->n, fl, out);
    for (size_t i = 0; i < d->n && !rc; i++) {
        tval pair;
        if ((rc = tl_new(c, 2, TVF_TUPLE, &pair)))
            break;
        if ((rc = tl_push(c, &pair, tv_ref(d->k[i]))) || (rc = tl_push(c, &pair, tv_ref(d->v[i])))) {
            tv_drop(c, &pair);
            break;
        }
        rc = tl_push(c, out, pair);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}

int tfs_dictsort(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "case_sensitive", "by", "reverse" };
    tval p[3], items;
    int rc = targs_bind(c, "dictsort", names, 3, a, p);
    if (rc)
        return rc;
    if (v->t != TV_DICT)
        return v->t == TV_UNDEF ? te_undef_error(c, v)
                                : tc_fail(c, NULL, EM_EINVAL, "'%s' object has no attribute 'items'",
                                          tv_type_name(v));
    int64_t pos = 0;
    if (p[1].t == TV_STR) {
        if (!strcmp(tv_s(&p[1])->s, "value"))
            pos = 1;
        else if (strcmp(tv_s(&p[1])->s, "key"))
            return tc_fail(c, NULL, EM_EINVAL, "You can only sort by either \"key\" or \"value\"");
    } else if (p[1].t != TV_ABSENT) {
        return tc_fail(c, NULL, EM_EINVAL, "You can only sort by either \"key\" or \"value\"");
    }
    if ((rc = tfs_items(c, v, 0, &items)))
        return rc;
    getter g;
    tval attr = tv_int(pos);
    int lower = !(p[0].t != TV_ABSENT && tv_truthy(&p[0]));
    if (!(rc = getter_init(c, &g, &attr, 0, lower))) {
        rc = sort_by(c, &items, &g, 0, p[2].t != TV_ABSENT && tv_truthy(&p[2]), 0, out);
        getter_free(c, &g);
    }
    tv_drop(c, &items);
    return rc;
}

/* The items select and map go over: none when the value is falsy ("if seq:"). */
static int truthy_items(tctx *c, const tval *v, tval *items)
{
    return tv_truthy(v) ? te_iterate(c, v, items) : tl_new(c, 0, 0, items);
}

/* select / reject / selectattr / rejectattr / map */
int tfs_select(tctx *c, const tval *v, const targs *a, int want, int attr, tval *out)
{
    int rc;
    tval items;
    getter g = { 0 };
    size_t off = 0;
    if (attr) {
        if (!a->npos)
            return tc_fail(c, NULL, EM_EINVAL, "Missing parameter for attribute name");
        if ((rc = getter_init(c, &g, &a->pos[0], 0, 0)))
            return rc;
        off = 1;
    }
    const char *test = NULL;
    if (a->npos > off) {
        if (a->pos[off].t != TV_STR) {
            getter_free(c, &g);
            return tc_fail(c, NULL, EM_EINVAL, "the test name must be a string");
        }
        test = tv_s(&a->pos[off])->s;
    }
    targs ta = { a->pos + off + 1, a->npos > off ? a->npos - off - 1 : 0, a->kname, a->kval, a->nkw };
    if ((rc = truthy_items(c, v, &items))) {
        getter_free(c, &g);
        return rc;
    }
    const tlist *l = tv_l(&items);
    if (!(rc = tl_new(c, 0, 0, out)))
        for (size_t i = 0; i < l->n && !rc; i++) {
            tval x;
            int r;
            if (attr)
                rc = path_get(c, &g, &g.paths[0], &l->v[i], &x);
            else
                x = tv_ref(l->v[i]);
            if (rc)
                break;
            if (test)
                rc = tf_test_by_name(c, test, &x, &ta, &r);
            else
                r = tv_truthy(&x);
            tv_drop(c, &x);
            if (!rc && (r != 0) == want)
                rc = tl_push(c, out, tv_ref(l->v[i]));
        }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    getter_free(c, &g);
    tv_drop(c, &items);
    return rc;
}

int tfs_map(tctx *c, const tval *v, const targs *a, tval *out)
{
    int rc;
    tval items;
    getter g = { 0 };
    const char *filter = NULL;
    targs fa = { 0 };
    if (!a->npos) {
        const tval *attr = NULL, *dflt = NULL;
        for (size_t k = 0; k < a->nkw; k++) {
            if (!strcmp(a->kname[k], "attribute"))
                attr = &a->kval[k];
            else if (!strcmp(a->kname[k], "default"))
                dflt = &a->kval[k];
            else
                return tc_fail(c, NULL, EM_EINVAL, "Unexpected keyword argument '%s'", a->kname[k]);
        }
        if (!attr)
            return tc_fail(c, NULL, EM_EINVAL, "map requires a filter argument");
        if ((rc = getter_init(c, &g, attr, 0, 0)))
            return rc;
        if (dflt)
            g.dflt = *dflt;
    } else {
        if (a->pos[0].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "map: the filter name must be a string");
        filter = tv_s(&a->pos[0])->s;
        fa = (targs){ a->pos + 1, a->npos - 1, a->kname, a->kval, a->nkw };
    }
    if ((rc = truthy_items(c, v, &items))) {
        getter_free(c, &g);
        return rc;
    }
    const tlist *l = tv_l(&items);
    if (!(rc = tl_new(c, l->n, 0, out)))
        for (size_t i = 0; i < l->n && !rc; i++) {
            tval x;
            if (filter)
                rc = tf_filter_by_name(c, filter, &l->v[i], &fa, &x);
            else
                rc = path_get(c, &g, &g.paths[0], &l->v[i], &x);
            if (!rc)
                rc = tl_push(c, out, x);
        }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    g.dflt.t = TV_ABSENT;
    getter_free(c, &g);
    tv_drop(c, &items);
    return rc;
}

int tfs_sort(tctx *c, int id, const tval *v, const targs *a, tval *out)
{
    static const char *const sort_names[] = { "reverse", "case_sensitive", "attribute" };
    static const char *const names[] = { "case_sensitive", "attribute" };
    tval p[3], items;
    int rc = id == TFS_SORT ? targs_bind(c, "sort", sort_names, 3, a, p)
                          : targs_bind(c, id == TFS_UNIQUE ? "unique" : id == TFS_MIN ? "min" : "max",
                                       names, 2, a, p + 1);
    if (rc)
        return rc;
    if (id != TFS_SORT)
        p[0].t = TV_ABSENT;
    if ((rc = te_iterate(c, v, &items)))
        return rc;
    getter g;
    int lower = !(p[1].t != TV_ABSENT && tv_truthy(&p[1]));
    if ((rc = getter_init(c, &g, &p[2], id == TFS_SORT, lower))) {
        tv_drop(c, &items);
        return rc;
    }
    const tlist *l = tv_l(&items);
    if (id == TFS_SORT) {
        rc = sort_by(c, &items, &g, 1, p[0].t != TV_ABSENT && tv_truthy(&p[0]), 0, out);
    } else if (id == TFS_UNIQUE) {
        tval seen;
        if (!(rc = td_new(c, 0, &seen))) {
            if (!(rc = tl_new(c, 0, 0, out)))
                for (size_t i = 0; i < l->n && !rc; i++) {
                    tval k;
                    long at;
                    if ((rc = getter_key(c, &g, &l->v[i], 0, &k)))
                        break;
                    if (!(rc = td_find(c, tv_d(&seen), &k, &at)) && at < 0 &&
                        !(rc = td_set(c, &seen, k, tv_none())))
                        rc = tl_push(c, out, tv_ref(l->v[i]));
                    else
                        tv_drop(c, &k);
                }
            if (rc && out->t == TV_LIST)
                tv_drop(c, out);
            tv_drop(c, &seen);
        }
    } else if (!l->n) {
        *out = te_undef_msg(c, "No aggregated item, sequence was empty.");
    } else {
        size_t best = 0;
        tval bk;
        if (!(rc = getter_key(c, &g, &l->v[0], 0, &bk))) {
            for (size_t i = 1; i < l->n && !rc; i++) {
                tval k;
                int cmp;
                if ((rc = getter_key(c, &g, &l->v[i], 0, &k)))
                    break;
                if (!(rc = tv_cmp(c, &k, &bk, &cmp, "<")) && (id == TFS_MIN ? cmp == -1 : cmp == 1)) {
                    tv_drop(c, &bk);
                    bk = k;
                    best = i;
                } else {
                    tv_drop(c, &k);
                }
            }
            tv_drop(c, &bk);
        }
        if (!rc)
            *out = tv_ref(l->v[best]);
    }
    getter_free(c, &g);
    tv_drop(c, &items);
    return rc;
}

int tfs_sum(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "attribute", "start" };
    tval p[2], items;
    int rc = targs_bind(c, "sum", names, 2, a, p);
    if (rc || (rc = te_iterate(c, v, &items)))
        return rc;
    getter g = { 0 };
    int have_attr = p[0].t != TV_ABSENT && p[0].t != TV_NONE;
    tval acc = p[1].t == TV_ABSENT ? tv_int(0) : tv_ref(p[1]);
    if (acc.t == TV_STR) {
        rc = tc_fail(c, NULL, EM_EINVAL, "sum() can't sum strings [use ''.join(seq) instead]");
        goto done;
    }
    if (have_attr && (rc = getter_init(c, &g, &p[0], 0, 0)))
        goto done;
    const tlist *l = tv_l(&items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        tval x, r;
        if (have_attr)
            rc = path_get(c, &g, &g.paths[0], &l->v[i], &x);
        else
            x = tv_ref(l->v[i]);
        if (rc)
            break;
        rc = te_arith(c, OP_ADD, &acc, &x, &r);
        tv_drop(c, &x);
        if (!rc) {
            tv_drop(c, &acc);
            acc = r;
        }
    }
done:
    getter_free(c, &g);
    tv_drop(c, &items);
    if (rc)
        tv_drop(c, &acc);
    else
        *out = acc;
    return rc;
}

int tfs_reverse(tctx *c, const tval *v, tval *out)
{
    int rc;
    if (v->t == TV_STR) {
        const tstr *s = tv_s(v);
        tbuf b = { 0 };
        for (size_t i = s->len; i > 0 && !(rc = 0);) {
            size_t st = i - 1;
            while (st > 0 && ((unsigned char)s->s[st] & 0xC0) == 0x80)
                st--;
            if ((rc = tb_put(c, &b, s->s + st, i - st))) {
                tb_free(c, &b);
                return rc;
            }
            i = st;
        }
        if ((rc = ts_from_buf(c, &b, out)))
            return rc;
        out->fl = v->fl & TVF_SAFE;
        return 0;
    }
    tval items;
    if ((rc = te_iterate(c, v, &items)))
        return tc_fail(c, NULL, EM_EINVAL, "argument must be iterable");
    const tlist *l = tv_l(&items);
    if (!(rc = tl_new(c, l->n, 0, out)))
        for (size_t i = l->n; i-- > 0 && !rc;)
            rc = tl_push(c, out, tv_ref(l->v[i]));
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    tv_drop(c, &items);
    return rc;
}

int tfs_batch(tctx *c, const tval *v, const targs *a, tval *out)
{
    static const char *const names[] = { "linecount", "fill_with" };
    tval p[2], items, cur = tv_undef();
    int64_t count = 0;
    int rc = targs_bind(c, "batch", names, 2, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "batch() needs linecount");
    if ((rc = tf_int_arg(c, "batch", &p[0], 1, &count)))
        return rc;
    if (count < 1)
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "batch: linecount below 1");
    if ((rc = te_iterate(c, v, &items)))
        return rc;
    const tlist *l = tv_l(&items);
    if ((rc = tl_new(c, 0, 0, out)))
        goto done;
    for (size_t i = 0; i < l->n && !rc; i++) {
        if (cur.t == TV_LIST && (int64_t)tv_l(&cur)->n == count) {
            rc = tl_push(c, out, cur);
            cur = tv_undef();
        }
        if (!rc && cur.t != TV_LIST)
            rc = tl_new(c, 0, 0, &cur);
        if (!rc)
            rc = tl_push(c, &cur, tv_ref(l->v[i]));
    }
    if (!rc && cur.t == TV_LIST) {
        if (p[1].t != TV_ABSENT && p[1].t != TV_NONE)
            while (!rc && (int64_t)tv_l(&cur)->n < count)
                rc = tl_push(c, &cur, tv_ref(p[1]));
        if (!rc) {
            rc = tl_push(c, out, cur);
            cur = tv_undef();
        }
    }
    if (rc)
        tv_drop(c, out);
done:
    tv_drop(c, &cur);
    tv_drop(c, &items);
    return rc;
}
