/* grammar_match.c — the grammar matcher: a deduplicated set of parse stacks
 * (llama.cpp's pushdown approach) over Unicode code points, fed UTF-8
 * bytes. Stacks and sets are interned in a per-matcher arena and each step
 * is memoized (see grammar_int.h), which is what makes token masks cheap. */
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/grammar/grammar_int.h"
#include "core/grow.h"

#define NODE_NONE UINT32_MAX
/* the arena is rebuilt from the current state past these sizes */
#define COMPACT_NODES (1u << 20)
#define COMPACT_POOL  (1u << 22)
#define COMPACT_MEMO  (1u << 21)
/* stacks one expansion may visit before the step counts as too large */
#define MAX_VISIT     (8u * EM_GMATCH_MAX_STACKS)

static inline uint64_t mix64(uint64_t x)
{
    return XXH3_64bits(&x, sizeof x);
}

/* Rebuild the open-addressed table *tab of ids (0: an empty slot) at twice
 * its capacity (first when empty), with ids 1..n-1 placed by hash. */
static int tab_grow(em_gmatch *m, uint32_t **tab, size_t *cap, size_t first, size_t n,
                    uint64_t (*hash)(const em_gmatch *, uint32_t))
{
    size_t nc = *cap ? *cap * 2 : first;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t)
        return EM_ENOMEM;
    for (size_t id = 1; id < n; id++) {
        size_t h = (size_t)hash(m, (uint32_t)id) & (nc - 1);
        while (t[h])
            h = (h + 1) & (nc - 1);
        t[h] = (uint32_t)id;
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

/* ---- interned stacks ----------------------------------------------------- */

static uint64_t node_hash(const em_gmatch *m, uint32_t id)
{
    return mix64(((uint64_t)m->nodes[id].pos << 32) | m->nodes[id].parent);
}

static int node_rehash(em_gmatch *m)
{
    return tab_grow(m, &m->node_tab, &m->node_tab_cap, 1024, m->n_nodes, node_hash);
}

/* The stack pos·parent; NODE_NONE when too deep or out of memory. */
static uint32_t push(em_gmatch *m, uint32_t pos, uint32_t parent)
{
    uint32_t depth = parent ? m->nodes[parent].depth + 1 : 1;
    if (depth > EM_GMATCH_MAX_DEPTH)
        return NODE_NONE;
    if ((m->n_nodes + 1) * 2 > m->node_tab_cap && node_rehash(m))
        return NODE_NONE;
    size_t h = (size_t)mix64(((uint64_t)pos << 32) | parent) & (m->node_tab_cap - 1);
    for (uint32_t id; (id = m->node_tab[h]); h = (h + 1) & (m->node_tab_cap - 1))
        if (m->nodes[id].pos == pos && m->nodes[id].parent == parent)
            return id;
    if (em_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes, sizeof *m->nodes, 1024))
        return NODE_NONE;
    if (m->cap_mark < m->cap_nodes) {
        uint32_t *mk = realloc(m->mark, m->cap_nodes * sizeof *mk);
        if (!mk)
            return NODE_NONE;
        memset(mk + m->cap_mark, 0, (m->cap_nodes - m->cap_mark) * sizeof *mk);
        m->mark = mk;
        m->cap_mark = m->cap_nodes;
    }
    uint32_t id = (uint32_t)m->n_nodes++;
    m->nodes[id] = (eg_node){ pos, parent, depth };
    m->mark[id] = 0;
    m->node_tab[h] = id;
    return id;
}

/* ---- interned sets ------------------------------------------------------- */

static uint64_t hash_ids(const uint32_t *v, size_t n)
{
    return XXH3_64bits(v, n * sizeof *v);
}

static uint64_t set_hash(const em_gmatch *m, uint32_t id)
{
    return hash_ids(m->pool + m->sets[id].off, m->sets[id].n);
}

