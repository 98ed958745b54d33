/* chat_tmpl_value.c — the chat-template value model: reference-counted
 * strings, lists, dicts and namespaces charged to a render's memory budget;
 * Python's str(), repr() and json.dumps() of them (float repr included);
 * Python truthiness, equality, ordering and hashing; dicts that keep
 * insertion order; conversion from jansson. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/tmpl/chat_tmpl_int.h"

const char *tv_type_name(const tval *v)
{
    switch (v->t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return v->fl & TVF_SAFE ? "Markup" : "str";
    case TV_LIST:
        if (v->fl & TVF_TUPLE) return "tuple";
        if (v->fl & TVF_ITEMS) return "dict_items";
        if (v->fl & TVF_KEYS) return "dict_keys";
        if (v->fl & TVF_VALUES) return "dict_values";
        return "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_FUNC: return "function";
    case TV_METHOD: return "builtin_function_or_method";
    case TV_LOOP: return "LoopContext";
    default: return "object";
    }
}

/* ------------------------------------------------------------ budget */

int tm_charge(tctx *c, size_t bytes)
{
    if (!c)
        return 0;
    if (bytes > TL_MEMORY || c->mem > TL_MEMORY - bytes)
        return tc_fail(c, NULL, EM_ERANGE, "template uses more than %zu MiB of memory "
                       "(EM_TMPL_MAX_MEMORY)", (size_t)TL_MEMORY >> 20);
    c->mem += bytes;
    return 0;
}

void tm_uncharge(tctx *c, size_t bytes)
{
    if (c)
        c->mem -= bytes <= c->mem ? bytes : c->mem;
}

void *tm_alloc(tctx *c, size_t bytes)
{
    if (tm_charge(c, bytes))
        return NULL;
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        tm_uncharge(c, bytes);
        if (c)
            tc_fail(c, NULL, EM_ENOMEM, "out of memory");
    }
    return p;
}

int tc_steps(tctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps > TL_STEPS)
        return tc_fail(c, NULL, EM_ERANGE, "template takes more than %llu steps (EM_TMPL_MAX_STEPS)",
                       (unsigned long long)TL_STEPS);
    return 0;
}

/* ------------------------------------------------------- ref counting */

static void scope_drop(tctx *c, tscope *s);

static void obj_free(tctx *c, const tval *v)
{
    tobj *o = v->u.o;
    size_t bytes = o->bytes;
    switch (v->t) {
    case TV_LIST: {
        tlist *l = (tlist *)o;
        for (size_t i = 0; i < l->n; i++)
            tv_drop_raw(c, l->v[i]);
        free(l->v);
        bytes += l->arr_bytes;
        break;
    }
    case TV_DICT:
    case TV_NS: {
        tdict *d = (tdict *)o;
        for (size_t i = 0; i < d->n; i++) {
            tv_drop_raw(c, d->k[i]);
            tv_drop_raw(c, d->v[i]);
        }
        free(d->k);
        free(d->v);
        free(d->hash);
        free(d->idx);
        bytes += d->arr_bytes;
        break;
    }
    case TV_MACRO:
        scope_drop(c, ((tmacro *)o)->closure);
        break;
    case TV_METHOD:
        tv_drop_raw(c, ((tmethod *)o)->self);
        break;
    case TV_LOOP: {
        tloop *lp = (tloop *)o;
        tv_drop_raw(c, lp->items);
        tv_drop_raw(c, lp->last_changed);
        scope_drop(c, lp->scope);
        break;
    }
    default:
        break;
    }
    tm_uncharge(c, bytes);
    free(o);
}

tval tv_ref(tval v)
{
    if (tv_is_obj(&v) && v.u.o->rc != TV_IMMORTAL)
        v.u.o->rc++;
    return v;
}

void tv_drop_raw(tctx *c, tval v)
{
    if (!tv_is_obj(&v) || v.u.o->rc == TV_IMMORTAL)
        return;
    if (--v.u.o->rc == 0)
        obj_free(c, &v);
}

void tv_drop(tctx *c, tval *v)
{
    tv_drop_raw(c, *v);
    *v = tv_undef();
}

/* Scopes are freed here because macros and loops hold them. */
void tscope_clear(tctx *c, tscope *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        tv_drop_raw(c, s->vals[i]);
    s->n = 0;
}

static void scope_drop(tctx *c, tscope *s)
{
    while (s && --s->rc == 0) {
        tscope *parent = s->parent;
        tscope_clear(c, s);
        free(s->names);
        free(s->vals);
        tm_uncharge(c, sizeof *s + (size_t)s->cap * (sizeof *s->names + sizeof *s->vals));
        free(s);
        s = parent;
    }
}

void tscope_drop(tctx *c, tscope *s)
{
    scope_drop(c, s);
}

/* ----------------------------------------------------------- strings */

