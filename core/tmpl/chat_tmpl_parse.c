/* chat_tmpl_parse.c — the chat-template parser: tokens to an AST, following
 * Jinja2's grammar (parser.py) rule for rule, so that precedence, tuples,
 * tests without parentheses and the statement forms read as Jinja reads
 * them. An unknown filter or test is an error here, as when Jinja
 * compiles a template, unless it lies in what Jinja's compiler calls a soft
 * frame (an if statement's conditions and branches, a whole conditional
 * expression, not again inside a for, macro, call, filter, set or with
 * block's body): there it is parsed, and fails only when it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/tmpl/chat_tmpl_int.h"

/* ------------------------------------------------------------ parser */

typedef struct parser {
    em_tmpl    *t;
    const ttok *tk;
    size_t      n, i;
    em_err     *err;
    uint32_t    depth;
    uint32_t    loop_depth;
    uint32_t    uses[ATOM_N_RESERVED];   /* loads of loop/caller/varargs/kwargs so far */
    int         soft;       /* in a soft frame: unknown filters and tests fail when run */
    uint32_t    defer;      /* parsing what may be a conditional expression's first operand */
    const struct tnode *pending;   /* the first unknown filter or test met meanwhile */
} parser;

static const ttok *cur(parser *p) { return &p->tk[p->i]; }
static const ttok *peek(parser *p) { return &p->tk[p->i + 1 < p->n ? p->i + 1 : p->n - 1]; }
static void adv(parser *p)
{
    if (p->tk[p->i].type != TK_EOF)
        p->i++;
}

static int is_name(parser *p, const ttok *k, const char *w)
{
    size_t l = strlen(w);
    return k->type == TK_NAME && k->len == l && memcmp(p->t->src + k->off, w, l) == 0;
}

static int is_op(const ttok *k, int op) { return k->type == TK_OP && k->op == op; }

static int fail(parser *p, const ttok *k, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(parser *p, const ttok *k, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tmpl_fail_at(p->t, p->err, code, k->off, "%s", msg);
}

/* A token as Jinja's messages describe it. */
static const char *describe(parser *p, const ttok *k, char *buf, size_t cap)
{
    switch (k->type) {
    case TK_EOF: return "end of template";
    case TK_BLOCK_END: return "end of statement block";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "begin of statement block";
    case TK_VAR_BEGIN: return "begin of print statement";
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_DATA: return "template data";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(k->len > 40 ? 40 : k->len), p->t->src + k->off);
        return buf;
    }
}

static int unexpected(parser *p, const char *wanted)
{
    char b[64];
    const ttok *k = cur(p);
    if (k->type == TK_EOF)
        return fail(p, k, EM_EFORMAT, "unexpected end of template, expected %s", wanted);
    return fail(p, k, EM_EFORMAT, "expected %s, got %s", wanted, describe(p, k, b, sizeof b));
}

static int expect_op(parser *p, int op, const char *what)
{
    if (!is_op(cur(p), op))
        return unexpected(p, what);
    adv(p);
    return 0;
}

static int expect_type(parser *p, int type, const char *what)
{
    if (cur(p)->type != type)
        return unexpected(p, what);
    adv(p);
    return 0;
}

static int deeper(parser *p)
{
    if (p->depth >= TL_NEST)
        return fail(p, cur(p), EM_ERANGE, "template nested deeper than %d (EM_TMPL_MAX_NESTING)",
                    TL_NEST);
    p->depth++;
    return 0;
}

static int new_node(parser *p, int kind, uint32_t off, tnode **out)
{
    tnode *n = tmpl_arena_alloc(p->t, sizeof *n);
    *out = n;
    if (!n)
        return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
    n->kind = (uint8_t)kind;
    n->off = off;
    n->k = tv_undef();
    *out = n;
    return 0;
}

/* A growable list of nodes, copied into the arena at the end. */
typedef struct nlist {
    tnode **v;
    size_t  n, cap;
} nlist;

static int nl_push(parser *p, nlist *l, tnode *x)
{
    if (l->n >= UINT32_MAX / 2 ||
        em_grow((void **)&l->v, &l->cap, l->n, sizeof *l->v, 8))
        return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
    l->v[l->n++] = x;
    return 0;
}

static int nl_done(parser *p, nlist *l, tnode ***out, uint32_t *n)
{
    *out = NULL;
    *n = (uint32_t)l->n;
    if (l->n) {
        *out = tmpl_arena_alloc(p->t, l->n * sizeof **out);
        if (!*out) {
            free(l->v);
            l->v = NULL;
            return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        }
        memcpy(*out, l->v, l->n * sizeof **out);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
    return 0;
}

static int name_str(parser *p, const ttok *k, tval *out)
{
    if (ts_new_immortal(p->t, p->t->src + k->off, k->len, out))
        return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
    return 0;
}

static char *arena_strndup(parser *p, const char *s, size_t len)
{
    char *d = tmpl_arena_alloc(p->t, len + 1);
    if (d)
        memcpy(d, s, len);
    return d;
}

static int parse_expression(parser *p, int with_condexpr, tnode **out);
static int parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end,
                       int explicit_paren, tnode **out);
static int parse_unary(parser *p, int with_filter, tnode **out);
static int parse_primary(parser *p, tnode **out);
static int parse_postfix(parser *p, tnode **node);
static int parse_filter(parser *p, tnode **node, int start_inline);
static int subparse(parser *p, const char *const *end, tnode ***body, uint32_t *n_body);