static int set_rehash(em_gmatch *m)
{
    return tab_grow(m, &m->set_tab, &m->set_tab_cap, 256, m->n_sets, set_hash);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The set of m->out[0..n_out) (distinct ids, any order): its id, 0 when it
 * is empty, EG_LIMIT when too large or out of memory. */
static uint32_t intern_out(em_gmatch *m)
{
    size_t n = m->n_out;
    if (n == 0)
        return 0;
    if (n > EM_GMATCH_MAX_STACKS)
        return EG_LIMIT;
    qsort(m->out, n, sizeof *m->out, cmp_u32);
    if (m->n_sets == 0)
        m->n_sets = 1;   /* id 0 stays "rejected" */
    if ((m->n_sets + 1) * 2 > m->set_tab_cap && set_rehash(m))
        return EG_LIMIT;
    size_t h = (size_t)hash_ids(m->out, n) & (m->set_tab_cap - 1);
    for (uint32_t id; (id = m->set_tab[h]); h = (h + 1) & (m->set_tab_cap - 1))
        if (m->sets[id].n == n && !memcmp(m->pool + m->sets[id].off, m->out, n * sizeof *m->out))
            return id;
    if (em_grow((void **)&m->sets, &m->cap_sets, m->n_sets, sizeof *m->sets, 256))
        return EG_LIMIT;
    while (m->n_pool + n > m->cap_pool)
        if (em_grow((void **)&m->pool, &m->cap_pool, m->cap_pool, sizeof *m->pool, 1024))
            return EG_LIMIT;
    memcpy(m->pool + m->n_pool, m->out, n * sizeof *m->out);
    uint32_t id = (uint32_t)m->n_sets++;
    m->sets[id] = (eg_set){ (uint32_t)m->n_pool, (uint32_t)n };
    m->n_pool += n;
    m->set_tab[h] = id;
    return id;
}

/* ---- expansion ----------------------------------------------------------- */

static int work_push(em_gmatch *m, size_t *n, uint32_t id)
{
    if (id == NODE_NONE)
        return 0;   /* too deep: that path is dropped */
    if (em_grow((void **)&m->work, &m->cap_work, *n, sizeof *m->work, 64))
        return EM_ENOMEM;
    m->work[(*n)++] = id;
    return 0;
}

static void next_gen(em_gmatch *m)
{
    if (++m->gen == 0) {
        memset(m->mark, 0, m->cap_mark * sizeof *m->mark);
        m->gen = 1;
    }
}

/* Expand stack s until every stack has a character on top (or is empty),
 * adding those to m->out. Stacks seen before in this generation are skipped:
 * they are interned, so they would expand to the same stacks. */
static int expand(em_gmatch *m, uint32_t s, size_t *visits)
{
    const em_grammar *g = m->g;
    size_t nw = 0;
    if (work_push(m, &nw, s))
        return EM_ENOMEM;
    while (nw) {
        s = m->work[--nw];
        if (m->mark[s] == m->gen)
            continue;
        m->mark[s] = m->gen;
        if (++*visits > MAX_VISIT)
            return EM_ERANGE;
        uint32_t pos = m->nodes[s].pos, el = g->elems[pos];
        if (s == 0 || EG_TYPE(el) == EG_CHAR) {
            if (em_grow((void **)&m->out, &m->cap_out, m->n_out, sizeof *m->out, 64))
                return EM_ENOMEM;
            m->out[m->n_out++] = s;
            continue;
        }
        /* a rule reference: continue after it, under each alternative */
        uint32_t rest = m->nodes[s].parent;
        if (EG_TYPE(g->elems[pos + 1]) != EG_END && (rest = push(m, pos + 1, rest)) == NODE_NONE)
            continue;
        const eg_rule *r = &g->rules[EG_ARG(el)];
        for (uint32_t a = r->first_alt; a < r->first_alt + r->n_alts; a++) {
            uint32_t first = g->alts[a];
            uint32_t t = EG_TYPE(g->elems[first]) == EG_END ? rest : push(m, first, rest);
            if (work_push(m, &nw, t))
                return EM_ENOMEM;
        }
    }
    return 0;
}

/* The set after code point cp from set. */
static uint32_t advance(em_gmatch *m, uint32_t set, uint32_t cp)
{
    const em_grammar *g = m->g;
    next_gen(m);
    m->n_out = 0;
    size_t visits = 0;
    const eg_set st = m->sets[set];
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t s = m->pool[st.off + i];
        if (s == 0)
            continue;
        uint32_t pos = m->nodes[s].pos;
        if (!eg_cset_has(g, EG_ARG(g->elems[pos]), cp))
            continue;
        uint32_t rest = m->nodes[s].parent;
        if (EG_TYPE(g->elems[pos + 1]) != EG_END && (rest = push(m, pos + 1, rest)) == NODE_NONE)
            continue;
        if (expand(m, rest, &visits))
            return EG_LIMIT;
    }
    return intern_out(m);
}