static size_t count_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static int str_alloc(tctx *c, em_tmpl *owner, const char *s, size_t len, tval *out)
{
    if (len > TL_STRING)
        return c ? tc_fail(c, NULL, EM_ERANGE, "a string would pass %zu MiB (EM_TMPL_MAX_STRING)",
                           (size_t)TL_STRING >> 20)
                 : EM_ERANGE;
    size_t bytes = sizeof(tstr) + len + 1;
    tstr *o = owner ? malloc(bytes) : tm_alloc(c, bytes);
    if (!o)
        return c ? tc_code(c) : EM_ENOMEM;
    if (owner) {
        if (owner->n_consts == owner->cap_consts) {
            size_t nc = owner->cap_consts ? owner->cap_consts * 2 : 64;
            tobj **nv = realloc(owner->consts, nc * sizeof *nv);
            if (!nv) {
                free(o);
                return EM_ENOMEM;
            }
            owner->consts = nv;
            owner->cap_consts = nc;
        }
        owner->consts[owner->n_consts++] = &o->h;
        o->h.rc = TV_IMMORTAL;
        o->h.bytes = 0;
    } else {
        o->h.rc = 1;
        o->h.bytes = (uint32_t)bytes;
    }
    o->len = len;
    if (len)
        memcpy(o->s, s, len);
    o->s[len] = '\0';
    o->nchars = count_chars(o->s, len);
    out->t = TV_STR;
    out->fl = 0;
    out->u.o = &o->h;
    return 0;
}

int ts_new(tctx *c, const char *s, size_t len, tval *out)
{
    if (c && len > 64 && tc_steps(c, len / 64))
        return EM_ERANGE;
    return str_alloc(c, NULL, s, len, out);
}

int ts_new_immortal(em_tmpl *t, const char *s, size_t len, tval *out)
{
    return str_alloc(NULL, t, s, len, out);
}

int ts_cstr(tctx *c, const char *s, tval *out)
{
    return ts_new(c, s, strlen(s), out);
}

int ts_from_buf(tctx *c, tbuf *b, tval *out)
{
    int rc = ts_new(c, b->p ? b->p : "", b->n, out);
    tb_free(c, b);
    return rc;
}

size_t ts_offset(const tstr *s, size_t i)
{
    if (s->nchars == s->len)
        return i;
    size_t off = 0;
    while (i && off < s->len) {
        off++;
        while (off < s->len && ((unsigned char)s->s[off] & 0xC0) == 0x80)
            off++;
        i--;
    }
    return off;
}

/* ----------------------------------------------------------- buffers */