static int parse_call_args(parser *p, targs_node *a)
{
    int rc;
    nlist pos = { 0 }, kval = { 0 };
    const char **kname = NULL;
    size_t kcap = 0;
    memset(a, 0, sizeof *a);
    if ((rc = expect_op(p, OP_LPAREN, "'('")))
        return rc;
    int need_comma = 0;
    while (!is_op(cur(p), OP_RPAREN)) {
        if (need_comma) {
            if ((rc = expect_op(p, OP_COMMA, "','")))
                goto fail;
            if (is_op(cur(p), OP_RPAREN))
                break;
        }
        const ttok *k = cur(p);
        tnode *e = NULL;
        if (is_op(k, OP_MUL) || is_op(k, OP_POW)) {
            int star2 = is_op(k, OP_POW);
            if (a->dyn_kwargs || (!star2 && a->dyn_args)) {
                rc = fail(p, k, EM_EFORMAT, "invalid syntax for function call expression");
                goto fail;
            }
            adv(p);
            if ((rc = parse_expression(p, 1, &e)))
                goto fail;
            if (star2)
                a->dyn_kwargs = e;
            else
                a->dyn_args = e;
        } else if (k->type == TK_NAME && is_op(peek(p), OP_ASSIGN)) {
            if (a->dyn_args || a->dyn_kwargs) {
                rc = fail(p, k, EM_EFORMAT, "invalid syntax for function call expression");
                goto fail;
            }
            adv(p);
            adv(p);
            if ((rc = parse_expression(p, 1, &e)))
                goto fail;
            if (em_grow((void **)&kname, &kcap, kval.n, sizeof *kname, 4) ||
                !(kname[kval.n] = arena_strndup(p, p->t->src + k->off, k->len))) {
                rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
                goto fail;
            }
            if ((rc = nl_push(p, &kval, e)))
                goto fail;
        } else {
            if (a->dyn_args || a->dyn_kwargs || kval.n) {
                rc = fail(p, k, EM_EFORMAT, "invalid syntax for function call expression");
                goto fail;
            }
            if ((rc = parse_expression(p, 1, &e)) || (rc = nl_push(p, &pos, e)))
                goto fail;
        }
        need_comma = 1;
    }
    if ((rc = expect_op(p, OP_RPAREN, "')'")))
        goto fail;
    a->nkw = (uint32_t)kval.n;
    if (kval.n) {
        a->kname = tmpl_arena_alloc(p->t, kval.n * sizeof *a->kname);
        if (!a->kname) {
            rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
            goto fail;
        }
        memcpy(a->kname, kname, kval.n * sizeof *kname);
    }
    free(kname);
    kname = NULL;
    if ((rc = nl_done(p, &pos, &a->pos, &a->npos)) || (rc = nl_done(p, &kval, &a->kval, &a->nkw)))
        return rc;
    return 0;
fail:
    free(kname);
    free(pos.v);
    free(kval.v);
    return rc;
}

/* A filter or test name: NAME ('.' NAME)* */
static int dotted_name(parser *p, char *buf, size_t cap)
{
    const ttok *k = cur(p);
    if (k->type != TK_NAME)
        return unexpected(p, "a name");
    size_t n = 0;
    for (;;) {
        k = cur(p);
        if (n + k->len + 2 > cap)
            return fail(p, k, EM_EFORMAT, "name too long");
        memcpy(buf + n, p->t->src + k->off, k->len);
        n += k->len;
        adv(p);
        if (!is_op(cur(p), OP_DOT))
            break;
        adv(p);
        if (cur(p)->type != TK_NAME)
            return unexpected(p, "a name");
        buf[n++] = '.';
    }
    buf[n] = '\0';
    return 0;
}

/* The parse error of a filter or test node whose name ember lacks (fn 0). */
static int unknown_named(parser *p, const tnode *n)
{
    const char *name = tv_s(&n->k)->s, *what = n->kind == TN_FILTER ? "filter" : "test";
    int id = n->kind == TN_FILTER ? tf_filter_id(name) : tf_test_id(name);
    if (id < 0)
        return tmpl_fail_at(p->t, p->err, EM_EFORMAT, n->off, "%s '%s' is not supported by ember", what, name);
    return tmpl_fail_at(p->t, p->err, EM_EFORMAT, n->off, "unknown %s '%s'", what, name);
}

/* A TN_FILTER or TN_TEST node (at off) for the filter or test named next.
 * A name ember lacks gets fn 0 and the name's own offset: an error here
 * unless the frame is soft (then when it runs) or the expression may yet
 * prove a conditional one (then parse_condexpr decides). */
static int named_node(parser *p, int kind, uint32_t off, tnode **out)
{
    int rc;
    const ttok *at = cur(p);
    char name[128];
    if ((rc = dotted_name(p, name, sizeof name)))
        return rc;
    int id = kind == TN_FILTER ? tf_filter_id(name) : tf_test_id(name);
    if ((rc = new_node(p, kind, id > 0 ? off : at->off, out)))
        return rc;
    (*out)->fn = (uint16_t)(id > 0 ? id : 0);
    if (ts_new_immortal(p->t, name, strlen(name), &(*out)->k))
        return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
    if (id > 0 || p->soft)
        return 0;
    if (!p->defer)
        return unknown_named(p, *out);
    if (!p->pending)
        p->pending = *out;
    return 0;
}

static int parse_filter(parser *p, tnode **node, int start_inline)
{
    int rc;
    while (is_op(cur(p), OP_PIPE) || start_inline) {
        if (!start_inline)
            adv(p);
        start_inline = 0;
        tnode *f = NULL;
        if ((rc = named_node(p, TN_FILTER, cur(p)->off, &f)))
            return rc;
        f->a = *node;
        if (is_op(cur(p), OP_LPAREN) && (rc = parse_call_args(p, &f->args)))
            return rc;
        *node = f;
    }
    return 0;
}

static int parse_test(parser *p, tnode **node)
{
    int rc;
    const ttok *is_tok = cur(p);
    adv(p);   /* 'is' */
    int negated = 0;
    if (is_name(p, cur(p), "not")) {
        adv(p);
        negated = 1;
    }
    tnode *t = NULL;
    if ((rc = named_node(p, TN_TEST, is_tok->off, &t)))
        return rc;
    t->a = *node;
    t->op = negated ? TNF_NEGATED : 0;
    const ttok *k = cur(p);
    if (is_op(k, OP_LPAREN)) {
        if ((rc = parse_call_args(p, &t->args)))
            return rc;
    } else if ((k->type == TK_NAME || k->type == TK_STRING || k->type == TK_INT ||
                k->type == TK_FLOAT || is_op(k, OP_LBRACKET) || is_op(k, OP_LBRACE)) &&
               !is_name(p, k, "else") && !is_name(p, k, "or") && !is_name(p, k, "and")) {
        if (is_name(p, k, "is"))
            return fail(p, k, EM_EFORMAT, "you cannot chain multiple tests with is");
        tnode *arg = NULL;
        if ((rc = deeper(p)))
            return rc;
        rc = parse_primary(p, &arg);
        if (!rc)
            rc = parse_postfix(p, &arg);
        p->depth--;
        if (rc)
            return rc;
        t->args.pos = tmpl_arena_alloc(p->t, sizeof *t->args.pos);
        if (!t->args.pos)
            return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        t->args.pos[0] = arg;
        t->args.npos = 1;
    }
    *node = t;
    return 0;
}