/* 1 when some stack of set can match a code point in [lo, hi]. */
static int feasible(const em_gmatch *m, uint32_t set, uint32_t lo, uint32_t hi)
{
    const eg_set st = m->sets[set];
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t s = m->pool[st.off + i];
        if (s && eg_cset_meets(m->g, EG_ARG(m->g->elems[m->nodes[s].pos]), lo, hi))
            return 1;
    }
    return 0;
}

/* ---- UTF-8 --------------------------------------------------------------- */

#define P_VAL(p)  ((p) & 0x1FFFFFu)
#define P_LEFT(p) (((p) >> 21) & 3u)
#define P_LEN(p)  ((((p) >> 23) & 3u) + 1)
#define P_MK(v, left, len) ((v) | ((uint32_t)(left) << 21) | ((uint32_t)((len) - 1) << 23))

/* One byte onto partial: -1 invalid, 0 a whole code point in *cp, 1 still
 * partial (*np, with the code points it can still become in [*lo, *hi]). */
static int utf8_byte(uint32_t partial, uint8_t b, uint32_t *cp, uint32_t *np, uint32_t *lo, uint32_t *hi)
{
    uint32_t v, left, len;
    if (P_LEFT(partial) == 0) {
        if (b < 0x80) {
            *cp = b;
            return 0;
        }
        if (b >= 0xC2 && b <= 0xDF) { v = b & 0x1Fu; len = 2; }
        else if (b >= 0xE0 && b <= 0xEF) { v = b & 0x0Fu; len = 3; }
        else if (b >= 0xF0 && b <= 0xF4) { v = b & 0x07u; len = 4; }
        else return -1;
        left = len - 1;
    } else {
        if ((b & 0xC0) != 0x80)
            return -1;
        v = (P_VAL(partial) << 6) | (b & 0x3Fu);
        left = P_LEFT(partial) - 1;
        len = P_LEN(partial);
    }
    uint32_t l = v << (6 * left), h = l | ((1u << (6 * left)) - 1);
    if (len == 3 && l < 0x800)
        l = 0x800;
    if (len == 4) {
        if (l < 0x10000)
            l = 0x10000;
        if (h > 0x10FFFF)
            h = 0x10FFFF;
    }
    if (l > h || (l >= 0xD800 && h <= 0xDFFF))
        return -1;   /* overlong, a surrogate or beyond U+10FFFF */
    if (left == 0) {
        *cp = v;
        return 0;
    }
    *np = P_MK(v, left, len);
    *lo = l;
    *hi = h;
    return 1;
}

/* ---- the memoized step --------------------------------------------------- */

static int memo_rehash(em_gmatch *m)
{
    size_t cap = m->memo_cap ? m->memo_cap * 2 : 4096;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return EM_ENOMEM;
    }
    for (size_t i = 0; i < m->memo_cap; i++) {
        if (!m->memo_key[i])
            continue;
        size_t h = (size_t)mix64(m->memo_key[i]) & (cap - 1);
        while (k[h])
            h = (h + 1) & (cap - 1);
        k[h] = m->memo_key[i];
        v[h] = m->memo_val[i];
    }
    free(m->memo_key);
    free(m->memo_val);
    m->memo_key = k;
    m->memo_val = v;
    m->memo_cap = cap;
    return 0;
}

uint32_t eg_step(em_gmatch *m, uint32_t set, uint32_t partial, uint8_t byte, uint32_t *partial_out)
{
    uint32_t cp = 0, np = 0, lo = 0, hi = 0;
    int k = utf8_byte(partial, byte, &cp, &np, &lo, &hi);
    if (k < 0)
        return 0;
    *partial_out = k ? np : 0;
    /* set >= 1, so no key is 0 (the empty slot) */
    uint64_t key = ((uint64_t)set << 32) | (k ? (1u << 31) | np : cp);
    if ((m->n_memo + 1) * 2 > m->memo_cap && memo_rehash(m))
        return EG_LIMIT;
    size_t h = (size_t)mix64(key) & (m->memo_cap - 1);
    for (; m->memo_key[h]; h = (h + 1) & (m->memo_cap - 1))
        if (m->memo_key[h] == key)
            return m->memo_val[h];
    uint32_t r = k ? (feasible(m, set, lo, hi) ? set : 0) : advance(m, set, cp);
    if (m->memo_cap != 0 && (m->n_memo + 1) * 2 <= m->memo_cap) {
        /* advance() does not touch the memo, so slot h is still free */
        m->memo_key[h] = key;
        m->memo_val[h] = r;
        m->n_memo++;
    }
    return r;
}

