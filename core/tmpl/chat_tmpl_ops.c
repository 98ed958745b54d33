/* chat_tmpl_ops.c — the operations under the chat-template evaluator, as
 * Jinja2 and Python do them: undefined values and their messages,
 * iteration, `in`, arithmetic (int/float, str and list repetition and
 * concatenation, Markup escaping), attribute and item access through the
 * sandbox (dict keys via ".", methods first, unsafe methods refused),
 * slicing, a for loop's `loop` object, and argument binding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

tval te_undef_msg(tctx *c, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tval s, u = tv_undef();
    int failed = c->failed;
    if (ts_cstr(c, msg, &s) == 0) {
        u.u.o = s.u.o;
    } else {   /* out of budget: a plain undefined; the limit shows where it is used */
        c->failed = failed;
    }
    return u;
}

int te_undef_error(tctx *c, const tval *u)
{
    if (u->t == TV_UNDEF && u->u.o)
        return tc_fail(c, NULL, EM_EINVAL, "%s", tv_s(u)->s);
    return tc_fail(c, NULL, EM_EINVAL, "undefined value used");
}

/* Jinja's object_type_repr: "dict object", "None", ... */
static const char *obj_type_repr(const tval *v, char *buf, size_t cap)
{
    if (v->t == TV_NONE)
        return "None";
    if (v->t == TV_NS)
        return "jinja2.utils.Namespace object";
    snprintf(buf, cap, "%s object", tv_type_name(v));
    return buf;
}

static tval undef_attr(tctx *c, const tval *obj, const tval *name)
{
    char tb[64];
    const char *tr = obj_type_repr(obj, tb, sizeof tb);
    if (name->t == TV_STR)
        return te_undef_msg(c, "'%s' has no attribute '%.200s'", tr, tv_s(name)->s);
    tbuf b = { 0 };
    if (tv_write_repr(c, &b, name)) {
        tb_free(c, &b);
        return tv_undef();
    }
    tval u = te_undef_msg(c, "%s has no element %.200s", tr, b.p ? b.p : "");
    tb_free(c, &b);
    return u;
}