int tb_put(tctx *c, tbuf *b, const char *s, size_t n)
{
    if (n > TL_STRING || b->n > TL_STRING - n)
        return c ? tc_fail(c, NULL, EM_ERANGE, "output or a string would pass %zu MiB "
                           "(EM_TMPL_MAX_STRING)", (size_t)TL_STRING >> 20)
                 : EM_ERANGE;
    if (c && b == c->result && b->n + n > c->max_output)
        return tc_fail(c, NULL, EM_ERANGE, "the output would pass %zu bytes " EM_TMPL_OUTPUT_CAPPED,
                       c->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1)
            nc *= 2;
        if (tm_charge(c, nc - b->cap))
            return EM_ERANGE;
        char *np = realloc(b->p, nc);
        if (!np) {
            tm_uncharge(c, nc - b->cap);
            return c ? tc_fail(c, NULL, EM_ENOMEM, "out of memory") : EM_ENOMEM;
        }
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

int tb_putc(tctx *c, tbuf *b, char ch)
{
    return tb_put(c, b, &ch, 1);
}

int tb_printf(tctx *c, tbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return EM_EINVAL;
    return tb_put(c, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void tb_free(tctx *c, tbuf *b)
{
    tm_uncharge(c, b->cap);
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------ lists, dicts */

int tl_new(tctx *c, size_t cap, uint8_t fl, tval *out)
{
    tlist *l = tm_alloc(c, sizeof *l);
    if (!l)
        return c ? tc_code(c) : EM_ENOMEM;
    memset(l, 0, sizeof *l);
    l->h.rc = 1;
    l->h.bytes = sizeof *l;
    l->depth = 1;
    if (cap) {
        if (cap > TL_ITEMS)
            cap = TL_ITEMS;
        size_t bytes = cap * sizeof(tval);
        if (tm_charge(c, bytes)) {
            tm_uncharge(c, l->h.bytes);
            free(l);
            return c ? tc_code(c) : EM_ERANGE;
        }
        if (!(l->v = malloc(bytes))) {
            tm_uncharge(c, bytes + l->h.bytes);
            free(l);
            return c ? tc_fail(c, NULL, EM_ENOMEM, "out of memory") : EM_ENOMEM;
        }
        l->cap = cap;
        l->arr_bytes = bytes;
    }
    out->t = TV_LIST;
    out->fl = fl;
    out->u.o = &l->h;
    return 0;
}

static uint32_t val_depth(const tval *v)
{
    if (v->t == TV_LIST)
        return tv_l(v)->depth;
    if (v->t == TV_DICT)
        return tv_d(v)->depth;
    return 0;
}

static int depth_check(tctx *c, uint32_t d)
{
    if (d > TL_VALUE_DEPTH)
        return tc_fail(c, NULL, EM_ERANGE, "lists and dicts nested deeper than %d "
                       "(EM_TMPL_MAX_VALUE_DEPTH)", TL_VALUE_DEPTH);
    return 0;
}

int tl_push(tctx *c, tval *list, tval item)
{
    tlist *l = tv_l(list);
    int rc;
    uint32_t d = val_depth(&item) + 1;
    if ((rc = depth_check(c, d)))
        goto fail;
    if (l->n >= TL_ITEMS) {
        rc = tc_fail(c, NULL, EM_ERANGE, "a list would pass %d items (EM_TMPL_MAX_ITEMS)", TL_ITEMS);
        goto fail;
    }
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        if (nc > TL_ITEMS)
            nc = TL_ITEMS;
        size_t add = (nc - l->cap) * sizeof(tval);
        if ((rc = tm_charge(c, add)))
            goto fail;
        tval *nv = realloc(l->v, nc * sizeof(tval));
        if (!nv) {
            tm_uncharge(c, add);
            rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
            goto fail;
        }
        l->v = nv;
        l->cap = nc;
        l->arr_bytes += add;
    }
    if (d > l->depth)
        l->depth = d;
    l->v[l->n++] = item;
    return 0;
fail:
    tv_drop_raw(c, item);
    return rc;
}

int td_new(tctx *c, int ns, tval *out)
{
    tdict *d = tm_alloc(c, sizeof *d);
    if (!d)
        return c ? tc_code(c) : EM_ENOMEM;
    memset(d, 0, sizeof *d);
    d->h.rc = 1;
    d->h.bytes = sizeof *d;
    d->depth = 1;
    out->t = ns ? TV_NS : TV_DICT;
    out->fl = 0;
    out->u.o = &d->h;
    return 0;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

int tv_hash(tctx *c, const tval *v, uint64_t *h)
{
    switch (v->t) {
    case TV_UNDEF: *h = 0x5bd1e995; return 0;
    case TV_NONE: *h = 0x9e3779b97f4a7c15ULL; return 0;
    case TV_BOOL:
    case TV_INT: *h = mix64((uint64_t)v->u.i); return 0;
    case TV_FLOAT: {
        double f = v->u.f;
        if (f == floor(f) && f >= -9.2e18 && f <= 9.2e18) {
            *h = mix64((uint64_t)(int64_t)f);
        } else {
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            *h = mix64(isnan(f) ? 0x7ff8ULL : bits);
        }
        return 0;
    }
    case TV_STR: *h = XXH64(tv_s(v)->s, tv_s(v)->len, 0); return 0;
    case TV_LIST:
        if (v->fl & TVF_TUPLE) {
            uint64_t acc = 0x345678;
            tlist *l = tv_l(v);
            for (size_t i = 0; i < l->n; i++) {
                uint64_t e;
                int rc = tv_hash(c, &l->v[i], &e);
                if (rc)
                    return rc;
                acc = mix64(acc ^ e) + i;
            }
            *h = acc;
            return 0;
        }
        break;
    case TV_DICT:
        break;
    case TV_FUNC: *h = mix64((uint64_t)v->u.i + 77); return 0;
    default: *h = mix64((uint64_t)(uintptr_t)v->u.o); return 0;
    }
    return tc_fail(c, NULL, EM_EINVAL, "unhashable type: '%s'", tv_type_name(v));
}

int tv_hashable(const tval *v)
{
    if (v->t == TV_DICT)
        return 0;
    if (v->t == TV_LIST) {
        if (!(v->fl & TVF_TUPLE))
            return 0;
        for (size_t i = 0; i < tv_l(v)->n; i++)
            if (!tv_hashable(&tv_l(v)->v[i]))
                return 0;
    }
    return 1;
}

static int idx_build(tctx *c, tdict *d, size_t cap)
{
    uint32_t *ix = calloc(cap, sizeof *ix);
    if (!ix)
        return tc_fail(c, NULL, EM_ENOMEM, "out of memory");
    for (size_t i = 0; i < d->n; i++) {
        size_t s = (size_t)d->hash[i] & (cap - 1);
        while (ix[s])
            s = (s + 1) & (cap - 1);
        ix[s] = (uint32_t)(i + 1);
    }
    free(d->idx);
    d->idx = ix;
    d->idx_cap = cap;
    return 0;
}

/* The entries of d whose hash is h, in probe order: start with *pos = 0;
 * returns the next index, or -1 when there is none. */
static long td_candidate(const tdict *d, uint64_t h, size_t *pos)
{
    if (d->idx) {   /* *pos: the next slot + 1 */
        size_t m = d->idx_cap - 1;
        for (size_t k = *pos ? *pos - 1 : (size_t)h & m; d->idx[k]; k = (k + 1) & m) {
            size_t i = d->idx[k] - 1;
            if (d->hash[i] == h) {
                *pos = ((k + 1) & m) + 1;
                return (long)i;
            }
        }
        return -1;
    }
    for (size_t i = *pos; i < d->n; i++)
        if (d->hash[i] == h) {
            *pos = i + 1;
            return (long)i;
        }
    return -1;
}

static int td_find_h(tctx *c, const tdict *d, const tval *key, uint64_t h, long *at)
{
    size_t pos = 0;
    long i;
    *at = -1;
    while ((i = td_candidate(d, h, &pos)) >= 0) {
        int eq;
        int rc = tv_eq(c, &d->k[i], key, &eq);
        if (rc)
            return rc;
        if (eq) {
            *at = i;
            return 0;
        }
    }
    return 0;
}

int td_find(tctx *c, const tdict *d, const tval *key, long *at)
{
    uint64_t h;
    int rc = tv_hash(c, key, &h);
    if (rc)
        return rc;
    return td_find_h(c, d, key, h, at);
}

int td_get_str(const tdict *d, const char *key, size_t len, long *at)
{
    uint64_t h = XXH64(key, len, 0);
    size_t pos = 0;
    long i;
    *at = -1;
    while ((i = td_candidate(d, h, &pos)) >= 0)
        if (d->k[i].t == TV_STR && tv_s(&d->k[i])->len == len && memcmp(tv_s(&d->k[i])->s, key, len) == 0) {
            *at = i;
            return 0;
        }
    return 0;
}

int td_set(tctx *c, tval *dict, tval key, tval val)
{
    tdict *d = tv_d(dict);
    int rc;
    uint64_t h;
    long at;
    if ((rc = tv_hash(c, &key, &h)) || (rc = td_find_h(c, d, &key, h, &at)))
        goto fail;
    if (at >= 0) {   /* Python keeps the first key and replaces the value */
        tv_drop_raw(c, key);
        tv_drop_raw(c, d->v[at]);
        d->v[at] = val;
        if (dict->t == TV_DICT && val_depth(&val) + 1 > d->depth)
            d->depth = val_depth(&val) + 1;
        return 0;
    }
    uint32_t dep = val_depth(&val) + 1;
    if (dict->t == TV_DICT && (rc = depth_check(c, dep)))
        goto fail;
    if (d->n >= TL_ITEMS) {
        rc = tc_fail(c, NULL, EM_ERANGE, "a dict would pass %d items (EM_TMPL_MAX_ITEMS)", TL_ITEMS);
        goto fail;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        size_t per = 2 * sizeof(tval) + sizeof(uint64_t);
        size_t add = (nc - d->cap) * per;
        if ((rc = tm_charge(c, add)))
            goto fail;
        tval *nk = realloc(d->k, nc * sizeof *nk);
        if (nk)
            d->k = nk;
        tval *nv = nk ? realloc(d->v, nc * sizeof *nv) : NULL;
        if (nv)
            d->v = nv;
        uint64_t *nh = nv ? realloc(d->hash, nc * sizeof *nh) : NULL;
        if (nh)
            d->hash = nh;
        if (!nh) {
            tm_uncharge(c, add);
            rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
            goto fail;
        }
        d->cap = nc;
        d->arr_bytes += add;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->hash[d->n] = h;
    d->n++;
    if (dict->t == TV_DICT && dep > d->depth)
        d->depth = dep;
    if (d->n > 8 && d->n * 2 > d->idx_cap) {
        size_t cap = 32;
        while (cap < d->n * 4)
            cap *= 2;
        if ((rc = idx_build(c, d, cap)))
            return rc;
    } else if (d->idx) {
        size_t s = (size_t)h & (d->idx_cap - 1);
        while (d->idx[s])
            s = (s + 1) & (d->idx_cap - 1);
        d->idx[s] = (uint32_t)d->n;
    }
    return 0;
fail:
    tv_drop_raw(c, key);
    tv_drop_raw(c, val);
    return rc;
}

/* ------------------------------------------------------ str and repr */

void tv_write_float(char *buf, size_t cap, double f)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1), decpt = exp10 + 1;
    size_t o = 0;
    char out[64];
    if (neg)
        out[o++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)nd - 1);
            o += (size_t)nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
    } else if (decpt >= nd) {
        memcpy(out + o, digits, (size_t)nd);
        o += (size_t)nd;
        for (int i = nd; i < decpt; i++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, digits, (size_t)decpt);
        o += (size_t)decpt;
        out[o++] = '.';
        memcpy(out + o, digits + decpt, (size_t)(nd - decpt));
        o += (size_t)(nd - decpt);
    }
    out[o] = '\0';
    snprintf(buf, cap, "%s", out);
}

static int deeper(tctx *c)
{
    if (c->depth >= TL_DEPTH)
        return tc_fail(c, NULL, EM_ERANGE, "nested deeper than %d (EM_TMPL_MAX_DEPTH)", TL_DEPTH);
    c->depth++;
    return 0;
}

static int write_str_repr(tctx *c, tbuf *b, const tstr *s)
{
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    int rc = tb_putc(c, b, q);
    size_t i = 0;
    while (!rc && i < s->len) {
        size_t run = i;   /* copy plain ASCII runs at once */
        while (run < s->len) {
            unsigned char ch = (unsigned char)s->s[run];
            if (ch < 0x20 || ch >= 0x7f || ch == '\\' || ch == (unsigned char)q)
                break;
            run++;
        }
        if (run > i) {
            rc = tb_put(c, b, s->s + i, run - i);
            i = run;
            continue;
        }
        size_t adv;
        uint32_t cp = tu_decode(s->s + i, s->len - i, &adv);
        char esc[16];
        if (cp == (uint32_t)q || cp == '\\')
            snprintf(esc, sizeof esc, "\\%c", (char)cp);
        else if (cp == '\t')
            snprintf(esc, sizeof esc, "\\t");
        else if (cp == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\r')
            snprintf(esc, sizeof esc, "\\r");
        else if (cp < 0x20 || cp == 0x7f)
            snprintf(esc, sizeof esc, "\\x%02x", cp);
        else if (cp < 0x7f || tu_is_printable(cp)) {
            rc = tb_put(c, b, s->s + i, adv);
            i += adv;
            continue;
        } else if (cp <= 0xff)
            snprintf(esc, sizeof esc, "\\x%02x", cp);
        else if (cp <= 0xffff)
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        else
            snprintf(esc, sizeof esc, "\\U%08x", cp);
        rc = tb_put(c, b, esc, strlen(esc));
        i += adv;
    }
    return rc ? rc : tb_putc(c, b, q);
}

static int write_value(tctx *c, tbuf *b, const tval *v, int repr);

static int write_items(tctx *c, tbuf *b, const tlist *l, int tuple)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < l->n; i++) {
        if (i)
            rc = tb_put(c, b, ", ", 2);
        if (!rc)
            rc = write_value(c, b, &l->v[i], 1);
    }
    if (!rc && tuple && l->n == 1)
        rc = tb_putc(c, b, ',');
    return rc;
}