/* ---- life cycle ---------------------------------------------------------- */

static void arena_free(em_gmatch *m)
{
    free(m->nodes);
    free(m->mark);
    free(m->node_tab);
    free(m->pool);
    free(m->sets);
    free(m->set_tab);
    free(m->memo_key);
    free(m->memo_val);
    free(m->work);
    free(m->out);
}

void em_gmatch_destroy(em_gmatch *m)
{
    if (!m)
        return;
    arena_free(m);
    free(m);
}

/* A fresh arena for g holding node 0 (the empty stack) only. */
static int arena_init(em_gmatch *m, const em_grammar *g)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->n_sets = 1;
    if (em_grow((void **)&m->nodes, &m->cap_nodes, 0, sizeof *m->nodes, 1024))
        return EM_ENOMEM;
    m->mark = calloc(m->cap_nodes, sizeof *m->mark);
    if (!m->mark)
        return EM_ENOMEM;
    m->cap_mark = m->cap_nodes;
    m->nodes[0] = (eg_node){ 0, 0, 0 };
    m->n_nodes = 1;
    return node_rehash(m);
}

/* Stacks in the exported form (depth, then positions top to bottom, per
 * stack) back into m's arena as its current set. */
static int import(em_gmatch *m, const uint32_t *v, size_t n, uint32_t partial)
{
    m->n_out = 0;
    for (size_t i = 0; i < n;) {
        uint32_t d = v[i++], s = 0;
        for (uint32_t k = d; k-- > 0;)
            if ((s = push(m, v[i + k], s)) == NODE_NONE)
                return EM_ENOMEM;
        i += d;
        if (em_grow((void **)&m->out, &m->cap_out, m->n_out, sizeof *m->out, 64))
            return EM_ENOMEM;
        m->out[m->n_out++] = s;
    }
    uint32_t id = intern_out(m);
    if (id == 0 || id == EG_LIMIT)
        return EM_ENOMEM;
    m->cur = id;
    m->partial = partial;
    return 0;
}

/* The current set's stacks, exported; canonical sorts them by content. */
static int export(const em_gmatch *m, uint32_t **out, size_t *n_out, int canonical);

int em_gmatch_create(const em_grammar *g, em_gmatch **out, em_err *err)
{
    *out = NULL;
    em_gmatch *m = calloc(1, sizeof *m);
    if (!m || arena_init(m, g)) {
        em_gmatch_destroy(m);
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    }
    /* the root, as if referenced with nothing after it */
    next_gen(m);
    m->n_out = 0;
    size_t visits = 0;
    const eg_rule *r = &g->rules[g->root];
    int rc = 0;
    for (uint32_t a = r->first_alt; a < r->first_alt + r->n_alts && !rc; a++) {
        uint32_t first = g->alts[a];
        uint32_t s = EG_TYPE(g->elems[first]) == EG_END ? 0 : push(m, first, 0);
        if (s != NODE_NONE)
            rc = expand(m, s, &visits);
    }
    uint32_t id = rc ? EG_LIMIT : intern_out(m);
    if (id == 0 || id == EG_LIMIT) {
        em_gmatch_destroy(m);
        return em_err_set(err, id == 0 ? EM_EFORMAT : EM_ERANGE,
                          id == 0 ? "grammar: the root matches nothing"
                                  : "grammar: the start state exceeds the matcher's limits");
    }
    m->cur = id;
    *out = m;
    return 0;
}