int te_iterate(tctx *c, const tval *v, tval *out)
{
    int rc;
    switch (v->t) {
    case TV_LIST:
        *out = tv_ref(*v);
        return 0;
    case TV_UNDEF:
        return tl_new(c, 0, 0, out);
    case TV_DICT: {
        const tdict *d = tv_d(v);
        if ((rc = tc_steps(c, d->n)) || (rc = tl_new(c, d->n, 0, out)))
            return rc;
        for (size_t i = 0; i < d->n; i++)
            if ((rc = tl_push(c, out, tv_ref(d->k[i])))) {
                tv_drop(c, out);
                return rc;
            }
        return 0;
    }
    case TV_STR: {
        const tstr *s = tv_s(v);
        if ((rc = tc_steps(c, s->nchars)) || (rc = tl_new(c, s->nchars, 0, out)))
            return rc;
        for (size_t i = 0; i < s->len;) {
            size_t adv;
            tu_decode(s->s + i, s->len - i, &adv);
            tval ch;
            if ((rc = ts_new(c, s->s + i, adv, &ch)))   /* plain str, Markup or not (str.__iter__) */
                goto fail;
            if ((rc = tl_push(c, out, ch)))
                goto fail;
            i += adv;
        }
        return 0;
    fail:
        tv_drop(c, out);
        return rc;
    }
    default:
        return tc_fail(c, NULL, EM_EINVAL, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* `item in container` */
int te_contains(tctx *c, const tval *container, const tval *item, int *res)
{
    int rc;
    *res = 0;
    switch (container->t) {
    case TV_STR: {
        if (item->t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "'in <string>' requires string as left operand, not %s",
                           tv_type_name(item));
        const tstr *h = tv_s(container), *nd = tv_s(item);
        if ((rc = tc_steps(c, h->len / 64)))
            return rc;
        *res = nd->len == 0 || memmem(h->s, h->len, nd->s, nd->len) != NULL;
        return 0;
    }
    case TV_LIST: {
        const tlist *l = tv_l(container);
        if ((rc = tc_steps(c, l->n)))
            return rc;
        for (size_t i = 0; i < l->n && !*res; i++)
            if ((rc = tv_eq(c, &l->v[i], item, res)))
                return rc;
        return 0;
    }
    case TV_DICT: {
        long at;
        if ((rc = td_find(c, tv_d(container), item, &at)))
            return rc;
        *res = at >= 0;
        return 0;
    }
    case TV_UNDEF:
        return 0;
    default:
        return tc_fail(c, NULL, EM_EINVAL, "argument of type '%s' is not iterable",
                       tv_type_name(container));
    }
}

/* ----------------------------------------------------------- arithmetic */

static int is_num(const tval *v)
{
    return v->t == TV_BOOL || v->t == TV_INT || v->t == TV_FLOAT;
}

static double as_f(const tval *v)
{
    return v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
}

static const char *op_text(int op)
{
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "** or pow()";
    default: return "?";
    }
}

static int overflow(tctx *c)
{
    return tc_fail(c, NULL, EM_ERANGE, "integer overflow (ember's integers are 64-bit)");
}

int te_unary(tctx *c, int op, const tval *a, tval *out)
{
    if (a->t == TV_UNDEF)
        return te_undef_error(c, a);
    if (a->t == TV_INT || a->t == TV_BOOL) {
        if (op == OP_NEG && a->u.i == INT64_MIN)
            return overflow(c);
        *out = tv_int(op == OP_NEG ? -a->u.i : a->u.i);
        return 0;
    }
    if (a->t == TV_FLOAT) {
        *out = tv_float(op == OP_NEG ? -a->u.f : a->u.f);
        return 0;
    }
    return tc_fail(c, NULL, EM_EINVAL, "bad operand type for unary %c: '%s'", op == OP_NEG ? '-' : '+',
                   tv_type_name(a));
}

static int repeat(tctx *c, const tval *seq, int64_t times, tval *out)
{
    int rc;
    if (times < 0)
        times = 0;
    if (seq->t == TV_STR) {
        const tstr *s = tv_s(seq);
        if (s->len && (uint64_t)times > TL_STRING / s->len)
            return tc_fail(c, NULL, EM_ERANGE, "a string would pass %zu MiB (EM_TMPL_MAX_STRING)",
                           (size_t)TL_STRING >> 20);
        tbuf b = { 0 };
        for (int64_t i = 0; i < times; i++)
            if ((rc = tb_put(c, &b, s->s, s->len))) {
                tb_free(c, &b);
                return rc;
            }
        if ((rc = ts_from_buf(c, &b, out)))
            return rc;
        out->fl = seq->fl & TVF_SAFE;
        return 0;
    }
    const tlist *l = tv_l(seq);
    if (l->n && (uint64_t)times > TL_ITEMS / l->n)
        return tc_fail(c, NULL, EM_ERANGE, "a list would pass %d items (EM_TMPL_MAX_ITEMS)", TL_ITEMS);
    if ((rc = tc_steps(c, l->n * (uint64_t)times)) || (rc = tl_new(c, l->n * (size_t)times, seq->fl, out)))
        return rc;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < l->n; k++)
            if ((rc = tl_push(c, out, tv_ref(l->v[k])))) {
                tv_drop(c, out);
                return rc;
            }
    return 0;
}

static int int_pow(tctx *c, int64_t base, int64_t e, tval *out)
{
    int64_t r = 1;
    while (e > 0) {
        if (e & 1)
            if (__builtin_mul_overflow(r, base, &r))
                return overflow(c);
        e >>= 1;
        if (e && __builtin_mul_overflow(base, base, &base))
            return overflow(c);
    }
    *out = tv_int(r);
    return 0;
}

int te_arith(tctx *c, int op, const tval *a, const tval *b, tval *out)
{
    int rc;
    if (op == OP_MOD && a->t == TV_STR)   /* str % undefined formats (Undefined looks like a mapping) */
        return tu_percent_format(c, a, b, out);
    if (a->t == TV_UNDEF)
        return te_undef_error(c, a);
    if (b->t == TV_UNDEF)
        return te_undef_error(c, b);
    if (is_num(a) && is_num(b)) {
        int fl = a->t == TV_FLOAT || b->t == TV_FLOAT;
        int64_t x = a->u.i, y = b->u.i, r;
        double fx = as_f(a), fy = as_f(b);
        switch (op) {
        case OP_ADD:
            if (fl) { *out = tv_float(fx + fy); return 0; }
            if (__builtin_add_overflow(x, y, &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        case OP_SUB:
            if (fl) { *out = tv_float(fx - fy); return 0; }
            if (__builtin_sub_overflow(x, y, &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        case OP_MUL:
            if (fl) { *out = tv_float(fx * fy); return 0; }
            if (__builtin_mul_overflow(x, y, &r)) return overflow(c);
            *out = tv_int(r);
            return 0;
        case OP_DIV:
            if (fy == 0)
                return tc_fail(c, NULL, EM_EINVAL, "division by zero");
            *out = tv_float(fx / fy);
            return 0;
        case OP_FLOORDIV:
        case OP_MOD:
            if (!fl) {
                if (y == 0)
                    return tc_fail(c, NULL, EM_EINVAL, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1)
                    return op == OP_MOD ? (*out = tv_int(0), 0) : overflow(c);
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                *out = tv_int(op == OP_MOD ? m : q);
                return 0;
            } else {
                if (fy == 0)
                    return tc_fail(c, NULL, EM_EINVAL, op == OP_MOD ? "float modulo" :
                                   "float floor division by zero");
                double mod = fmod(fx, fy), div = (fx - mod) / fy;
                if (mod != 0) {
                    if ((fy < 0) != (mod < 0)) {
                        mod += fy;
                        div -= 1.0;
                    }
                } else {
                    mod = copysign(0.0, fy);
                }
                double fd;
                if (div != 0) {
                    fd = floor(div);
                    if (div - fd > 0.5)
                        fd += 1.0;
                } else {
                    fd = copysign(0.0, fx / fy);
                }
                *out = tv_float(op == OP_MOD ? mod : fd);
                return 0;
            }
        case OP_POW:
            if (!fl && y >= 0)
                return int_pow(c, x, y, out);
            if (fx == 0 && fy < 0)
                return tc_fail(c, NULL, EM_EINVAL, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy))
                return tc_fail(c, NULL, EM_EUNSUPPORTED, "complex numbers are not supported");
            *out = tv_float(pow(fx, fy));
            if (isinf(out->u.f) && !isinf(fx) && !isinf(fy))
                return tc_fail(c, NULL, EM_ERANGE, "numerical result out of range");
            return 0;
        default:
            break;
        }
    }
    if (op == OP_ADD && a->t == TV_STR && b->t == TV_STR) {
        const tstr *x = tv_s(a), *y = tv_s(b);
        int safe = (a->fl | b->fl) & TVF_SAFE;
        tbuf buf = { 0 };
        /* Markup + str escapes the str (markupsafe), either side */
        if (!(rc = (safe && !(a->fl & TVF_SAFE)) ? tf_escape(c, &buf, x->s, x->len)
                                                   : tb_put(c, &buf, x->s, x->len)))
            rc = (safe && !(b->fl & TVF_SAFE)) ? tf_escape(c, &buf, y->s, y->len)
                                               : tb_put(c, &buf, y->s, y->len);
        if (rc) {
            tb_free(c, &buf);
            return rc;
        }
        if ((rc = ts_from_buf(c, &buf, out)))
            return rc;
        out->fl = (uint8_t)safe;
        return 0;
    }
    if (op == OP_ADD && a->t == TV_LIST && b->t == TV_LIST &&
        (a->fl & (TVF_TUPLE | TVF_ITEMS | TVF_KEYS | TVF_VALUES)) ==
            (b->fl & (TVF_TUPLE | TVF_ITEMS | TVF_KEYS | TVF_VALUES)) &&
        !(a->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))) {
        const tlist *x = tv_l(a), *y = tv_l(b);
        if ((rc = tc_steps(c, x->n + y->n)) || (rc = tl_new(c, x->n + y->n, a->fl, out)))
            return rc;
        for (size_t i = 0; i < x->n + y->n; i++)
            if ((rc = tl_push(c, out, tv_ref(i < x->n ? x->v[i] : y->v[i - x->n])))) {
                tv_drop(c, out);
                return rc;
            }
        return 0;
    }
    if (op == OP_MUL) {
        const tval *seq = NULL, *num = NULL;
        if ((a->t == TV_STR || a->t == TV_LIST) && (b->t == TV_INT || b->t == TV_BOOL))
            seq = a, num = b;
        else if ((b->t == TV_STR || b->t == TV_LIST) && (a->t == TV_INT || a->t == TV_BOOL))
            seq = b, num = a;
        if (seq && !(seq->t == TV_LIST && (seq->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))))
            return repeat(c, seq, num->u.i, out);
    }
    if (op == OP_ADD && a->t == TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "can only concatenate str (not \"%s\") to str",
                       tv_type_name(b));
    if (op == OP_ADD && a->t == TV_LIST && !(a->fl & TVF_TUPLE))
        return tc_fail(c, NULL, EM_EINVAL, "can only concatenate list (not \"%s\") to list",
                       tv_type_name(b));
    return tc_fail(c, NULL, EM_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                   tv_type_name(a), tv_type_name(b));
}

int targs_bind(tctx *c, const char *fname, const char *const *names, size_t n, const targs *a,
               tval *out)
{
    for (size_t i = 0; i < n; i++)
        out[i].t = TV_ABSENT;
    if (a->npos > n)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes at most %zu argument%s (%zu given)", fname, n,
                       n == 1 ? "" : "s", a->npos);
    for (size_t i = 0; i < a->npos; i++)
        out[i] = a->pos[i];
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(names[i], a->kname[k]))
                break;
        if (i == n)
            return tc_fail(c, NULL, EM_EINVAL, "%s() got an unexpected keyword argument '%s'", fname,
                           a->kname[k]);
        if (out[i].t != TV_ABSENT)
            return tc_fail(c, NULL, EM_EINVAL, "%s() got multiple values for argument '%s'", fname,
                           a->kname[k]);
        out[i] = a->kval[k];
    }
    return 0;
}