static int write_dict(tctx *c, tbuf *b, const tdict *d)
{
    int rc = tb_putc(c, b, '{');
    for (size_t i = 0; !rc && i < d->n; i++) {
        if (i)
            rc = tb_put(c, b, ", ", 2);
        if (!rc)
            rc = write_value(c, b, &d->k[i], 1);
        if (!rc)
            rc = tb_put(c, b, ": ", 2);
        if (!rc)
            rc = write_value(c, b, &d->v[i], 1);
    }
    return rc ? rc : tb_putc(c, b, '}');
}

static int write_value(tctx *c, tbuf *b, const tval *v, int repr)
{
    char num[64];
    int rc;
    switch (v->t) {
    case TV_UNDEF: return repr ? tb_put(c, b, "Undefined", 9) : 0;
    case TV_NONE: return tb_put(c, b, "None", 4);
    case TV_BOOL: return v->u.i ? tb_put(c, b, "True", 4) : tb_put(c, b, "False", 5);
    case TV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        return tb_put(c, b, num, strlen(num));
    case TV_FLOAT:
        tv_write_float(num, sizeof num, v->u.f);
        return tb_put(c, b, num, strlen(num));
    case TV_STR:
        if (!repr)
            return tb_put(c, b, tv_s(v)->s, tv_s(v)->len);
        if (v->fl & TVF_SAFE) {
            if ((rc = tb_put(c, b, "Markup(", 7)) || (rc = write_str_repr(c, b, tv_s(v))))
                return rc;
            return tb_putc(c, b, ')');
        }
        return write_str_repr(c, b, tv_s(v));
    case TV_LIST: {
        if ((rc = deeper(c)))
            return rc;
        const char *open = "[", *close = "]";
        if (v->fl & TVF_TUPLE)
            open = "(", close = ")";
        else if (v->fl & TVF_ITEMS)
            open = "dict_items([", close = "])";
        else if (v->fl & TVF_KEYS)
            open = "dict_keys([", close = "])";
        else if (v->fl & TVF_VALUES)
            open = "dict_values([", close = "])";
        if (!(rc = tb_put(c, b, open, strlen(open))) &&
            !(rc = write_items(c, b, tv_l(v), (v->fl & TVF_TUPLE) != 0)))
            rc = tb_put(c, b, close, strlen(close));
        c->depth--;
        return rc;
    }
    case TV_DICT:
        if ((rc = deeper(c)))
            return rc;
        rc = write_dict(c, b, tv_d(v));
        c->depth--;
        return rc;
    case TV_NS:
        if ((rc = deeper(c)))
            return rc;
        if (!(rc = tb_put(c, b, "<Namespace ", 11)) && !(rc = write_dict(c, b, tv_d(v))))
            rc = tb_putc(c, b, '>');
        c->depth--;
        return rc;
    case TV_MACRO: {
        const tnode *def = ((tmacro *)v->u.o)->def;
        if (def->kind == TN_MACRO)
            return tb_printf(c, b, "<Macro '%s'>", tv_s(&def->k)->s);
        return tb_put(c, b, "<Macro 'caller'>", 16);
    }
    case TV_FUNC: return tb_printf(c, b, "<function %s>", tg_global_name((int)v->u.i));
    case TV_METHOD: {
        const tmethod *m = (const tmethod *)v->u.o;
        return tb_printf(c, b, "<built-in method %s of %s object>", tm_method_name(m->id),
                         tv_type_name(&m->self));
    }
    case TV_LOOP: {
        const tloop *lp = (const tloop *)v->u.o;
        return tb_printf(c, b, "<LoopContext %zu/%zu>", lp->index0 + 1, lp->length);
    }
    default:
        return 0;
    }
}