static int parse_subscribed(parser *p, tnode **out)
{
    int rc;
    const ttok *at = cur(p);
    tnode *parts[3] = { NULL, NULL, NULL };
    if (is_op(at, OP_COLON)) {
        adv(p);
    } else {
        tnode *e = NULL;
        if ((rc = parse_expression(p, 1, &e)))
            return rc;
        if (!is_op(cur(p), OP_COLON)) {
            *out = e;
            return 0;
        }
        adv(p);
        parts[0] = e;
    }
    const ttok *k = cur(p);
    if (!is_op(k, OP_COLON) && !is_op(k, OP_RBRACKET) && !is_op(k, OP_COMMA))
        if ((rc = parse_expression(p, 1, &parts[1])))
            return rc;
    if (is_op(cur(p), OP_COLON)) {
        adv(p);
        k = cur(p);
        if (!is_op(k, OP_RBRACKET) && !is_op(k, OP_COMMA))
            if ((rc = parse_expression(p, 1, &parts[2])))
                return rc;
    }
    tnode *s = NULL;
    if ((rc = new_node(p, TN_SLICE, at->off, &s)))
        return rc;
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    *out = s;
    return 0;
}

static int parse_subscript(parser *p, tnode **node)
{
    int rc;
    const ttok *k = cur(p);
    tnode *n = NULL;
    if (is_op(k, OP_DOT)) {
        adv(p);
        const ttok *a = cur(p);
        if (a->type == TK_NAME) {
            if ((rc = new_node(p, TN_GETATTR, a->off, &n)) || (rc = name_str(p, a, &n->k)))
                return rc;
            adv(p);
            n->a = *node;
            *node = n;
            return 0;
        }
        if (a->type != TK_INT)
            return fail(p, a, EM_EFORMAT, "expected name or number");
        tnode *c = NULL;
        if ((rc = new_node(p, TN_GETITEM, a->off, &n)) || (rc = new_node(p, TN_CONST, a->off, &c)))
            return rc;
        c->k = tv_int(a->v.i);
        adv(p);
        n->a = *node;
        n->b = c;
        *node = n;
        return 0;
    }
    /* '[' */
    adv(p);
    nlist args = { 0 };
    while (!is_op(cur(p), OP_RBRACKET)) {
        if (args.n && (rc = expect_op(p, OP_COMMA, "','")))
            goto fail;
        tnode *e = NULL;
        if ((rc = parse_subscribed(p, &e)) || (rc = nl_push(p, &args, e)))
            goto fail;
    }
    if ((rc = expect_op(p, OP_RBRACKET, "']'")))
        goto fail;
    if (!args.n) {
        rc = fail(p, k, EM_EFORMAT, "expected subscript expression");
        goto fail;
    }
    if ((rc = new_node(p, TN_GETITEM, k->off, &n)))
        goto fail;
    n->a = *node;
    if (args.n == 1) {
        n->b = args.v[0];
        free(args.v);
    } else {
        tnode *tup = NULL;
        if ((rc = new_node(p, TN_TUPLE, k->off, &tup)))
            goto fail;
        if ((rc = nl_done(p, &args, &tup->list, &tup->n)))
            return rc;
        n->b = tup;
    }
    *node = n;
    return 0;
fail:
    free(args.v);
    return rc;
}

static int parse_call(parser *p, tnode **node)
{
    int rc;
    tnode *c = NULL;
    if ((rc = new_node(p, TN_CALL, cur(p)->off, &c)) || (rc = parse_call_args(p, &c->args)))
        return rc;
    c->a = *node;
    *node = c;
    return 0;
}

static int parse_postfix(parser *p, tnode **node)
{
    int rc;
    for (;;) {
        const ttok *k = cur(p);
        if (is_op(k, OP_DOT) || is_op(k, OP_LBRACKET))
            rc = parse_subscript(p, node);
        else if (is_op(k, OP_LPAREN))
            rc = parse_call(p, node);
        else
            return 0;
        if (rc)
            return rc;
    }
}

static int parse_filter_expr(parser *p, tnode **node)
{
    int rc;
    for (;;) {
        const ttok *k = cur(p);
        if (is_op(k, OP_PIPE))
            rc = parse_filter(p, node, 0);
        else if (is_name(p, k, "is"))
            rc = parse_test(p, node);
        else if (is_op(k, OP_LPAREN))
            rc = parse_call(p, node);
        else
            return 0;
        if (rc)
            return rc;
    }
}

static int parse_list_or_dict(parser *p, int dict, tnode **out)
{
    int rc;
    const ttok *open = cur(p);
    int close = dict ? OP_RBRACE : OP_RBRACKET;
    adv(p);
    nlist keys = { 0 }, vals = { 0 };
    while (!is_op(cur(p), close)) {
        if (keys.n) {
            if ((rc = expect_op(p, OP_COMMA, "','")))
                goto fail;
            if (is_op(cur(p), close))
                break;
        }
        tnode *k = NULL, *v = NULL;
        if ((rc = parse_expression(p, 1, &k)) || (rc = nl_push(p, &keys, k)))
            goto fail;
        if (dict) {
            if ((rc = expect_op(p, OP_COLON, "':'")) || (rc = parse_expression(p, 1, &v)) ||
                (rc = nl_push(p, &vals, v)))
                goto fail;
        }
    }
    if ((rc = expect_op(p, close, dict ? "'}'" : "']'")))
        goto fail;
    tnode *n = NULL;
    if ((rc = new_node(p, dict ? TN_DICT : TN_LIST, open->off, &n)))
        goto fail;
    if ((rc = nl_done(p, &keys, &n->list, &n->n)) || (rc = nl_done(p, &vals, &n->list2, &n->n2)))
        return rc;
    *out = n;
    return 0;
fail:
    free(keys.v);
    free(vals.v);
    return rc;
}