static int loop_attr(tctx *c, const tval *lv, const char *name, tval *out)
{
    const tloop *lp = (const tloop *)lv->u.o;
    const tlist *items = tv_l(&lp->items);
    size_t i = lp->index0, len = lp->length;
    if (!strcmp(name, "index")) *out = tv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = tv_int((int64_t)(len - i));
    else if (!strcmp(name, "revindex0")) *out = tv_int((int64_t)(len - i - 1));
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i + 1 == len);
    else if (!strcmp(name, "length")) *out = tv_int((int64_t)len);
    else if (!strcmp(name, "depth")) *out = tv_int((int64_t)lp->depth0 + 1);
    else if (!strcmp(name, "depth0")) *out = tv_int((int64_t)lp->depth0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? tv_ref(items->v[i - 1]) : te_undef_msg(c, "there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < len ? tv_ref(items->v[i + 1]) : te_undef_msg(c, "there is no next item");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        tmethod *m = tm_alloc(c, sizeof *m);
        if (!m)
            return tc_code(c);
        m->h.rc = 1;
        m->h.bytes = sizeof *m;
        m->self = tv_ref(*lv);
        m->id = name[1] == 'y' ? TM_LOOP_CYCLE : TM_LOOP_CHANGED;
        out->t = TV_METHOD;
        out->fl = 0;
        out->u.o = &m->h;
    } else {
        *out = te_undef_msg(c, "'LoopContext object' has no attribute '%.200s'", name);
    }
    return 0;
}