int tv_write_str(tctx *c, tbuf *b, const tval *v)
{
    return write_value(c, b, v, 0);
}

int tv_write_repr(tctx *c, tbuf *b, const tval *v)
{
    return write_value(c, b, v, 1);
}

int tv_to_str(tctx *c, const tval *v, tval *out)
{
    if (v->t == TV_STR) {
        *out = tv_ref(*v);
        return 0;
    }
    tbuf b = { 0 };
    int rc = tv_write_str(c, &b, v);
    if (rc) {
        tb_free(c, &b);
        return rc;
    }
    return ts_from_buf(c, &b, out);
}

/* -------------------------------------------------------------- json */

static int json_str(tctx *c, tbuf *b, const char *s, size_t n, int ascii)
{
    int rc = tb_putc(c, b, '"');
    size_t i = 0;
    while (!rc && i < n) {
        size_t run = i;
        while (run < n) {
            unsigned char ch = (unsigned char)s[run];
            if (ch < 0x20 || ch == '"' || ch == '\\' || (ascii && ch >= 0x7f))
                break;
            run++;
        }
        if (run > i) {
            rc = tb_put(c, b, s + i, run - i);
            i = run;
            continue;
        }
        size_t adv;
        uint32_t cp = tu_decode(s + i, n - i, &adv);
        char esc[16];
        switch (cp) {
        case '"': snprintf(esc, sizeof esc, "\\\""); break;
        case '\\': snprintf(esc, sizeof esc, "\\\\"); break;
        case '\n': snprintf(esc, sizeof esc, "\\n"); break;
        case '\r': snprintf(esc, sizeof esc, "\\r"); break;
        case '\t': snprintf(esc, sizeof esc, "\\t"); break;
        case '\b': snprintf(esc, sizeof esc, "\\b"); break;
        case '\f': snprintf(esc, sizeof esc, "\\f"); break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
        }
        rc = tb_put(c, b, esc, strlen(esc));
        i += adv;
    }
    return rc ? rc : tb_putc(c, b, '"');
}