static int parse_primary(parser *p, tnode **out)
{
    int rc;
    const ttok *k = cur(p);
    tnode *n = NULL;
    switch (k->type) {
    case TK_NAME: {
        static const char *const consts[] = { "true", "false", "True", "False", "none", "None" };
        for (int i = 0; i < 6; i++)
            if (is_name(p, k, consts[i])) {
                if ((rc = new_node(p, TN_CONST, k->off, &n)))
                    return rc;
                n->k = i < 4 ? tv_bool(i % 2 == 0) : tv_none();
                adv(p);
                *out = n;
                return 0;
            }
        if ((rc = new_node(p, TN_NAME, k->off, &n)) || (rc = name_str(p, k, &n->k)))
            return rc;
        if (tmpl_atom(p->t, p->t->src + k->off, k->len, &n->id))
            return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        if (n->id < ATOM_N_RESERVED)
            p->uses[n->id]++;
        n->fn = (uint16_t)tg_global_id(tv_s(&n->k)->s);
        adv(p);
        *out = n;
        return 0;
    }
    case TK_STRING: {
        if ((rc = new_node(p, TN_CONST, k->off, &n)))
            return rc;
        if (peek(p)->type != TK_STRING) {
            n->k.t = TV_STR;
            n->k.u.o = &k->v.s->h;
            adv(p);
        } else {   /* adjacent literals join */
            tbuf b = { 0 };
            while (cur(p)->type == TK_STRING) {
                tstr *s = cur(p)->v.s;
                if (tb_put(NULL, &b, s->s, s->len)) {
                    tb_free(NULL, &b);
                    return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
                }
                adv(p);
            }
            rc = ts_new_immortal(p->t, b.p ? b.p : "", b.n, &n->k);
            tb_free(NULL, &b);
            if (rc)
                return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        }
        *out = n;
        return 0;
    }
    case TK_INT:
    case TK_FLOAT:
        if ((rc = new_node(p, TN_CONST, k->off, &n)))
            return rc;
        n->k = k->type == TK_INT ? tv_int(k->v.i) : tv_float(k->v.f);
        adv(p);
        *out = n;
        return 0;
    case TK_OP:
        if (k->op == OP_LPAREN) {
            adv(p);
            if ((rc = parse_tuple(p, 0, 1, NULL, 1, out)))
                return rc;
            return expect_op(p, OP_RPAREN, "')'");
        }
        if (k->op == OP_LBRACKET || k->op == OP_LBRACE)
            return parse_list_or_dict(p, k->op == OP_LBRACE, out);
        break;
    default:
        break;
    }
    char b[64];
    if (k->type == TK_EOF)
        return fail(p, k, EM_EFORMAT, "unexpected end of template");
    return fail(p, k, EM_EFORMAT, "unexpected %s", describe(p, k, b, sizeof b));
}

static int parse_unary(parser *p, int with_filter, tnode **out)
{
    int rc;
    if ((rc = deeper(p)))
        return rc;
    const ttok *k = cur(p);
    tnode *n = NULL;
    if (is_op(k, OP_SUB) || is_op(k, OP_ADD)) {
        adv(p);
        if ((rc = new_node(p, TN_UNARY, k->off, &n)) || (rc = parse_unary(p, 0, &n->a)))
            goto done;
        n->op = k->op == OP_SUB ? OP_NEG : OP_POS;
    } else if ((rc = parse_primary(p, &n))) {
        goto done;
    }
    if ((rc = parse_postfix(p, &n)))
        goto done;
    if (with_filter && (rc = parse_filter_expr(p, &n)))
        goto done;
    *out = n;
done:
    p->depth--;
    return rc;
}

static int binop(parser *p, int op, uint32_t off, tnode *a, tnode *b, tnode **out)
{
    int rc;
    tnode *n = NULL;
    if ((rc = new_node(p, TN_BIN, off, &n)))
        return rc;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    *out = n;
    return 0;
}

static int parse_pow(parser *p, tnode **out)
{
    int rc;
    tnode *l = NULL, *r = NULL;
    if ((rc = parse_unary(p, 1, &l)))
        return rc;
    while (is_op(cur(p), OP_POW)) {
        uint32_t off = cur(p)->off;
        adv(p);
        if ((rc = parse_unary(p, 1, &r)) || (rc = binop(p, OP_POW, off, l, r, &l)))
            return rc;
    }
    *out = l;
    return 0;
}

static int parse_math2(parser *p, tnode **out)
{
    int rc;
    tnode *l = NULL, *r = NULL;
    if ((rc = parse_pow(p, &l)))
        return rc;
    for (;;) {
        const ttok *k = cur(p);
        if (!(is_op(k, OP_MUL) || is_op(k, OP_DIV) || is_op(k, OP_FLOORDIV) || is_op(k, OP_MOD)))
            break;
        adv(p);
        if ((rc = parse_pow(p, &r)) || (rc = binop(p, k->op, k->off, l, r, &l)))
            return rc;
    }
    *out = l;
    return 0;
}

static int parse_concat(parser *p, tnode **out)
{
    int rc;
    tnode *first = NULL;
    if ((rc = parse_math2(p, &first)))
        return rc;
    if (!is_op(cur(p), OP_TILDE)) {
        *out = first;
        return 0;
    }
    nlist items = { 0 };
    uint32_t off = cur(p)->off;
    if ((rc = nl_push(p, &items, first)))
        return rc;
    while (is_op(cur(p), OP_TILDE)) {
        adv(p);
        tnode *e = NULL;
        if ((rc = parse_math2(p, &e)) || (rc = nl_push(p, &items, e))) {
            free(items.v);
            return rc;
        }
    }
    tnode *n = NULL;
    if ((rc = new_node(p, TN_CONCAT, off, &n))) {
        free(items.v);
        return rc;
    }
    if ((rc = nl_done(p, &items, &n->list, &n->n)))
        return rc;
    *out = n;
    return 0;
}