int te_loop_method(tctx *c, const tval *lv, int id, const targs *a, tval *out)
{
    tloop *lp = (tloop *)lv->u.o;
    int rc;
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "loop.%s() takes no keyword arguments",
                       id == TM_LOOP_CYCLE ? "cycle" : "changed");
    if (id == TM_LOOP_CYCLE) {
        if (!a->npos)
            return tc_fail(c, NULL, EM_EINVAL, "no items for cycling given");
        *out = tv_ref(a->pos[lp->index0 % a->npos]);
        return 0;
    }
    tval now;
    if ((rc = tl_new(c, a->npos, TVF_TUPLE, &now)))
        return rc;
    for (size_t i = 0; i < a->npos; i++)
        if ((rc = tl_push(c, &now, tv_ref(a->pos[i])))) {
            tv_drop(c, &now);
            return rc;
        }
    int eq = 0;
    if (lp->has_changed && (rc = tv_eq(c, &lp->last_changed, &now, &eq))) {
        tv_drop(c, &now);
        return rc;
    }
    if (lp->has_changed && eq) {
        tv_drop(c, &now);
        *out = tv_bool(0);
        return 0;
    }
    tv_drop(c, &lp->last_changed);
    lp->last_changed = now;
    lp->has_changed = 1;
    *out = tv_bool(1);
    return 0;
}