static int json_float(tctx *c, tbuf *b, double f)
{
    char num[64];
    if (isnan(f))
        return tb_put(c, b, "NaN", 3);
    if (isinf(f))
        return f < 0 ? tb_put(c, b, "-Infinity", 9) : tb_put(c, b, "Infinity", 8);
    tv_write_float(num, sizeof num, f);
    return tb_put(c, b, num, strlen(num));
}

static int json_newline(tctx *c, tbuf *b, const tjson_opts *o, uint32_t level)
{
    int rc = tb_putc(c, b, '\n');
    for (uint32_t i = 0; !rc && i < level; i++)
        rc = tb_put(c, b, o->indent, o->indent_len);
    return rc;
}

static int json_key(tctx *c, tbuf *b, const tval *k, const tjson_opts *o)
{
    char num[64];
    switch (k->t) {
    case TV_STR: return json_str(c, b, tv_s(k)->s, tv_s(k)->len, o->ensure_ascii);
    case TV_BOOL: return json_str(c, b, k->u.i ? "true" : "false", k->u.i ? 4 : 5, 0);
    case TV_NONE: return json_str(c, b, "null", 4, 0);
    case TV_INT:
        snprintf(num, sizeof num, "%lld", (long long)k->u.i);
        return json_str(c, b, num, strlen(num), 0);
    case TV_FLOAT:
        if (isnan(k->u.f))
            snprintf(num, sizeof num, "NaN");
        else if (isinf(k->u.f))
            snprintf(num, sizeof num, k->u.f < 0 ? "-Infinity" : "Infinity");
        else
            tv_write_float(num, sizeof num, k->u.f);
        return json_str(c, b, num, strlen(num), 0);
    default:
        return tc_fail(c, NULL, EM_EINVAL, "keys must be str, int, float, bool or None, not %s",
                       tv_type_name(k));
    }
}

static int cmp_keys(const void *a, const void *b)
{
    const tval *x = *(const tval *const *)a, *y = *(const tval *const *)b;
    const tstr *s = tv_s(x), *t = tv_s(y);
    size_t n = s->len < t->len ? s->len : t->len;
    int r = memcmp(s->s, t->s, n);
    return r ? r : (s->len > t->len) - (s->len < t->len);
}