int em_gmatch_clone(const em_gmatch *m, em_gmatch **out, em_err *err)
{
    *out = NULL;
    uint32_t *v = NULL;
    size_t n = 0;
    em_gmatch *c = calloc(1, sizeof *c);
    if (!c || export(m, &v, &n, 0) || arena_init(c, m->g) || import(c, v, n, m->partial)) {
        free(v);
        em_gmatch_destroy(c);
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    }
    free(v);
    *out = c;
    return 0;
}

int eg_maybe_compact(em_gmatch *m)
{
    if (m->n_nodes < COMPACT_NODES && m->n_pool < COMPACT_POOL && m->n_memo < COMPACT_MEMO)
        return 0;
    em_gmatch fresh;
    memset(&fresh, 0, sizeof fresh);
    uint32_t *v = NULL;
    size_t n = 0;
    if (export(m, &v, &n, 0) || arena_init(&fresh, m->g) || import(&fresh, v, n, m->partial)) {
        free(v);
        arena_free(&fresh);
        return EM_ENOMEM;
    }
    free(v);
    arena_free(m);
    *m = fresh;
    return 0;
}

/* ---- export and canonical keys ------------------------------------------- */

typedef struct { const uint32_t *base; } key_ctx;

static int cmp_stack(const void *a, const void *b, void *ctx)
{
    const uint32_t *base = ((const key_ctx *)ctx)->base;
    const uint32_t *x = base + *(const uint32_t *)a, *y = base + *(const uint32_t *)b;
    uint32_t n = x[0] < y[0] ? x[0] : y[0];
    for (uint32_t i = 1; i <= n; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int export(const em_gmatch *m, uint32_t **out, size_t *n_out, int canonical)
{
    const eg_set st = m->sets[m->cur];
    size_t total = 0;
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t s = m->pool[st.off + i];
        total += 1 + (s ? m->nodes[s].depth : 0);
    }
    uint32_t *v = malloc((total + 2) * sizeof *v);
    uint32_t *starts = canonical ? malloc((st.n + 1) * sizeof *starts) : NULL;
    if (!v || (canonical && !starts)) {
        free(v);
        free(starts);
        return EM_ENOMEM;
    }
    size_t w = 0;
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t s = m->pool[st.off + i];
        if (starts)
            starts[i] = (uint32_t)w;
        v[w++] = s ? m->nodes[s].depth : 0;
        for (; s; s = m->nodes[s].parent)
            v[w++] = m->nodes[s].pos;
    }
    if (canonical) {
        key_ctx ctx = { v };
        qsort_r(starts, st.n, sizeof *starts, cmp_stack, &ctx);
        uint32_t *sorted = malloc((total + 2) * sizeof *sorted);
        if (!sorted) {
            free(v);
            free(starts);
            return EM_ENOMEM;
        }
        size_t k = 0;
        for (uint32_t i = 0; i < st.n; i++) {
            const uint32_t *x = v + starts[i];
            memcpy(sorted + k, x, (x[0] + 1) * sizeof *x);
            k += x[0] + 1;
        }
        free(v);
        free(starts);
        v = sorted;
    }
    *out = v;
    *n_out = w;
    return 0;
}

int eg_state_key(const em_gmatch *m, uint32_t **key, size_t *n)
{
    int rc = export(m, key, n, 1);
    if (rc)
        return rc;
    (*key)[(*n)++] = m->partial;   /* export leaves room for two more words */
    return 0;
}

/* ---- feeding bytes ------------------------------------------------------- */

int em_gmatch_accept(em_gmatch *m, const char *bytes, size_t n)
{
    if (n == 0)
        return 0;
    if (eg_maybe_compact(m))
        return EM_ENOMEM;
    uint32_t set = m->cur, partial = m->partial;
    for (size_t i = 0; i < n; i++) {
        set = eg_step(m, set, partial, (uint8_t)bytes[i], &partial);
        if (set == 0)
            return EM_EINVAL;
        if (set == EG_LIMIT)
            return EM_ERANGE;
    }
    m->cur = set;
    m->partial = partial;
    return 0;
}

int em_gmatch_can_end(const em_gmatch *m)
{
    return m->partial == 0 && m->pool[m->sets[m->cur].off] == 0;
}

int em_gmatch_done(const em_gmatch *m)
{
    return em_gmatch_can_end(m) && m->sets[m->cur].n == 1;
}

uint32_t em_gmatch_n_stacks(const em_gmatch *m)
{
    return m->sets[m->cur].n;
}
