/* chat_tmpl_eval.c — the chat-template evaluator: runs the AST against a
 * render context. Scopes follow Jinja's rules (for bodies, macro calls,
 * call/filter/set blocks, with and generation blocks get their own scope;
 * if does not); macros with defaults, varargs, kwargs and caller; for
 * loops with filters, else, break/continue and recursion. The operations
 * under it are in chat_tmpl_ops.c. Every step is counted and every
 * recursion bounded (chat_tmpl.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpl/chat_tmpl_int.h"

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

int tc_fail(tctx *c, const tnode *n, int code, const char *fmt, ...)
{
    if (c->failed)
        return code;
    c->failed = 1;
    c->code = code;
    if (!n)
        n = c->at;
    va_list ap;
    va_start(ap, fmt);
    tmpl_fail_va(c->t, c->err, code, n ? n->off : 0, fmt, ap);
    va_end(ap);
    return code;
}

/* The undefined of a name that is not defined: its hint is the message. */
static tval undef_name(tctx *c, const tnode *n)
{
    return te_undef_msg(c, "'%s' is undefined", tv_s(&n->k)->s);
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
            return te_loop_method(c, &m->self, m->id, a, out);
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
    c->at = n;   /* fn 0: a name ember lacks, parsed in a soft frame, fails now */
    rc = n->fn ? tf_apply_filter(c, n->fn, &v, &a, out) : tf_filter_by_name(c, tv_s(&n->k)->s, &v, &a, out);
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
        case OP_IN: rc = te_contains(c, &right, &left, &r); break;
        case OP_NOTIN: rc = te_contains(c, &right, &left, &r); r = !r; break;
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

static int eval_dict(tctx *c, const tnode *n, tval *out)
{
    int rc = td_new(c, 0, out);
    for (uint32_t i = 0; i < n->n && !rc; i++) {
        tval k, v;
        if ((rc = eval(c, n->list[i], &k)))
            break;
        if ((rc = eval(c, n->list2[i], &v))) {
            tv_drop(c, &k);
            break;
        }
        c->at = n;
        rc = td_set(c, out, k, v);
    }
    if (rc && out->t == TV_DICT)
        tv_drop(c, out);
    return rc;
}

/* a ~ b ~ c: str() of each, joined (a plain string) */
static int eval_concat(tctx *c, const tnode *n, tval *out)
{
    int rc = 0;
    tbuf buf = { 0 };
    for (uint32_t i = 0; i < n->n && !rc; i++) {
        tval v;
        if ((rc = eval(c, n->list[i], &v)))
            break;
        c->at = n;
        rc = tv_write_str(c, &buf, &v);
        tv_drop(c, &v);
    }
    if (rc) {
        tb_free(c, &buf);
        return rc;
    }
    return ts_from_buf(c, &buf, out);
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
        return eval_dict(c, n, out);
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
                rc = te_slice(c, &a, sv, out);
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
        rc = n->fn ? tf_apply_test(c, n->fn, &a, &ta, &r) : tf_test_by_name(c, tv_s(&n->k)->s, &a, &ta, &r);
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
        if (n->op == OP_NOT)
            *out = tv_bool(!tv_truthy(&a));
        else
            rc = te_unary(c, n->op, &a, out);
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
    case TN_CONCAT:
        return eval_concat(c, n, out);
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
    c.result = &result;
    c.max_output = opts && opts->max_output && opts->max_output < TL_STRING ? opts->max_output : TL_STRING;
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