static int parse_math1(parser *p, tnode **out)
{
    int rc;
    tnode *l = NULL, *r = NULL;
    if ((rc = parse_concat(p, &l)))
        return rc;
    for (;;) {
        const ttok *k = cur(p);
        if (!(is_op(k, OP_ADD) || is_op(k, OP_SUB)))
            break;
        adv(p);
        if ((rc = parse_concat(p, &r)) || (rc = binop(p, k->op, k->off, l, r, &l)))
            return rc;
    }
    *out = l;
    return 0;
}

static int parse_compare(parser *p, tnode **out)
{
    int rc;
    tnode *first = NULL;
    if ((rc = parse_math1(p, &first)))
        return rc;
    nlist opnd = { 0 };
    uint8_t *ops = NULL;
    size_t ops_cap = 0;
    uint32_t off = cur(p)->off;
    for (;;) {
        const ttok *k = cur(p);
        int op = 0;
        if (k->type == TK_OP && (k->op == OP_EQ || k->op == OP_NE || k->op == OP_LT ||
                                 k->op == OP_LTEQ || k->op == OP_GT || k->op == OP_GTEQ)) {
            op = k->op;
            adv(p);
        } else if (is_name(p, k, "in")) {
            op = OP_IN;
            adv(p);
        } else if (is_name(p, k, "not") && is_name(p, peek(p), "in")) {
            op = OP_NOTIN;
            adv(p);
            adv(p);
        } else {
            break;
        }
        tnode *e = NULL;
        if (em_grow((void **)&ops, &ops_cap, opnd.n, 1, 4)) {
            rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
            goto fail;
        }
        ops[opnd.n] = (uint8_t)op;
        if ((rc = parse_math1(p, &e)) || (rc = nl_push(p, &opnd, e)))
            goto fail;
    }
    if (!opnd.n) {
        *out = first;
        return 0;
    }
    tnode *n = NULL;
    if ((rc = new_node(p, TN_COMPARE, off, &n)))
        goto fail;
    n->a = first;
    n->ops = tmpl_arena_alloc(p->t, opnd.n);
    if (!n->ops) {
        rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        goto fail;
    }
    memcpy(n->ops, ops, opnd.n);
    free(ops);
    if ((rc = nl_done(p, &opnd, &n->list, &n->n)))
        return rc;
    *out = n;
    return 0;
fail:
    free(ops);
    free(opnd.v);
    return rc;
}

static int parse_not(parser *p, tnode **out)
{
    int rc;
    const ttok *k = cur(p);
    if (!is_name(p, k, "not"))
        return parse_compare(p, out);
    adv(p);
    if ((rc = deeper(p)))
        return rc;
    tnode *n = NULL;
    if (!(rc = new_node(p, TN_UNARY, k->off, &n)) && !(rc = parse_not(p, &n->a))) {
        n->op = OP_NOT;
        *out = n;
    }
    p->depth--;
    return rc;
}

/* or: and ('or' and)*; and: not ('and' not)* */
static int parse_logic(parser *p, int is_and, tnode **out)
{
    int rc;
    tnode *l = NULL, *r = NULL;
    if ((rc = is_and ? parse_not(p, &l) : parse_logic(p, 1, &l)))
        return rc;
    while (is_name(p, cur(p), is_and ? "and" : "or")) {
        uint32_t off = cur(p)->off;
        adv(p);
        if ((rc = is_and ? parse_not(p, &r) : parse_logic(p, 1, &r)) ||
            (rc = binop(p, is_and ? OP_AND : OP_OR, off, l, r, &l)))
            return rc;
    }
    *out = l;
    return 0;
}

/* A conditional expression is a soft frame as a whole, its first operand
 * included: an unknown name met in that operand out of a soft frame waits
 * in p->pending until the operand ends. 'if' next: it was soft, dropped.
 * Else an error, unless this operand lies within an enclosing one that is
 * still waiting: then it waits on that one's 'if'. */
static int parse_condexpr(parser *p, tnode **out)
{
    int rc;
    tnode *e1 = NULL;
    const tnode *outer = p->pending;
    int deferring = !p->soft;
    if (deferring) {
        p->pending = NULL;
        p->defer++;
    }
    rc = parse_logic(p, 0, &e1);
    if (deferring) {
        const tnode *mine = is_name(p, cur(p), "if") ? NULL : p->pending;
        p->defer--;
        p->pending = outer ? outer : p->defer ? mine : NULL;
        if (!rc && mine && !p->defer)
            rc = unknown_named(p, mine);
    }
    if (rc)
        return rc;
    int soft = p->soft;
    p->soft = 1;
    while (is_name(p, cur(p), "if")) {
        uint32_t off = cur(p)->off;
        adv(p);
        tnode *n = NULL;
        if ((rc = new_node(p, TN_COND, off, &n)) || (rc = parse_logic(p, 0, &n->a)))
            break;
        n->b = e1;
        if (is_name(p, cur(p), "else")) {
            adv(p);
            if ((rc = deeper(p)))
                break;
            rc = parse_condexpr(p, &n->c);
            p->depth--;
            if (rc)
                break;
        }
        e1 = n;
    }
    p->soft = soft;
    if (!rc)
        *out = e1;
    return rc;
}

static int parse_expression(parser *p, int with_condexpr, tnode **out)
{
    int rc;
    if ((rc = deeper(p)))
        return rc;
    rc = with_condexpr ? parse_condexpr(p, out) : parse_logic(p, 0, out);
    p->depth--;
    return rc;
}

static int tuple_end(parser *p, const char *extra_end)
{
    const ttok *k = cur(p);
    if (k->type == TK_VAR_END || k->type == TK_BLOCK_END || is_op(k, OP_RPAREN))
        return 1;
    return extra_end && is_name(p, k, extra_end);
}