/* --------------------------------------------------------------- access */

int te_getattr(tctx *c, const tval *obj, const tval *name, tval *out)
{
    const tstr *ns = tv_s(name);
    long at;
    switch (obj->t) {
    case TV_UNDEF:
        return te_undef_error(c, obj);
    case TV_LOOP:
        return loop_attr(c, obj, ns->s, out);
    case TV_NS:
        td_get_str(tv_d(obj), ns->s, ns->len, &at);
        *out = at >= 0 ? tv_ref(tv_d(obj)->v[at]) : undef_attr(c, obj, name);
        return 0;
    case TV_MACRO:
        if (!strcmp(ns->s, "name")) {
            const tnode *def = ((tmacro *)obj->u.o)->def;
            return def->kind == TN_MACRO ? (*out = tv_ref(def->k), 0) : ts_cstr(c, "caller", out);
        }
        break;
    default:
        break;
    }
    int id = tm_method_id(obj, ns->s, ns->len);
    if (id > 0) {
        tmethod *m = tm_alloc(c, sizeof *m);
        if (!m)
            return tc_code(c);
        m->h.rc = 1;
        m->h.bytes = sizeof *m;
        m->self = tv_ref(*obj);
        m->id = (uint16_t)id;
        out->t = TV_METHOD;
        out->fl = 0;
        out->u.o = &m->h;
        return 0;
    }
    if (id < 0) {
        *out = te_undef_msg(c, "access to attribute '%s' of '%s' object is unsafe.", ns->s,
                            tv_type_name(obj));
        return 0;
    }
    if (obj->t == TV_DICT) {
        td_get_str(tv_d(obj), ns->s, ns->len, &at);
        if (at >= 0) {
            *out = tv_ref(tv_d(obj)->v[at]);
            return 0;
        }
    }
    *out = undef_attr(c, obj, name);
    return 0;
}

static int index_of(const tval *key, size_t n, size_t *at)
{
    if (key->t != TV_INT && key->t != TV_BOOL)
        return 0;
    int64_t i = key->u.i;
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return 0;
    *at = (size_t)i;
    return 1;
}

int te_getitem(tctx *c, const tval *obj, const tval *key, tval *out)
{
    size_t at;
    switch (obj->t) {
    case TV_UNDEF:
        return te_undef_error(c, obj);
    case TV_DICT: {
        long i;
        if (!tv_hashable(key))   /* a TypeError, which getitem swallows */
            break;
        int rc = td_find(c, tv_d(obj), key, &i);
        if (rc)
            return rc;
        if (i >= 0) {
            *out = tv_ref(tv_d(obj)->v[i]);
            return 0;
        }
        break;
    }
    case TV_LIST:
        if (index_of(key, tv_l(obj)->n, &at)) {
            *out = tv_ref(tv_l(obj)->v[at]);
            return 0;
        }
        break;
    case TV_STR:
        if (index_of(key, tv_s(obj)->nchars, &at)) {
            const tstr *s = tv_s(obj);
            size_t off = ts_offset(s, at), adv;
            tu_decode(s->s + off, s->len - off, &adv);
            int rc = ts_new(c, s->s + off, adv, out);
            if (!rc)
                out->fl = obj->fl & TVF_SAFE;
            return rc;
        }
        break;
    default:
        break;
    }
    if (key->t == TV_STR) {   /* the sandbox tries the attribute next */
        if (obj->t == TV_DICT) {
            int id = tm_method_id(obj, tv_s(key)->s, tv_s(key)->len);
            if (id != 0)
                return te_getattr(c, obj, key, out);
        } else {
            return te_getattr(c, obj, key, out);
        }
    }
    *out = undef_attr(c, obj, key);
    return 0;
}