int tv_write_json(tctx *c, tbuf *b, const tval *v, const tjson_opts *o, uint32_t level)
{
    char num[64];
    int rc = 0;
    switch (v->t) {
    case TV_NONE: return tb_put(c, b, "null", 4);
    case TV_BOOL: return v->u.i ? tb_put(c, b, "true", 4) : tb_put(c, b, "false", 5);
    case TV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        return tb_put(c, b, num, strlen(num));
    case TV_FLOAT: return json_float(c, b, v->u.f);
    case TV_STR: return json_str(c, b, tv_s(v)->s, tv_s(v)->len, o->ensure_ascii);
    case TV_LIST:
        if (v->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))
            break;
        /* fall through */
    case TV_DICT: {
        if ((rc = deeper(c)) || (rc = tc_steps(c, 1)))
            return rc;
        int is_list = v->t == TV_LIST;
        size_t n = is_list ? tv_l(v)->n : tv_d(v)->n;
        const tval **order = NULL;
        if (!is_list && o->sort_keys && n > 1) {
            order = malloc(n * sizeof *order);
            if (!order) {
                rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
                goto out;
            }
            for (size_t i = 0; i < n; i++) {
                order[i] = &tv_d(v)->k[i];
                if (order[i]->t != TV_STR) {
                    rc = tc_fail(c, NULL, EM_EINVAL, "tojson: sort_keys needs string keys");
                    goto out;
                }
            }
            qsort(order, n, sizeof *order, cmp_keys);
        }
        if ((rc = tb_putc(c, b, is_list ? '[' : '{')))
            goto out;
        if (!n) {
            rc = tb_putc(c, b, is_list ? ']' : '}');
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            if (i && (rc = tb_put(c, b, o->item_sep, o->item_sep_len)))
                goto out;
            if (o->indent_set && (rc = json_newline(c, b, o, level + 1)))
                goto out;
            if (is_list) {
                rc = tv_write_json(c, b, &tv_l(v)->v[i], o, level + 1);
            } else {
                size_t at = order ? (size_t)(order[i] - tv_d(v)->k) : i;
                if (!(rc = json_key(c, b, &tv_d(v)->k[at], o)) &&
                    !(rc = tb_put(c, b, o->key_sep, o->key_sep_len)))
                    rc = tv_write_json(c, b, &tv_d(v)->v[at], o, level + 1);
            }
            if (rc)
                goto out;
        }
        if (o->indent_set && (rc = json_newline(c, b, o, level)))
            goto out;
        rc = tb_putc(c, b, is_list ? ']' : '}');
    out:
        free(order);
        c->depth--;
        return rc;
    }
    default:
        break;
    }
    return tc_fail(c, NULL, EM_EINVAL, "Object of type %s is not JSON serializable", tv_type_name(v));
}

/* ------------------------------------------------ truth, ==, order */

int tv_truthy(const tval *v)
{
    switch (v->t) {
    case TV_UNDEF:
    case TV_NONE: return 0;
    case TV_BOOL:
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0;
    case TV_STR: return tv_s(v)->len != 0;
    case TV_LIST: return tv_l(v)->n != 0;
    case TV_DICT: return tv_d(v)->n != 0;
    default: return 1;
    }
}

static int is_num(const tval *v)
{
    return v->t == TV_BOOL || v->t == TV_INT || v->t == TV_FLOAT;
}

/* Compare int i with float f exactly: -1, 0, 1, or 2 when f is NaN. */
static int cmp_int_float(int64_t i, double f)
{
    if (isnan(f))
        return 2;
    if (f >= 9223372036854775808.0)
        return -1;
    if (f < -9223372036854775808.0)
        return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi)
        return -1;
    if (i > fi)
        return 1;
    return fl < f ? -1 : 0;
}

static int num_cmp(const tval *a, const tval *b)
{
    if (a->t != TV_FLOAT && b->t != TV_FLOAT)
        return (a->u.i > b->u.i) - (a->u.i < b->u.i);
    if (a->t == TV_FLOAT && b->t == TV_FLOAT) {
        if (isnan(a->u.f) || isnan(b->u.f))
            return 2;
        return (a->u.f > b->u.f) - (a->u.f < b->u.f);
    }
    if (a->t == TV_FLOAT) {
        int r = cmp_int_float(b->u.i, a->u.f);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(a->u.i, b->u.f);
}

static int seq_kind(const tval *v)
{
    return v->fl & TVF_TUPLE ? 1 : v->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES) ? 2 : 0;
}