static int parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end,
                       int explicit_paren, tnode **out)
{
    int rc;
    nlist items = { 0 };
    int is_tuple = 0;
    uint32_t off = cur(p)->off;
    for (;;) {
        if (items.n && (rc = expect_op(p, OP_COMMA, "','")))
            goto fail;
        if (tuple_end(p, extra_end))
            break;
        tnode *e = NULL;
        if (simplified) {
            if ((rc = deeper(p)))
                goto fail;
            rc = parse_primary(p, &e);
            p->depth--;
        } else {
            rc = parse_expression(p, with_condexpr, &e);
        }
        if (rc || (rc = nl_push(p, &items, e)))
            goto fail;
        if (is_op(cur(p), OP_COMMA))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n) {
            *out = items.v[0];
            free(items.v);
            return 0;
        }
        if (!explicit_paren) {
            char b[64];
            rc = fail(p, cur(p), EM_EFORMAT, "expected an expression, got %s",
                      describe(p, cur(p), b, sizeof b));
            goto fail;
        }
    }
    tnode *n = NULL;
    if ((rc = new_node(p, TN_TUPLE, off, &n)))
        goto fail;
    if ((rc = nl_done(p, &items, &n->list, &n->n)))
        return rc;
    *out = n;
    return 0;
fail:
    free(items.v);
    return rc;
}

/* Assignment targets: a name, a tuple of targets, or (with_ns) ns.attr. */
static int check_target(parser *p, const tnode *n)
{
    if (n->kind == TN_NAME || n->kind == TN_NSREF)
        return 0;
    if (n->kind == TN_TUPLE) {
        for (uint32_t i = 0; i < n->n; i++)
            if (check_target(p, n->list[i]))
                return EM_EFORMAT;
        return 0;
    }
    return tmpl_fail_at(p->t, p->err, EM_EFORMAT, n->off, "can't assign to this expression");
}

static int parse_assign_target(parser *p, int with_tuple, int name_only, const char *extra_end,
                               int with_ns, tnode **out)
{
    int rc;
    const ttok *k = cur(p);
    tnode *n = NULL;
    if (with_ns && k->type == TK_NAME && is_op(peek(p), OP_DOT)) {
        adv(p);
        adv(p);
        const ttok *attr = cur(p);
        if (attr->type != TK_NAME)
            return unexpected(p, "a name");
        if ((rc = new_node(p, TN_NSREF, k->off, &n)) || (rc = name_str(p, attr, &n->k)))
            return rc;
        if (tmpl_atom(p->t, p->t->src + k->off, k->len, &n->id))
            return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        adv(p);
        *out = n;
        return 0;
    }
    if (name_only) {
        if (k->type != TK_NAME)
            return unexpected(p, "a name");
        if ((rc = new_node(p, TN_NAME, k->off, &n)) || (rc = name_str(p, k, &n->k)))
            return rc;
        if (tmpl_atom(p->t, p->t->src + k->off, k->len, &n->id))
            return em_err_set(p->err, EM_ENOMEM, "template: out of memory");
        adv(p);
        *out = n;
        return 0;
    }
    if (with_tuple) {
        if ((rc = parse_tuple(p, 1, 1, extra_end, 0, &n)))
            return rc;
    } else {
        if ((rc = deeper(p)))
            return rc;
        rc = parse_primary(p, &n);
        p->depth--;
        if (rc)
            return rc;
    }
    if ((rc = check_target(p, n)))
        return rc;
    *out = n;
    return 0;
}

/* {% ... %} body up to one of the end tags; *which gets the index of the
 * end tag found (cur() is left on it). */
static int parse_statements(parser *p, const char *const *end, int drop, int *which,
                            tnode ***body, uint32_t *n_body)
{
    int rc;
    if (is_op(cur(p), OP_COLON))
        adv(p);
    if ((rc = expect_type(p, TK_BLOCK_END, "end of statement block")))
        return rc;
    if ((rc = subparse(p, end, body, n_body)))
        return rc;
    for (int i = 0; end[i]; i++)
        if (is_name(p, cur(p), end[i])) {
            if (which)
                *which = i;
            break;
        }
    if (drop)
        adv(p);
    return 0;
}

static int parse_signature(parser *p, tnode *n)
{
    int rc;
    nlist defs = { 0 };
    uint32_t *ids = NULL;
    const char **names = NULL;
    size_t cap_i = 0, cap_n = 0, np = 0;
    int have_default = 0;
    if ((rc = expect_op(p, OP_LPAREN, "'('")))
        return rc;
    while (!is_op(cur(p), OP_RPAREN)) {
        if (np && (rc = expect_op(p, OP_COMMA, "','")))
            goto fail;
        tnode *arg = NULL, *def = NULL;
        if ((rc = parse_assign_target(p, 0, 1, NULL, 0, &arg)))
            goto fail;
        if (is_op(cur(p), OP_ASSIGN)) {
            adv(p);
            if ((rc = parse_expression(p, 1, &def)))
                goto fail;
            have_default = 1;
        } else if (have_default) {
            rc = tmpl_fail_at(p->t, p->err, EM_EFORMAT, arg->off,
                              "non-default argument follows default argument");
            goto fail;
        }
        if (em_grow((void **)&ids, &cap_i, np, sizeof *ids, 4) ||
            em_grow((void **)&names, &cap_n, np, sizeof *names, 4)) {
            rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
            goto fail;
        }
        ids[np] = arg->id;
        names[np] = tv_s(&arg->k)->s;
        np++;
        if ((rc = nl_push(p, &defs, def)))
            goto fail;
    }
    adv(p);
    n->np = (uint32_t)np;
    if (np) {
        n->pid = tmpl_arena_alloc(p->t, np * sizeof *ids);
        n->pname = tmpl_arena_alloc(p->t, np * sizeof *names);
        if (!n->pid || !n->pname) {
            rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
            goto fail;
        }
        memcpy(n->pid, ids, np * sizeof *ids);
        memcpy(n->pname, names, np * sizeof *names);
    }
    free(ids);
    free(names);
    uint32_t nd;
    return nl_done(p, &defs, &n->pdef, &nd);
fail:
    free(ids);
    free(names);
    free(defs.v);
    return rc;
}