/* Python slice bounds for a sequence of len n. */
static int slice_bound(tctx *c, const tval *v, int64_t *out, int *given)
{
    *given = 0;
    if (v->t == TV_NONE || v->t == TV_UNDEF || v->t == TV_ABSENT)
        return 0;
    if (v->t != TV_INT && v->t != TV_BOOL)
        return tc_fail(c, NULL, EM_EINVAL, "slice indices must be integers or None");
    *out = v->u.i;
    *given = 1;
    return 0;
}

int te_slice(tctx *c, const tval *obj, const tval *sv, tval *out)
{
    int rc, g0, g1, g2;
    int64_t start = 0, stop = 0, step = 1;
    if ((rc = slice_bound(c, &sv[0], &start, &g0)) || (rc = slice_bound(c, &sv[1], &stop, &g1)) ||
        (rc = slice_bound(c, &sv[2], &step, &g2)))
        return rc;
    if (!g2)
        step = 1;
    if (step == 0)
        return tc_fail(c, NULL, EM_EINVAL, "slice step cannot be zero");
    /* slices bypass the sandbox's getitem in Jinja: Python's errors show */
    if (obj->t == TV_UNDEF)
        return te_undef_error(c, obj);
    if (obj->t == TV_DICT)
        return tc_fail(c, NULL, EM_EINVAL, "unhashable type: 'slice'");
    if ((obj->t != TV_LIST && obj->t != TV_STR) || (obj->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES)))
        return tc_fail(c, NULL, EM_EINVAL, "'%s' object is not subscriptable", tv_type_name(obj));
    int64_t n = obj->t == TV_LIST ? (int64_t)tv_l(obj)->n : (int64_t)tv_s(obj)->nchars;
    /* PySlice_AdjustIndices */
    if (!g0)
        start = step < 0 ? n - 1 : 0;
    else if (start < 0) {
        start += n;
        if (start < 0)
            start = step < 0 ? -1 : 0;
    } else if (start >= n)
        start = step < 0 ? n - 1 : n;
    if (!g1)
        stop = step < 0 ? -1 : n;
    else if (stop < 0) {
        stop += n;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
    } else if (stop >= n)
        stop = step < 0 ? n - 1 : n;
    int64_t count = 0;
    if (step < 0) {
        if (stop < start)
            count = (start - stop - 1) / (-step) + 1;
    } else if (start < stop) {
        count = (stop - start - 1) / step + 1;
    }
    if ((rc = tc_steps(c, (uint64_t)count)))
        return rc;
    if (obj->t == TV_LIST) {
        if ((rc = tl_new(c, (size_t)count, obj->fl & TVF_TUPLE, out)))
            return rc;
        for (int64_t k = 0, i = start; k < count; k++, i += step)
            if ((rc = tl_push(c, out, tv_ref(tv_l(obj)->v[i])))) {
                tv_drop(c, out);
                return rc;
            }
        return 0;
    }
    const tstr *s = tv_s(obj);
    tbuf b = { 0 };
    if (step == 1 && count > 0) {
        size_t a = ts_offset(s, (size_t)start), e = ts_offset(s, (size_t)(start + count));
        rc = tb_put(c, &b, s->s + a, e - a);
    } else if (count > 0) {
        /* code point offsets once, then pick */
        size_t *offs = malloc(((size_t)n + 1) * sizeof *offs);
        if (!offs) {
            rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
        } else {
            size_t k = 0;
            for (size_t i = 0; i < s->len; i++)
                if (((unsigned char)s->s[i] & 0xC0) != 0x80)
                    offs[k++] = i;
            offs[k] = s->len;
            for (int64_t j = 0, i = start; j < count && !rc; j++, i += step)
                rc = tb_put(c, &b, s->s + offs[i], offs[i + 1] - offs[i]);
            free(offs);
        }
    }
    if (rc) {
        tb_free(c, &b);
        return rc;
    }
    if ((rc = ts_from_buf(c, &b, out)))
        return rc;
    out->fl = obj->fl & TVF_SAFE;
    return 0;
}