int tv_eq(tctx *c, const tval *a, const tval *b, int *eq)
{
    int rc;
    *eq = 0;
    if (is_num(a) && is_num(b)) {
        *eq = num_cmp(a, b) == 0;
        return 0;
    }
    if (a->t != b->t)
        return 0;
    switch (a->t) {
    case TV_UNDEF:
    case TV_NONE: *eq = 1; return 0;
    case TV_STR:
        *eq = tv_s(a)->len == tv_s(b)->len && memcmp(tv_s(a)->s, tv_s(b)->s, tv_s(a)->len) == 0;
        return 0;
    case TV_LIST: {
        const tlist *x = tv_l(a), *y = tv_l(b);
        if (seq_kind(a) != seq_kind(b) || x->n != y->n)
            return 0;
        if (x == y) {
            *eq = 1;
            return 0;
        }
        if ((rc = deeper(c)))
            return rc;
        *eq = 1;
        for (size_t i = 0; i < x->n && *eq; i++)
            if ((rc = tv_eq(c, &x->v[i], &y->v[i], eq)))
                break;
        c->depth--;
        return rc;
    }
    case TV_DICT: {
        const tdict *x = tv_d(a), *y = tv_d(b);
        if (x->n != y->n)
            return 0;
        if (x == y) {
            *eq = 1;
            return 0;
        }
        if ((rc = deeper(c)))
            return rc;
        *eq = 1;
        for (size_t i = 0; i < x->n && *eq; i++) {
            long at;
            if ((rc = td_find(c, y, &x->k[i], &at)))
                break;
            if (at < 0) {
                *eq = 0;
                break;
            }
            if ((rc = tv_eq(c, &x->v[i], &y->v[at], eq)))
                break;
        }
        c->depth--;
        return rc;
    }
    case TV_FUNC: *eq = a->u.i == b->u.i; return 0;
    default: *eq = a->u.o == b->u.o; return 0;
    }
}

int tv_cmp(tctx *c, const tval *a, const tval *b, int *cmp, const char *opname)
{
    int rc;
    if (is_num(a) && is_num(b)) {
        *cmp = num_cmp(a, b);
        return 0;
    }
    if (a->t == TV_UNDEF || b->t == TV_UNDEF)
        return te_undef_error(c, a->t == TV_UNDEF ? a : b);
    if (a->t == TV_STR && b->t == TV_STR) {
        const tstr *s = tv_s(a), *t = tv_s(b);
        size_t n = s->len < t->len ? s->len : t->len;
        int r = memcmp(s->s, t->s, n);
        *cmp = r < 0 ? -1 : r > 0 ? 1 : (s->len > t->len) - (s->len < t->len);
        return 0;
    }
    if (a->t == TV_LIST && b->t == TV_LIST && seq_kind(a) == seq_kind(b) && seq_kind(a) != 2) {
        const tlist *x = tv_l(a), *y = tv_l(b);
        if ((rc = deeper(c)))
            return rc;
        size_t n = x->n < y->n ? x->n : y->n, i;
        for (i = 0; i < n; i++) {
            int eq;
            if ((rc = tv_eq(c, &x->v[i], &y->v[i], &eq)))
                goto out;
            if (!eq)
                break;
        }
        if (i < n)
            rc = tv_cmp(c, &x->v[i], &y->v[i], cmp, opname);
        else
            *cmp = (x->n > y->n) - (x->n < y->n);
    out:
        c->depth--;
        return rc;
    }
    return tc_fail(c, NULL, EM_EINVAL, "'%s' not supported between instances of '%s' and '%s'", opname,
                   tv_type_name(a), tv_type_name(b));
}

/* ------------------------------------------------------------- json in */

int tv_from_json(tctx *c, const json_t *j, tval *out, uint32_t depth)
{
    int rc;
    if (depth > TL_VALUE_DEPTH)
        return tc_fail(c, NULL, EM_ERANGE, "the variables nest deeper than %d (EM_TMPL_MAX_VALUE_DEPTH)",
                       TL_VALUE_DEPTH);
    if ((rc = tc_steps(c, 1)))
        return rc;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if ((rc = td_new(c, 0, out)))
            return rc;
        const char *key;
        size_t klen;
        json_t *val;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)j, tmp, key, klen, val) {
            tval k, v;
            if (!tu_valid(key, klen, NULL)) {
                rc = tc_fail(c, NULL, EM_EINVAL, "the variables hold a key that is not valid UTF-8");
                goto obj_fail;
            }
            if ((rc = ts_new(c, key, klen, &k)))
                goto obj_fail;
            if ((rc = tv_from_json(c, val, &v, depth + 1))) {
                tv_drop(c, &k);
                goto obj_fail;
            }
            if ((rc = td_set(c, out, k, v)))
                goto obj_fail;
        }
        return 0;
    obj_fail:
        tv_drop(c, out);
        return rc;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if ((rc = tl_new(c, n, 0, out)))
            return rc;
        for (size_t i = 0; i < n; i++) {
            tval v;
            if ((rc = tv_from_json(c, json_array_get(j, i), &v, depth + 1)) ||
                (rc = tl_push(c, out, v))) {
                tv_drop(c, out);
                return rc;
            }
        }
        return 0;
    }
    case JSON_STRING: {
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        if (!tu_valid(s, n, NULL))
            return tc_fail(c, NULL, EM_EINVAL, "the variables hold a string that is not valid UTF-8");
        return ts_new(c, s, n, out);
    }
    case JSON_INTEGER: *out = tv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = tv_bool(1); return 0;
    case JSON_FALSE: *out = tv_bool(0); return 0;
    default: *out = tv_none(); return 0;
    }
}
