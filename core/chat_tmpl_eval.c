/* chat_tmpl_eval.c — the chat-template evaluator: runs the AST against a
 * render context. Scopes follow Jinja's rules (for bodies, macro calls,
 * call/filter/set blocks, with and generation blocks get their own scope;
 * if does not), undefined values behave as jinja2.Undefined, attribute and
 * item access follow the sandbox, arithmetic and comparison follow Python.
 * Every step is counted and every recursion bounded (chat_tmpl.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_tmpl_int.h"

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

int tc_fail(tctx *c, const tnode *n, int code, const char *fmt, ...)
{
    if (c->failed)
        return code;
    c->failed = 1;
    c->code = code;
    if (!c->err)
        return code;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n)
        n = c->at;
    return tmpl_fail_at(c->t, c->err, code, n ? n->off : 0, "%s", msg);
}

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

/* The undefined of a name that is not defined: its hint is the message. */
static tval undef_name(tctx *c, const tnode *n)
{
    return te_undef_msg(c, "'%s' is undefined", tv_s(&n->k)->s);
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

/* --------------------------------------------------------------- scopes */

static int scope_new(tctx *c, tscope *parent, tscope **out)
{
    tscope *s = tm_alloc(c, sizeof *s);
    if (!s)
        return tc_code(c);
    memset(s, 0, sizeof *s);
    s->rc = 1;
    s->parent = parent;
    if (parent)
        parent->rc++;
    *out = s;
    return 0;
}

/* Leave a scope: its variables go now (that breaks the cycles through
 * macros defined in it), the object when the last reference does. */
static void scope_leave(tctx *c, tscope *s)
{
    tscope_clear(c, s);
    tscope_drop(c, s);
}

static int scope_set(tctx *c, tscope *s, uint32_t name, tval v)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (s->names[i] == name) {
            tv_drop_raw(c, s->vals[i]);
            s->vals[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 4;
        size_t add = (size_t)(nc - s->cap) * (sizeof *s->names + sizeof *s->vals);
        int rc = tm_charge(c, add);
        if (rc) {
            tv_drop_raw(c, v);
            return rc;
        }
        uint32_t *nn = realloc(s->names, nc * sizeof *nn);
        if (nn)
            s->names = nn;
        tval *nv = nn ? realloc(s->vals, nc * sizeof *nv) : NULL;
        if (!nv) {
            tm_uncharge(c, add);
            tv_drop_raw(c, v);
            return tc_fail(c, NULL, EM_ENOMEM, "out of memory");
        }
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return 0;
}

static const tval *scope_get(const tscope *s, uint32_t name)
{
    for (; s; s = s->parent)
        for (uint32_t i = s->n; i-- > 0;)
            if (s->names[i] == name)
                return &s->vals[i];
    return NULL;
}

/* -------------------------------------------------------------- helpers */

static int eval(tctx *c, const tnode *n, tval *out);
static int exec_body(tctx *c, tnode *const *body, uint32_t n);

static int enter(tctx *c, const tnode *n)
{
    c->at = n;
    if (++c->steps > TL_STEPS)
        return tc_fail(c, n, EM_ERANGE, "template takes more than %llu steps (EM_TMPL_MAX_STEPS)",
                       (unsigned long long)TL_STEPS);
    if (c->depth >= TL_DEPTH)
        return tc_fail(c, n, EM_ERANGE, "template nests deeper than %d while rendering "
                       "(EM_TMPL_MAX_DEPTH)", TL_DEPTH);
    c->depth++;
    return 0;
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
            if ((rc = ts_new(c, s->s + i, adv, &ch)))
                goto fail;
            ch.fl = v->fl & TVF_SAFE;
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
static int contains(tctx *c, const tval *container, const tval *item, int *res)
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

/* ------------------------------------------------------------ arguments */

static void args_free(tctx *c, targs *a, tval *hold)
{
    for (size_t i = 0; i < a->npos; i++)
        tv_drop_raw(c, a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++)
        tv_drop_raw(c, a->kval[i]);
    free(a->pos);
    free(a->kval);
    free(a->kname);
    memset(a, 0, sizeof *a);
    if (hold)
        tv_drop(c, hold);
}

/* Evaluate call arguments; *hold keeps a **kwargs dict alive (its keys
 * are borrowed as names). Free with args_free. */
static int eval_args(tctx *c, const targs_node *an, targs *a, tval *hold)
{
    int rc = 0;
    tval dyn = tv_undef(), dkw = tv_undef();
    memset(a, 0, sizeof *a);
    *hold = tv_undef();
    if (an->dyn_args) {
        tval v;
        if ((rc = eval(c, an->dyn_args, &v)))
            return rc;
        rc = te_iterate(c, &v, &dyn);
        tv_drop(c, &v);
        if (rc)
            return rc;
    }
    if (an->dyn_kwargs) {
        if ((rc = eval(c, an->dyn_kwargs, &dkw)))
            goto fail;
        if (dkw.t != TV_DICT) {
            rc = tc_fail(c, an->dyn_kwargs, EM_EINVAL, "argument after ** must be a mapping, not %s",
                         tv_type_name(&dkw));
            goto fail;
        }
    }
    size_t nd = dyn.t == TV_LIST ? tv_l(&dyn)->n : 0, nk = dkw.t == TV_DICT ? tv_d(&dkw)->n : 0;
    size_t npos = an->npos + nd, nkw = an->nkw + nk;
    if ((npos && !(a->pos = malloc(npos * sizeof *a->pos))) ||
        (nkw && (!(a->kval = malloc(nkw * sizeof *a->kval)) ||
                 !(a->kname = malloc(nkw * sizeof *a->kname))))) {
        rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < an->npos; i++) {
        if ((rc = eval(c, an->pos[i], &a->pos[a->npos])))
            goto fail;
        a->npos++;
    }
    for (size_t i = 0; i < nd; i++)
        a->pos[a->npos++] = tv_ref(tv_l(&dyn)->v[i]);
    for (uint32_t i = 0; i < an->nkw; i++) {
        if ((rc = eval(c, an->kval[i], &a->kval[a->nkw])))
            goto fail;
        a->kname[a->nkw++] = an->kname[i];
    }
    for (size_t i = 0; i < nk; i++) {
        const tval *k = &tv_d(&dkw)->k[i];
        if (k->t != TV_STR) {
            rc = tc_fail(c, an->dyn_kwargs, EM_EINVAL, "keywords must be strings");
            goto fail;
        }
        a->kname[a->nkw] = tv_s(k)->s;
        a->kval[a->nkw++] = tv_ref(tv_d(&dkw)->v[i]);
    }
    tv_drop(c, &dyn);
    *hold = dkw;
    return 0;
fail:
    tv_drop(c, &dyn);
    args_free(c, a, NULL);
    tv_drop(c, &dkw);
    return rc;
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

/* --------------------------------------------------------------- macros */

static int capture(tctx *c, tnode *const *body, uint32_t n, tval *out)
{
    tbuf b = { 0 }, *saved = c->out;
    c->out = &b;
    int rc = exec_body(c, body, n);
    c->out = saved;
    if (rc) {   /* an error, or break/continue leaving a set block */
        tb_free(c, &b);
        return rc;
    }
    return ts_from_buf(c, &b, out);
}

static int call_macro(tctx *c, const tmacro *m, const targs *a, const tval *caller, tval *out)
{
    const tnode *def = m->def;
    const char *name = def->kind == TN_MACRO ? tv_s(&def->k)->s : "caller";
    int rc;
    if (c->macro_depth >= TL_MACRO_DEPTH)
        return tc_fail(c, NULL, EM_ERANGE, "macro calls nested deeper than %d (EM_TMPL_MAX_CALL_DEPTH)",
                       TL_MACRO_DEPTH);
    tscope *s;
    if ((rc = scope_new(c, m->closure, &s)))
        return rc;
    tval varargs = tv_undef(), kwargs = tv_undef();
    uint32_t np = def->np;
    size_t used_kw = 0;
    if (a->npos > np && !(def->op & TNF_VARARGS)) {
        rc = tc_fail(c, NULL, EM_EINVAL, "macro '%s' takes not more than %u argument(s)", name, np);
        goto done;
    }
    tscope *saved = c->scope;
    c->scope = s;   /* defaults see the parameters before them */
    for (uint32_t i = 0; i < np && !rc; i++) {
        tval v = tv_undef();
        int have = 0;
        if (i < a->npos) {
            v = tv_ref(a->pos[i]);
            have = 1;
        } else {
            for (size_t k = 0; k < a->nkw; k++)
                if (!strcmp(a->kname[k], def->pname[i])) {
                    v = tv_ref(a->kval[k]);
                    have = 1;
                    used_kw++;
                    break;
                }
        }
        if (!have) {
            if (def->pdef && def->pdef[i])
                rc = eval(c, def->pdef[i], &v);
            else
                v = te_undef_msg(c, "parameter '%s' was not provided", def->pname[i]);
        }
        if (!rc)
            rc = scope_set(c, s, def->pid[i], v);
    }
    c->scope = saved;
    if (rc)
        goto done;
    /* keyword arguments the parameters did not take */
    int caller_kw = 0;
    if (used_kw < a->nkw) {
        if (def->op & TNF_KWARGS && (rc = td_new(c, 0, &kwargs)))
            goto done;
        for (size_t k = 0; k < a->nkw; k++) {
            uint32_t i;
            for (i = 0; i < np; i++)
                if (!strcmp(a->kname[k], def->pname[i]) && i >= a->npos)
                    break;
            if (i < np)
                continue;
            if (!strcmp(a->kname[k], "caller") && (def->op & TNF_CALLER) && !caller) {
                caller_kw = 1;
                if ((rc = scope_set(c, s, ATOM_CALLER, tv_ref(a->kval[k]))))
                    goto done;
                continue;
            }
            if (def->op & TNF_KWARGS) {
                tval key;
                if ((rc = ts_cstr(c, a->kname[k], &key)) ||
                    (rc = td_set(c, &kwargs, key, tv_ref(a->kval[k]))))
                    goto done;
                continue;
            }
            rc = tc_fail(c, NULL, EM_EINVAL, "macro '%s' takes no keyword argument '%s'", name, a->kname[k]);
            goto done;
        }
    }
    if (caller && !(def->op & TNF_CALLER)) {
        rc = tc_fail(c, NULL, EM_EINVAL, "macro '%s' was invoked with a caller but does not use one", name);
        goto done;
    }
    if ((def->op & TNF_CALLER) && !caller_kw &&
        (rc = scope_set(c, s, ATOM_CALLER, caller ? tv_ref(*caller) : te_undef_msg(c, "No caller defined"))))
        goto done;
    if (def->op & TNF_KWARGS) {
        if (kwargs.t != TV_DICT && (rc = td_new(c, 0, &kwargs)))
            goto done;
        rc = scope_set(c, s, ATOM_KWARGS, kwargs);
        kwargs = tv_undef();
        if (rc)
            goto done;
    }
    if (def->op & TNF_VARARGS) {
        size_t extra = a->npos > np ? a->npos - np : 0;
        if ((rc = tl_new(c, extra, TVF_TUPLE, &varargs)))
            goto done;
        for (size_t i = np; i < a->npos; i++)
            if ((rc = tl_push(c, &varargs, tv_ref(a->pos[i]))))
                goto done;
        rc = scope_set(c, s, ATOM_VARARGS, varargs);
        varargs = tv_undef();
        if (rc)
            goto done;
    }
    c->macro_depth++;
    c->scope = s;
    rc = capture(c, def->list, def->n, out);
    c->scope = saved;
    c->macro_depth--;
done:
    tv_drop(c, &varargs);
    tv_drop(c, &kwargs);
    scope_leave(c, s);
    return rc;
}

static int make_macro(tctx *c, const tnode *def, tval *out)
{
    tmacro *m = tm_alloc(c, sizeof *m);
    if (!m)
        return tc_code(c);
    m->h.rc = 1;
    m->h.bytes = sizeof *m;
    m->def = def;
    m->closure = c->scope;
    c->scope->rc++;
    out->t = TV_MACRO;
    out->fl = 0;
    out->u.o = &m->h;
    return 0;
}

/* ---------------------------------------------------------------- loops */

static int run_for(tctx *c, const tnode *n, const tval *iterable, uint32_t depth0, tval *capture_out);

enum { TM_LOOP_CYCLE = 1000, TM_LOOP_CHANGED };

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

static int loop_method(tctx *c, const tval *lv, int id, const targs *a, tval *out)
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

static int do_slice(tctx *c, const tval *obj, const tval *sv, tval *out)
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

/* ---------------------------------------------------------------- calls */

int te_call_value(tctx *c, const tval *fn, const targs *a, tval *out)
{
    switch (fn->t) {
    case TV_MACRO:
        return call_macro(c, (const tmacro *)fn->u.o, a, NULL, out);
    case TV_FUNC:
        return tg_call_global(c, (int)fn->u.i, a, out);
    case TV_METHOD: {
        const tmethod *m = (const tmethod *)fn->u.o;
        if (m->id >= TM_LOOP_CYCLE)
            return loop_method(c, &m->self, m->id, a, out);
        return tm_call_method(c, &m->self, m->id, a, out);
    }
    case TV_LOOP: {
        const tloop *lp = (const tloop *)fn->u.o;
        if (!(lp->node->op & TNF_RECURSIVE))
            return tc_fail(c, NULL, EM_EINVAL, "tried to call a non-recursive loop "
                           "(the for tag needs 'recursive')");
        if (a->npos != 1 || a->nkw)
            return tc_fail(c, NULL, EM_EINVAL, "loop() takes exactly one argument");
        tscope *saved = c->scope;
        c->scope = lp->scope;
        int rc = run_for(c, lp->node, &a->pos[0], lp->depth0 + 1, out);
        c->scope = saved;
        return rc;
    }
    case TV_UNDEF:
        return te_undef_error(c, fn);
    default:
        return tc_fail(c, NULL, EM_EINVAL, "'%s' object is not callable", tv_type_name(fn));
    }
}

static int eval_call(tctx *c, const tnode *n, tval *out)
{
    int rc;
    tval fn = tv_undef(), self = tv_undef(), hold;
    targs a;
    int method = 0;
    if (n->a->kind == TN_GETATTR) {   /* obj.method(...) without a bound method object */
        if ((rc = eval(c, n->a->a, &self)))
            return rc;
        if (self.t != TV_UNDEF && self.t != TV_LOOP && self.t != TV_NS && self.t != TV_MACRO) {
            const tstr *name = tv_s(&n->a->k);
            method = tm_method_id(&self, name->s, name->len);
            if (method < 0)
                method = 0;
        }
        if (!method) {
            c->at = n->a;
            rc = te_getattr(c, &self, &n->a->k, &fn);
            tv_drop(c, &self);
            if (rc)
                return rc;
        }
    } else if ((rc = eval(c, n->a, &fn))) {
        return rc;
    }
    if ((rc = eval_args(c, &n->args, &a, &hold)))
        goto done;
    c->at = n;
    rc = method ? tm_call_method(c, &self, method, &a, out) : te_call_value(c, &fn, &a, out);
    args_free(c, &a, &hold);
done:
    tv_drop(c, &fn);
    tv_drop(c, &self);
    return rc;
}

static int eval_filter(tctx *c, const tnode *n, const tval *base, tval *out)
{
    int rc = 0;
    tval v, hold;
    targs a;
    if (!n->a) {
        v = tv_ref(*base);
    } else if (n->a->kind == TN_FILTER) {   /* a chain: x|f|g */
        if (!(rc = enter(c, n->a))) {
            rc = eval_filter(c, n->a, base, &v);
            c->depth--;
        }
    } else {
        rc = eval(c, n->a, &v);
    }
    if (rc)
        return rc;
    if ((rc = eval_args(c, &n->args, &a, &hold))) {
        tv_drop(c, &v);
        return rc;
    }
    c->at = n;
    rc = tf_apply_filter(c, n->fn, &v, &a, out);
    args_free(c, &a, &hold);
    tv_drop(c, &v);
    return rc;
}

/* --------------------------------------------------------------- assign */

static int assign(tctx *c, const tnode *target, const tval *v)
{
    int rc;
    if (target->kind == TN_NAME)
        return scope_set(c, c->scope, target->id, tv_ref(*v));
    if (target->kind == TN_NSREF) {
        const tval *ns = scope_get(c->scope, target->id);
        if (!ns || ns->t != TV_NS)
            return tc_fail(c, target, EM_EINVAL, "cannot assign attribute on non-namespace object");
        tval key = tv_ref(target->k);
        return td_set(c, (tval *)ns, key, tv_ref(*v));
    }
    /* tuple unpacking */
    tval items;
    c->at = target;
    if ((rc = te_iterate(c, v, &items)))
        return rc;
    const tlist *l = tv_l(&items);
    if (l->n != target->n)
        rc = l->n < target->n
                 ? tc_fail(c, target, EM_EINVAL, "not enough values to unpack (expected %u, got %zu)",
                           target->n, l->n)
                 : tc_fail(c, target, EM_EINVAL, "too many values to unpack (expected %u)", target->n);
    for (uint32_t i = 0; !rc && i < target->n; i++)
        rc = assign(c, target->list[i], &l->v[i]);
    tv_drop(c, &items);
    return rc;
}

/* ----------------------------------------------------------- expressions */

static int eval_compare(tctx *c, const tnode *n, tval *out)
{
    int rc;
    tval left;
    if ((rc = eval(c, n->a, &left)))
        return rc;
    int result = 1;
    for (uint32_t i = 0; i < n->n && result; i++) {
        tval right;
        if ((rc = eval(c, n->list[i], &right)))
            break;
        c->at = n;
        int r = 0, cmp;
        switch (n->ops[i]) {
        case OP_EQ: rc = tv_eq(c, &left, &right, &r); break;
        case OP_NE: rc = tv_eq(c, &left, &right, &r); r = !r; break;
        case OP_LT: rc = tv_cmp(c, &left, &right, &cmp, "<"); r = cmp == -1; break;
        case OP_LTEQ: rc = tv_cmp(c, &left, &right, &cmp, "<="); r = cmp == -1 || cmp == 0; break;
        case OP_GT: rc = tv_cmp(c, &left, &right, &cmp, ">"); r = cmp == 1; break;
        case OP_GTEQ: rc = tv_cmp(c, &left, &right, &cmp, ">="); r = cmp == 1 || cmp == 0; break;
        case OP_IN: rc = contains(c, &right, &left, &r); break;
        case OP_NOTIN: rc = contains(c, &right, &left, &r); r = !r; break;
        default: break;
        }
        tv_drop(c, &left);
        left = right;
        if (rc)
            break;
        result = r;
    }
    tv_drop(c, &left);
    if (!rc)
        *out = tv_bool(result);
    return rc;
}

static int eval_seq(tctx *c, const tnode *n, tval *out)
{
    int rc;
    if ((rc = tl_new(c, n->n, n->kind == TN_TUPLE ? TVF_TUPLE : 0, out)))
        return rc;
    for (uint32_t i = 0; i < n->n; i++) {
        tval v;
        if ((rc = eval(c, n->list[i], &v)) || (rc = tl_push(c, out, v))) {
            tv_drop(c, out);
            return rc;
        }
    }
    return 0;
}

static int eval_node(tctx *c, const tnode *n, tval *out)
{
    int rc;
    tval a, b;
    switch (n->kind) {
    case TN_CONST:
        *out = n->k;   /* immortal or a scalar */
        return 0;
    case TN_NAME: {
        const tval *v = scope_get(c->scope, n->id);
        if (v)
            *out = tv_ref(*v);
        else if (n->fn) {
            out->t = TV_FUNC;
            out->fl = 0;
            out->u.i = n->fn;
        } else
            *out = undef_name(c, n);
        return 0;
    }
    case TN_LIST:
    case TN_TUPLE:
        return eval_seq(c, n, out);
    case TN_DICT:
        if ((rc = td_new(c, 0, out)))
            return rc;
        for (uint32_t i = 0; i < n->n; i++) {
            if ((rc = eval(c, n->list[i], &a)))
                goto dict_fail;
            if ((rc = eval(c, n->list2[i], &b))) {
                tv_drop(c, &a);
                goto dict_fail;
            }
            c->at = n;
            if ((rc = td_set(c, out, a, b)))
                goto dict_fail;
        }
        return 0;
    dict_fail:
        tv_drop(c, out);
        return rc;
    case TN_GETATTR:
        if ((rc = eval(c, n->a, &a)))
            return rc;
        c->at = n;
        rc = te_getattr(c, &a, &n->k, out);
        tv_drop(c, &a);
        return rc;
    case TN_GETITEM:
        if ((rc = eval(c, n->a, &a)))
            return rc;
        if (n->b->kind == TN_SLICE) {
            tval sv[3] = { tv_none(), tv_none(), tv_none() };
            const tnode *parts[3] = { n->b->b, n->b->c, n->b->d };
            for (int i = 0; i < 3 && !rc; i++)
                if (parts[i])
                    rc = eval(c, parts[i], &sv[i]);
            c->at = n;
            if (!rc)
                rc = do_slice(c, &a, sv, out);
            for (int i = 0; i < 3; i++)
                tv_drop(c, &sv[i]);
            tv_drop(c, &a);
            return rc;
        }
        if ((rc = eval(c, n->b, &b))) {
            tv_drop(c, &a);
            return rc;
        }
        c->at = n;
        rc = te_getitem(c, &a, &b, out);
        tv_drop(c, &a);
        tv_drop(c, &b);
        return rc;
    case TN_SLICE:
        return tc_fail(c, n, EM_EUNSUPPORTED, "a slice inside a tuple index is not supported");
    case TN_CALL:
        return eval_call(c, n, out);
    case TN_FILTER:
        return eval_filter(c, n, NULL, out);
    case TN_TEST: {
        tval hold;
        targs ta;
        int r = 0;
        if ((rc = eval(c, n->a, &a)))
            return rc;
        if ((rc = eval_args(c, &n->args, &ta, &hold))) {
            tv_drop(c, &a);
            return rc;
        }
        c->at = n;
        rc = tf_apply_test(c, n->fn, &a, &ta, &r);
        args_free(c, &ta, &hold);
        tv_drop(c, &a);
        if (!rc)
            *out = tv_bool((n->op & TNF_NEGATED) ? !r : r);
        return rc;
    }
    case TN_UNARY:
        if ((rc = eval(c, n->a, &a)))
            return rc;
        c->at = n;
        if (n->op == OP_NOT) {
            *out = tv_bool(!tv_truthy(&a));
        } else if (a.t == TV_UNDEF) {
            rc = te_undef_error(c, &a);
        } else if (a.t == TV_INT || a.t == TV_BOOL) {
            if (n->op == OP_NEG && a.u.i == INT64_MIN)
                rc = overflow(c);
            else
                *out = tv_int(n->op == OP_NEG ? -a.u.i : a.u.i);
        } else if (a.t == TV_FLOAT) {
            *out = tv_float(n->op == OP_NEG ? -a.u.f : a.u.f);
        } else {
            rc = tc_fail(c, n, EM_EINVAL, "bad operand type for unary %c: '%s'", n->op == OP_NEG ? '-' : '+',
                         tv_type_name(&a));
        }
        tv_drop(c, &a);
        return rc;
    case TN_BIN:
        if ((rc = eval(c, n->a, &a)))
            return rc;
        if (n->op == OP_AND || n->op == OP_OR) {
            int t = tv_truthy(&a);
            if ((n->op == OP_AND) != t) {
                *out = a;
                return 0;
            }
            tv_drop(c, &a);
            return eval(c, n->b, out);
        }
        if ((rc = eval(c, n->b, &b))) {
            tv_drop(c, &a);
            return rc;
        }
        c->at = n;
        rc = te_arith(c, n->op, &a, &b, out);
        tv_drop(c, &a);
        tv_drop(c, &b);
        return rc;
    case TN_CONCAT: {
        tbuf buf = { 0 };
        for (uint32_t i = 0; i < n->n; i++) {
            if ((rc = eval(c, n->list[i], &a)))
                goto concat_fail;
            c->at = n;
            rc = tv_write_str(c, &buf, &a);
            tv_drop(c, &a);
            if (rc)
                goto concat_fail;
        }
        return ts_from_buf(c, &buf, out);
    concat_fail:
        tb_free(c, &buf);
        return rc;
    }
    case TN_COMPARE:
        return eval_compare(c, n, out);
    case TN_COND:
        if ((rc = eval(c, n->a, &a)))
            return rc;
        int t = tv_truthy(&a);
        tv_drop(c, &a);
        if (t)
            return eval(c, n->b, out);
        if (n->c)
            return eval(c, n->c, out);
        *out = te_undef_msg(c, "the inline if-expression evaluated to false and no else section was defined.");
        return 0;
    default:
        return tc_fail(c, n, EM_EINVAL, "internal error: not an expression");
    }
}

static int eval(tctx *c, const tnode *n, tval *out)
{
    int rc = enter(c, n);
    if (rc)
        return rc;
    *out = tv_undef();
    rc = eval_node(c, n, out);
    c->depth--;
    return rc;
}

/* ----------------------------------------------------------- statements */

static int run_for(tctx *c, const tnode *n, const tval *iterable, uint32_t depth0, tval *capture_out)
{
    int rc;
    tval items, loop = tv_undef();
    tscope *it = NULL;
    tbuf buf = { 0 }, *saved_out = c->out;
    c->at = n;
    if ((rc = te_iterate(c, iterable, &items)))
        return rc;
    if (n->c) {   /* for x in xs if cond: filter first (loop.length counts what passes) */
        tval kept;
        if ((rc = tl_new(c, 0, 0, &kept)))
            goto done;
        if ((rc = scope_new(c, c->scope, &it))) {
            tv_drop(c, &kept);
            goto done;
        }
        tscope *saved = c->scope;
        for (size_t i = 0; i < tv_l(&items)->n && !rc; i++) {
            tval t;
            tscope_clear(c, it);
            c->scope = it;
            rc = assign(c, n->a, &tv_l(&items)->v[i]);
            if (!rc)
                rc = eval(c, n->c, &t);
            c->scope = saved;
            if (rc)
                break;
            if (tv_truthy(&t))
                rc = tl_push(c, &kept, tv_ref(tv_l(&items)->v[i]));
            tv_drop(c, &t);
        }
        scope_leave(c, it);
        it = NULL;
        tv_drop(c, &items);
        items = kept;
        if (rc)
            goto done;
    }
    tloop *lp = tm_alloc(c, sizeof *lp);
    if (!lp) {
        rc = tc_code(c);
        goto done;
    }
    memset(lp, 0, sizeof *lp);
    lp->h.rc = 1;
    lp->h.bytes = sizeof *lp;
    lp->items = tv_ref(items);
    lp->length = tv_l(&items)->n;
    lp->depth0 = depth0;
    lp->last_changed = tv_undef();
    lp->node = n;
    lp->scope = c->scope;
    c->scope->rc++;
    loop.t = TV_LOOP;
    loop.fl = 0;
    loop.u.o = &lp->h;
    if ((rc = scope_new(c, c->scope, &it)))
        goto done;
    if (capture_out)
        c->out = &buf;
    tscope *saved = c->scope;
    int no_full_pass = 1;
    for (size_t i = 0; i < lp->length; i++) {
        lp->index0 = i;
        tscope_clear(c, it);
        if ((rc = tc_steps(c, 1)) || (rc = scope_set(c, it, ATOM_LOOP, tv_ref(loop))))
            break;
        c->scope = it;
        rc = assign(c, n->a, &tv_l(&items)->v[i]);
        if (!rc)
            rc = exec_body(c, n->list, n->n);
        c->scope = saved;
        if (rc == FLOW_BREAK) {
            rc = 0;
            break;
        }
        if (rc == FLOW_CONTINUE) {
            rc = 0;
            continue;
        }
        if (rc)
            break;
        no_full_pass = 0;
    }
    if (!rc && no_full_pass && n->n2) {
        tscope *es;
        if (!(rc = scope_new(c, c->scope, &es))) {
            c->scope = es;
            rc = exec_body(c, n->list2, n->n2);
            c->scope = saved;
            scope_leave(c, es);
        }
    }
    c->out = saved_out;
    if (rc > 0 && capture_out)   /* loop controls stay inside a recursive call */
        rc = 0;
    if (!rc && capture_out)
        rc = ts_from_buf(c, &buf, capture_out);
done:
    c->out = saved_out;
    tb_free(c, &buf);
    if (it)
        scope_leave(c, it);
    tv_drop(c, &items);
    tv_drop(c, &loop);
    return rc;
}

static int exec(tctx *c, const tnode *n)
{
    int rc;
    tval v;
    switch (n->kind) {
    case TN_DATA:
        return tb_put(c, c->out, tv_s(&n->k)->s, tv_s(&n->k)->len);
    case TN_PRINT:
        for (uint32_t i = 0; i < (n->a ? 1 : n->n); i++) {   /* {{ x }}, or {% print a, b %} */
            if ((rc = eval(c, n->a ? n->a : n->list[i], &v)))
                return rc;
            c->at = n;
            rc = tv_write_str(c, c->out, &v);
            tv_drop(c, &v);
            if (rc)
                return rc;
        }
        return 0;
    case TN_IF:
        if ((rc = eval(c, n->a, &v)))
            return rc;
        int t = tv_truthy(&v);
        tv_drop(c, &v);
        return t ? exec_body(c, n->list, n->n) : exec_body(c, n->list2, n->n2);
    case TN_FOR:
        if ((rc = eval(c, n->b, &v)))
            return rc;
        rc = run_for(c, n, &v, 0, NULL);
        tv_drop(c, &v);
        return rc;
    case TN_SET:
        if ((rc = eval(c, n->b, &v)))
            return rc;
        rc = assign(c, n->a, &v);
        tv_drop(c, &v);
        return rc;
    case TN_SETBLOCK:
    case TN_FILTERBLOCK: {
        tscope *s, *saved = c->scope;
        if ((rc = scope_new(c, c->scope, &s)))
            return rc;
        c->scope = s;
        rc = capture(c, n->list, n->n, &v);
        c->scope = saved;
        scope_leave(c, s);
        if (rc)
            return rc;
        if (n->b) {
            tval f;
            rc = eval_filter(c, n->b, &v, &f);
            tv_drop(c, &v);
            if (rc)
                return rc;
            v = f;
        }
        c->at = n;
        rc = n->kind == TN_SETBLOCK ? assign(c, n->a, &v) : tv_write_str(c, c->out, &v);
        tv_drop(c, &v);
        return rc;
    }
    case TN_MACRO:
        if ((rc = make_macro(c, n, &v)))
            return rc;
        return scope_set(c, c->scope, n->id, v);
    case TN_CALLBLOCK: {
        const tnode *call = n->a;
        tval fn, caller, hold, res;
        targs a;
        if ((rc = eval(c, call->a, &fn)))
            return rc;
        if (fn.t != TV_MACRO) {
            rc = fn.t == TV_UNDEF ? te_undef_error(c, &fn)
                                  : tc_fail(c, call, EM_EUNSUPPORTED, "a call block must call a macro");
            tv_drop(c, &fn);
            return rc;
        }
        if ((rc = make_macro(c, n, &caller))) {
            tv_drop(c, &fn);
            return rc;
        }
        if (!(rc = eval_args(c, &call->args, &a, &hold))) {
            c->at = call;
            rc = call_macro(c, (const tmacro *)fn.u.o, &a, &caller, &res);
            args_free(c, &a, &hold);
            if (!rc) {
                rc = tv_write_str(c, c->out, &res);
                tv_drop(c, &res);
            }
        }
        tv_drop(c, &caller);
        tv_drop(c, &fn);
        return rc;
    }
    case TN_WITH:
    case TN_SCOPE: {
        tscope *s, *saved = c->scope;
        if ((rc = scope_new(c, c->scope, &s)))
            return rc;
        for (uint32_t i = 0; i + 1 < n->n2 && !rc; i += 2) {   /* values see the outer scope */
            if ((rc = eval(c, n->list2[i + 1], &v)))
                break;
            c->scope = s;
            rc = assign(c, n->list2[i], &v);
            c->scope = saved;
            tv_drop(c, &v);
        }
        if (!rc) {
            c->scope = s;
            rc = exec_body(c, n->list, n->n);
            c->scope = saved;
        }
        scope_leave(c, s);
        return rc;
    }
    case TN_BREAK:
        return FLOW_BREAK;
    case TN_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return tc_fail(c, n, EM_EINVAL, "internal error: not a statement");
    }
}

static int exec_body(tctx *c, tnode *const *body, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int rc = enter(c, body[i]);
        if (rc)
            return rc;
        rc = exec(c, body[i]);
        c->depth--;
        if (rc)
            return rc;
    }
    return 0;
}

/* --------------------------------------------------------------- render */

int te_render(const em_tmpl *t, const json_t *vars, const em_tmpl_opts *opts, char **out,
              size_t *out_len, em_err *err)
{
    tctx c = { .t = t, .err = err };
    tbuf result = { 0 };
    int rc;
    *out = NULL;
    *out_len = 0;
    if (opts && opts->now) {
        c.now = *opts->now;
    } else {
        time_t now = time(NULL);
        localtime_r(&now, &c.now);
    }
    if ((rc = scope_new(&c, NULL, &c.root)))
        goto done;
    c.scope = c.root;
    if (vars && !json_is_object(vars)) {
        rc = em_err_set(err, EM_EINVAL, "template: the variables must be a JSON object");
        goto done;
    }
    if (vars) {
        const char *key;
        size_t klen;
        json_t *val;
        json_object_keylen_foreach((json_t *)vars, key, klen, val) {
            long id = tmpl_atom_find(t, key, klen);
            if (id < 0)
                continue;   /* the template never names it */
            tval v;
            if ((rc = tv_from_json(&c, val, &v, 1)) || (rc = scope_set(&c, c.root, (uint32_t)id, v)))
                goto done;
        }
    }
    c.out = &result;
    rc = exec_body(&c, t->body, t->n_body);
    if (rc > 0)
        rc = 0;
done:
    if (c.root)
        scope_leave(&c, c.root);
    for (size_t i = 0; i < c.n_ns; i++) {   /* namespaces may hold themselves */
        tdict *d = tv_d(&c.ns_all[i]);
        for (size_t k = 0; k < d->n; k++) {
            tv_drop_raw(&c, d->k[k]);
            tv_drop_raw(&c, d->v[k]);
        }
        d->n = 0;
    }
    for (size_t i = 0; i < c.n_ns; i++)
        tv_drop_raw(&c, c.ns_all[i]);
    free(c.ns_all);
    if (rc) {
        tb_free(&c, &result);
        if (err && err->code == EM_OK)
            em_err_set(err, rc, "template: %s", em_err_str(rc));
        return rc;
    }
    if (!result.p && !(result.p = calloc(1, 1)))
        return em_err_set(err, EM_ENOMEM, "template: out of memory");
    *out = result.p;
    *out_len = result.n;
    return 0;
}

int tc_register_ns(tctx *c, const tval *ns)
{
    if (c->n_ns == c->cap_ns) {
        size_t nc = c->cap_ns ? c->cap_ns * 2 : 8;
        tval *nv = realloc(c->ns_all, nc * sizeof *nv);
        if (!nv)
            return tc_fail(c, NULL, EM_ENOMEM, "out of memory");
        c->ns_all = nv;
        c->cap_ns = nc;
    }
    c->ns_all[c->n_ns++] = tv_ref(*ns);
    return 0;
}