/* A body that runs as a function (macro, caller, generation): loop
 * controls do not reach out of it, nor a soft frame into it; record which
 * special names it uses. */
static int function_body(parser *p, tnode *n, const char *endtag)
{
    const char *const end[2] = { endtag, NULL };
    uint32_t saved_loop = p->loop_depth, before[ATOM_N_RESERVED];
    int soft = p->soft;
    memcpy(before, p->uses, sizeof before);
    p->loop_depth = 0;
    p->soft = 0;
    int rc = parse_statements(p, end, 1, NULL, &n->list, &n->n);
    p->loop_depth = saved_loop;
    p->soft = soft;
    if (p->uses[ATOM_CALLER] != before[ATOM_CALLER])
        n->op |= TNF_CALLER;
    if (p->uses[ATOM_VARARGS] != before[ATOM_VARARGS])
        n->op |= TNF_VARARGS;
    if (p->uses[ATOM_KWARGS] != before[ATOM_KWARGS])
        n->op |= TNF_KWARGS;
    return rc;
}

/* Which parts are soft frames follows Jinja's compiler: an if statement's
 * are (Frame.soft()); the bodies of for, macro, call, filter, set and with
 * blocks, a for loop's filter, macro and caller defaults and a filter
 * block's filters are not (Frame.inner()); the other expressions of a
 * statement are as soft as the statement. */
static int parse_statement(parser *p, tnode **out)
{
    int rc;
    int soft = p->soft;
    const ttok *k = cur(p);
    if (k->type != TK_NAME)
        return fail(p, k, EM_EFORMAT, "tag name expected");
    if ((rc = deeper(p)))
        return rc;
    tnode *n = NULL;
    if (is_name(p, k, "for")) {
        static const char *const end1[] = { "endfor", "else", NULL };
        static const char *const end2[] = { "endfor", NULL };
        adv(p);
        if ((rc = new_node(p, TN_FOR, k->off, &n)) ||
            (rc = parse_assign_target(p, 1, 0, "in", 0, &n->a)))
            goto done;
        if (!is_name(p, cur(p), "in")) {
            rc = unexpected(p, "'in'");
            goto done;
        }
        adv(p);
        if ((rc = parse_tuple(p, 0, 0, "recursive", 0, &n->b)))
            goto done;
        p->soft = 0;
        if (is_name(p, cur(p), "if")) {
            adv(p);
            if ((rc = parse_expression(p, 1, &n->c)))
                goto done;
        }
        if (is_name(p, cur(p), "recursive")) {
            adv(p);
            n->op |= TNF_RECURSIVE;
        }
        int which = 0;
        p->loop_depth++;
        rc = parse_statements(p, end1, 0, &which, &n->list, &n->n);
        p->loop_depth--;
        if (rc)
            goto done;
        adv(p);
        if (which == 1 && (rc = parse_statements(p, end2, 1, NULL, &n->list2, &n->n2)))
            goto done;
    } else if (is_name(p, k, "if")) {
        static const char *const end1[] = { "elif", "else", "endif", NULL };
        static const char *const end2[] = { "endif", NULL };
        adv(p);
        p->soft = 1;
        tnode *top = NULL, *last = NULL;
        for (;;) {
            tnode *c = NULL;
            int which = 2;
            if ((rc = new_node(p, TN_IF, cur(p)->off, &c)) || (rc = parse_tuple(p, 0, 0, NULL, 0, &c->a)) ||
                (rc = parse_statements(p, end1, 0, &which, &c->list, &c->n)))
                goto done;
            if (!top) {
                top = c;
            } else {   /* elif: an if alone in the else branch */
                last->list2 = tmpl_arena_alloc(p->t, sizeof *last->list2);
                if (!last->list2) {
                    rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
                    goto done;
                }
                last->list2[0] = c;
                last->n2 = 1;
            }
            last = c;
            adv(p);
            if (which == 0)
                continue;
            if (which == 1 && (rc = parse_statements(p, end2, 1, NULL, &c->list2, &c->n2)))
                goto done;
            break;
        }
        n = top;
    } else if (is_name(p, k, "set")) {
        static const char *const end[] = { "endset", NULL };
        adv(p);
        tnode *target = NULL;
        if ((rc = parse_assign_target(p, 1, 0, NULL, 1, &target)))
            goto done;
        if (is_op(cur(p), OP_ASSIGN)) {
            adv(p);
            if ((rc = new_node(p, TN_SET, k->off, &n)) || (rc = parse_tuple(p, 0, 1, NULL, 0, &n->b)))
                goto done;
            n->a = target;
        } else {
            if ((rc = new_node(p, TN_SETBLOCK, k->off, &n)))
                goto done;
            n->a = target;
            p->soft = 0;
            if ((rc = parse_filter(p, &n->b, 0)) ||
                (rc = parse_statements(p, end, 1, NULL, &n->list, &n->n)))
                goto done;
        }
    } else if (is_name(p, k, "macro")) {
        adv(p);
        tnode *name = NULL;
        if ((rc = new_node(p, TN_MACRO, k->off, &n)) ||
            (rc = parse_assign_target(p, 0, 1, NULL, 0, &name)))
            goto done;
        n->id = name->id;
        n->k = name->k;
        p->soft = 0;
        if ((rc = parse_signature(p, n)) || (rc = function_body(p, n, "endmacro")))
            goto done;
    } else if (is_name(p, k, "call")) {
        adv(p);
        if ((rc = new_node(p, TN_CALLBLOCK, k->off, &n)))
            goto done;
        p->soft = 0;
        if (is_op(cur(p), OP_LPAREN) && (rc = parse_signature(p, n)))
            goto done;
        p->soft = soft;
        if ((rc = parse_expression(p, 1, &n->a)))
            goto done;
        if (n->a->kind != TN_CALL) {
            rc = tmpl_fail_at(p->t, p->err, EM_EFORMAT, n->a->off, "expected call");
            goto done;
        }
        if ((rc = function_body(p, n, "endcall")))
            goto done;
    } else if (is_name(p, k, "filter")) {
        static const char *const end[] = { "endfilter", NULL };
        adv(p);
        p->soft = 0;
        if ((rc = new_node(p, TN_FILTERBLOCK, k->off, &n)) || (rc = parse_filter(p, &n->b, 1)) ||
            (rc = parse_statements(p, end, 1, NULL, &n->list, &n->n)))
            goto done;
    } else if (is_name(p, k, "with")) {
        static const char *const end[] = { "endwith", NULL };
        adv(p);
        nlist pairs = { 0 };
        if ((rc = new_node(p, TN_WITH, k->off, &n)))
            goto done;
        while (cur(p)->type != TK_BLOCK_END) {
            tnode *tg = NULL, *val = NULL;
            if ((pairs.n && (rc = expect_op(p, OP_COMMA, "','"))) ||
                (rc = parse_assign_target(p, 1, 0, NULL, 0, &tg)) ||
                (rc = expect_op(p, OP_ASSIGN, "'='")) || (rc = parse_expression(p, 1, &val)) ||
                (rc = nl_push(p, &pairs, tg)) || (rc = nl_push(p, &pairs, val))) {
                free(pairs.v);
                goto done;
            }
        }
        p->soft = 0;
        if ((rc = nl_done(p, &pairs, &n->list2, &n->n2)) ||
            (rc = parse_statements(p, end, 1, NULL, &n->list, &n->n)))
            goto done;
    } else if (is_name(p, k, "generation")) {
        adv(p);
        if ((rc = new_node(p, TN_SCOPE, k->off, &n)) || (rc = function_body(p, n, "endgeneration")))
            goto done;
    } else if (is_name(p, k, "break") || is_name(p, k, "continue")) {
        int brk = is_name(p, k, "break");
        if (!p->loop_depth) {
            rc = fail(p, k, EM_EFORMAT, "'%s' outside of a loop", brk ? "break" : "continue");
            goto done;
        }
        adv(p);
        rc = new_node(p, brk ? TN_BREAK : TN_CONTINUE, k->off, &n);
    } else if (is_name(p, k, "print")) {   /* {% print a, b %}: each printed */
        nlist items = { 0 };
        adv(p);
        if ((rc = new_node(p, TN_PRINT, k->off, &n)))
            goto done;
        while (cur(p)->type != TK_BLOCK_END) {
            tnode *e = NULL;
            if ((items.n && (rc = expect_op(p, OP_COMMA, "','"))) || (rc = parse_expression(p, 1, &e)) ||
                (rc = nl_push(p, &items, e))) {
                free(items.v);
                goto done;
            }
        }
        if ((rc = nl_done(p, &items, &n->list, &n->n)))
            goto done;
    } else {
        static const char *const unsupported[] = { "block", "extends", "include", "import", "from",
                                                   "autoescape", NULL };
        char b[64];
        snprintf(b, sizeof b, "%.*s", (int)(k->len > 40 ? 40 : k->len), p->t->src + k->off);
        for (int i = 0; unsupported[i]; i++)
            if (!strcmp(b, unsupported[i])) {
                rc = fail(p, k, EM_EFORMAT, "tag '%s' is not supported by ember", b);
                goto done;
            }
        rc = fail(p, k, EM_EFORMAT, "unknown tag '%s'", b);
    }
done:
    p->depth--;
    p->soft = soft;
    if (!rc)
        *out = n;
    return rc;
}

static int subparse(parser *p, const char *const *end, tnode ***body, uint32_t *n_body)
{
    int rc;
    nlist items = { 0 };
    for (;;) {
        const ttok *k = cur(p);
        tnode *n = NULL;
        if (k->type == TK_DATA) {
            if ((rc = new_node(p, TN_DATA, k->off, &n)))
                goto fail;
            if (ts_new_immortal(p->t, p->t->src + k->off, k->len, &n->k)) {
                rc = em_err_set(p->err, EM_ENOMEM, "template: out of memory");
                goto fail;
            }
            adv(p);
        } else if (k->type == TK_VAR_BEGIN) {
            adv(p);
            if ((rc = new_node(p, TN_PRINT, k->off, &n)) || (rc = parse_tuple(p, 0, 1, NULL, 0, &n->a)) ||
                (rc = expect_type(p, TK_VAR_END, "end of print statement")))
                goto fail;
        } else if (k->type == TK_BLOCK_BEGIN) {
            adv(p);
            if (end)
                for (int i = 0; end[i]; i++)
                    if (is_name(p, cur(p), end[i]))
                        return nl_done(p, &items, body, n_body);
            if ((rc = parse_statement(p, &n)) ||
                (rc = expect_type(p, TK_BLOCK_END, "end of statement block")))
                goto fail;
        } else if (k->type == TK_EOF) {
            if (end) {
                char want[160];
                size_t o = 0;
                for (int i = 0; end[i] && o < sizeof want - 40; i++)
                    o += (size_t)snprintf(want + o, sizeof want - o, "%s'%s'", i ? " or " : "", end[i]);
                rc = fail(p, k, EM_EFORMAT, "unexpected end of template, expected %s", want);
                goto fail;
            }
            return nl_done(p, &items, body, n_body);
        } else {
            char b[64];
            rc = fail(p, k, EM_EFORMAT, "unexpected %s", describe(p, k, b, sizeof b));
            goto fail;
        }
        if ((rc = nl_push(p, &items, n)))
            goto fail;
    }
fail:
    free(items.v);
    return rc;
}

int tmpl_parse_tokens(em_tmpl *t, const ttok *toks, size_t n_toks, em_err *err)
{
    parser p = { .t = t, .tk = toks, .n = n_toks, .err = err };
    static const char *const reserved[ATOM_N_RESERVED] = { "loop", "caller", "varargs", "kwargs" };
    for (uint32_t i = 0; i < ATOM_N_RESERVED; i++) {
        uint32_t id;
        if (tmpl_atom(t, reserved[i], strlen(reserved[i]), &id))
            return em_err_set(err, EM_ENOMEM, "template: out of memory");
    }
    return subparse(&p, NULL, &t->body, &t->n_body);
}
