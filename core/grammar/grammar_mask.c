/* grammar_mask.c — token masks: a vocabulary's token bytes as a byte trie
 * laid out in preorder (each node knows where its subtree ends), walked
 * against a matcher's state so that a rejected prefix prunes every token
 * under it; and the mask cache shared by the requests of one grammar,
 * keyed by the canonical form of a matcher state. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/grammar/grammar_int.h"
#include "core/grow.h"

#define MAX_TOKEN_BYTES 65535u

struct em_gvocab {
    uint32_t  n_vocab;
    uint32_t  n_nodes;
    uint8_t  *byte;       /* [n_nodes] the edge into node i (root: unused) */
    uint16_t *depth;      /* [n_nodes] root 0 */
    uint32_t *skip;       /* [n_nodes] first node after i's subtree */
    uint32_t *tok_first;  /* [n_nodes] into tok_ids */
    uint32_t *tok_n;      /* [n_nodes] tokens ending at node i */
    uint32_t *tok_ids;    /* [n_in_trie] */
    uint32_t  max_depth;
    uint32_t *bytes_off;  /* [n_vocab + 1] into bytes */
    char     *bytes;
    uint8_t  *flags;      /* [n_vocab] EM_GTOK_* */
    uint32_t *eog;        /* [n_eog] */
    uint32_t  n_eog;
};

/* ---- the vocabulary trie ------------------------------------------------- */

typedef struct { const em_gvocab *v; } sort_ctx;

static int cmp_tok(const void *a, const void *b, void *ctx)
{
    const em_gvocab *v = ((const sort_ctx *)ctx)->v;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t lx = v->bytes_off[x + 1] - v->bytes_off[x], ly = v->bytes_off[y + 1] - v->bytes_off[y];
    int c = memcmp(v->bytes + v->bytes_off[x], v->bytes + v->bytes_off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void em_gvocab_destroy(em_gvocab *v)
{
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok_first);
    free(v->tok_n);
    free(v->tok_ids);
    free(v->bytes_off);
    free(v->bytes);
    free(v->flags);
    free(v->eog);
    free(v);
}

uint32_t em_gvocab_n_vocab(const em_gvocab *v) { return v->n_vocab; }
uint32_t em_gvocab_n_nodes(const em_gvocab *v) { return v->n_nodes; }
size_t   em_gvocab_mask_words(const em_gvocab *v) { return ((size_t)v->n_vocab + 31) / 32; }

/* Nodes for the sorted tokens order[0..n), in preorder. */
static int build_trie(em_gvocab *v, const uint32_t *order, uint32_t n)
{
    size_t cap = 1;
    for (uint32_t i = 0; i < n; i++)
        cap += v->bytes_off[order[i] + 1] - v->bytes_off[order[i]];
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->skip = malloc(cap * sizeof *v->skip);
    v->tok_first = calloc(cap, sizeof *v->tok_first);
    v->tok_n = calloc(cap, sizeof *v->tok_n);
    v->tok_ids = malloc(((size_t)n + 1) * sizeof *v->tok_ids);
    uint32_t *path = malloc(((size_t)v->max_depth + 1) * sizeof *path);
    if (!v->byte || !v->depth || !v->skip || !v->tok_first || !v->tok_n || !v->tok_ids || !path) {
        free(path);
        return EM_ENOMEM;
    }
    uint32_t nn = 1, cur = 0;   /* cur: depth of the path's end */
    v->byte[0] = 0;
    v->depth[0] = 0;
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = order[i];
        const char *b = v->bytes + v->bytes_off[t];
        uint32_t len = v->bytes_off[t + 1] - v->bytes_off[t], lcp = 0;
        while (prev && lcp < len && lcp < prev_len && b[lcp] == prev[lcp])
            lcp++;
        for (uint32_t d = cur; d > lcp; d--)
            v->skip[path[d]] = nn;
        for (uint32_t d = lcp + 1; d <= len; d++) {
            v->byte[nn] = (uint8_t)b[d - 1];
            v->depth[nn] = (uint16_t)d;
            path[d] = nn++;
        }
        cur = len;
        uint32_t node = path[len];
        if (v->tok_n[node] == 0)
            v->tok_first[node] = i;
        v->tok_ids[i] = t;
        v->tok_n[node]++;
        prev = b;
        prev_len = len;
    }
    for (uint32_t d = cur; d > 0; d--)
        v->skip[path[d]] = nn;
    v->skip[0] = nn;
    v->n_nodes = nn;
    free(path);
    return 0;
}

int em_gvocab_create(const em_gvocab_token *toks, uint32_t n_vocab, em_gvocab **out, em_err *err)
{
    *out = NULL;
    uint32_t *order = NULL;
    em_gvocab *v = calloc(1, sizeof *v);
    int rc = EM_ENOMEM;
    if (!v)
        goto fail;
    v->n_vocab = n_vocab;
    size_t total = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        if (toks[i].len > MAX_TOKEN_BYTES) {
            rc = em_err_set(err, EM_EINVAL, "grammar: token %u has %u bytes (the limit is %u)",
                            i, toks[i].len, MAX_TOKEN_BYTES);
            goto fail;
        }
        if (toks[i].len && !toks[i].bytes) {
            rc = em_err_set(err, EM_EINVAL, "grammar: token %u has no bytes", i);
            goto fail;
        }
        total += toks[i].len;
    }
    if (total > UINT32_MAX) {
        rc = em_err_set(err, EM_EINVAL, "grammar: vocabulary too large (%zu bytes)", total);
        goto fail;
    }
    v->bytes_off = malloc(((size_t)n_vocab + 1) * sizeof *v->bytes_off);
    v->bytes = malloc(total + 1);
    v->flags = malloc((size_t)n_vocab + 1);
    order = malloc(((size_t)n_vocab + 1) * sizeof *order);
    v->eog = malloc(((size_t)n_vocab + 1) * sizeof *v->eog);
    if (!v->bytes_off || !v->bytes || !v->flags || !order || !v->eog)
        goto fail;
    uint32_t off = 0, n_trie = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        v->bytes_off[i] = off;
        if (toks[i].len)
            memcpy(v->bytes + off, toks[i].bytes, toks[i].len);
        off += toks[i].len;
        v->flags[i] = (uint8_t)(toks[i].flags & (EM_GTOK_SPECIAL | EM_GTOK_EOG));
        if (v->flags[i] & EM_GTOK_EOG)
            v->eog[v->n_eog++] = i;
        else if (!(v->flags[i] & EM_GTOK_SPECIAL) && toks[i].len) {
            order[n_trie++] = i;
            if (toks[i].len > v->max_depth)
                v->max_depth = toks[i].len;
        }
    }
    v->bytes_off[n_vocab] = off;
    sort_ctx ctx = { v };
    qsort_r(order, n_trie, sizeof *order, cmp_tok, &ctx);
    if (build_trie(v, order, n_trie))
        goto fail;
    free(order);
    *out = v;
    return 0;
fail:
    if (rc == EM_ENOMEM)
        em_err_set(err, EM_ENOMEM, "grammar: out of memory building the vocabulary trie");
    free(order);
    em_gvocab_destroy(v);
    return rc;
}

const char *em_gvocab_token_bytes(const em_gvocab *v, uint32_t id, uint32_t *len)
{
    if (id >= v->n_vocab || (v->flags[id] & EM_GTOK_SPECIAL)) {
        *len = 0;
        return "";
    }
    *len = v->bytes_off[id + 1] - v->bytes_off[id];
    return v->bytes + v->bytes_off[id];
}

int em_gmatch_accept_token(em_gmatch *m, const em_gvocab *v, uint32_t id)
{
    if (id >= v->n_vocab)
        return EM_ERANGE;
    if (v->flags[id] & EM_GTOK_EOG)
        return em_gmatch_can_end(m) ? 0 : EM_EINVAL;
    uint32_t len = v->bytes_off[id + 1] - v->bytes_off[id];
    if ((v->flags[id] & EM_GTOK_SPECIAL) || len == 0)
        return EM_EINVAL;
    return em_gmatch_accept(m, v->bytes + v->bytes_off[id], len);
}

/* The walk: node i's state comes from its parent's (at depth - 1). */
static int walk(em_gmatch *m, const em_gvocab *v, uint32_t *mask)
{
    uint32_t *set = malloc(((size_t)v->max_depth + 1) * 2 * sizeof *set);
    if (!set)
        return EM_ENOMEM;
    uint32_t *part = set + v->max_depth + 1;
    set[0] = m->cur;
    part[0] = m->partial;
    memset(mask, 0, em_gvocab_mask_words(v) * sizeof *mask);
    for (uint32_t i = 1; i < v->n_nodes;) {
        uint32_t d = v->depth[i];
        uint32_t s = eg_step(m, set[d - 1], part[d - 1], v->byte[i], &part[d]);
        if (s == 0 || s == EG_LIMIT) {
            i = v->skip[i];
            continue;
        }
        set[d] = s;
        for (uint32_t k = 0; k < v->tok_n[i]; k++) {
            uint32_t t = v->tok_ids[v->tok_first[i] + k];
            mask[t >> 5] |= 1u << (t & 31);
        }
        i++;
    }
    if (em_gmatch_can_end(m))
        for (uint32_t k = 0; k < v->n_eog; k++)
            mask[v->eog[k] >> 5] |= 1u << (v->eog[k] & 31);
    free(set);
    return 0;
}

/* ---- the cache ----------------------------------------------------------- */

typedef struct gc_entry {
    uint64_t         hash;
    uint32_t        *key;
    size_t           key_n;
    struct gc_entry *prev, *next;   /* recency list, head = most recent */
    struct gc_entry *chain;         /* bucket */
    uint32_t         mask[];
} gc_entry;

struct em_gcache {
    const em_grammar *g;
    const em_gvocab  *v;
    pthread_mutex_t   mu;
    gc_entry        **buckets;
    size_t            n_buckets;
    gc_entry         *head, *tail;
    size_t            entries, bytes, max_bytes, words;
    uint64_t          hits, misses, evictions;
};

int em_gcache_create(const em_grammar *g, const em_gvocab *v, size_t max_bytes, em_gcache **out,
                     em_err *err)
{
    *out = NULL;
    em_gcache *c = calloc(1, sizeof *c);
    if (!c)
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    c->g = g;
    c->v = v;
    c->max_bytes = max_bytes;
    c->words = em_gvocab_mask_words(v);
    c->n_buckets = 64;
    c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->buckets || pthread_mutex_init(&c->mu, NULL)) {
        free(c->buckets);
        free(c);
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    }
    *out = c;
    return 0;
}

void em_gcache_destroy(em_gcache *c)
{
    if (!c)
        return;
    for (gc_entry *e = c->head, *n; e; e = n) {
        n = e->next;
        free(e->key);
        free(e);
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void em_gcache_get_stats(em_gcache *c, em_gcache_stats *st)
{
    pthread_mutex_lock(&c->mu);
    st->hits = c->hits;
    st->misses = c->misses;
    st->evictions = c->evictions;
    st->entries = c->entries;
    st->bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}

static size_t entry_bytes(const em_gcache *c, size_t key_n)
{
    return sizeof(gc_entry) + c->words * sizeof(uint32_t) + key_n * sizeof(uint32_t);
}

static void lru_unlink(em_gcache *c, gc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_front(em_gcache *c, gc_entry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

/* Under the lock. */
static gc_entry *find(em_gcache *c, uint64_t h, const uint32_t *key, size_t n)
{
    for (gc_entry *e = c->buckets[h & (c->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == h && e->key_n == n && !memcmp(e->key, key, n * sizeof *key))
            return e;
    return NULL;
}

static void unchain(em_gcache *c, gc_entry *e)
{
    gc_entry **pp = &c->buckets[e->hash & (c->n_buckets - 1)];
    while (*pp != e)
        pp = &(*pp)->chain;
    *pp = e->chain;
}

/* Under the lock; takes ownership of key. */
static void insert(em_gcache *c, uint64_t h, uint32_t *key, size_t n, const uint32_t *mask)
{
    if (find(c, h, key, n)) {   /* another thread computed it meanwhile */
        free(key);
        return;
    }
    if (c->entries + 1 > c->n_buckets) {
        size_t nb = c->n_buckets * 2;
        gc_entry **b = calloc(nb, sizeof *b);
        if (b) {
            for (gc_entry *e = c->head; e; e = e->next) {
                e->chain = b[e->hash & (nb - 1)];
                b[e->hash & (nb - 1)] = e;
            }
            free(c->buckets);
            c->buckets = b;
            c->n_buckets = nb;
        }
    }
    size_t sz = entry_bytes(c, n);
    while (c->tail && c->bytes + sz > c->max_bytes) {
        gc_entry *old = c->tail;
        lru_unlink(c, old);
        unchain(c, old);
        c->bytes -= entry_bytes(c, old->key_n);
        c->entries--;
        c->evictions++;
        free(old->key);
        free(old);
    }
    gc_entry *e = malloc(sizeof *e + c->words * sizeof(uint32_t));
    if (!e) {
        free(key);
        return;   /* the cache is an optimisation: the mask was computed */
    }
    e->hash = h;
    e->key = key;
    e->key_n = n;
    memcpy(e->mask, mask, c->words * sizeof *mask);
    e->chain = c->buckets[h & (c->n_buckets - 1)];
    c->buckets[h & (c->n_buckets - 1)] = e;
    lru_front(c, e);
    c->bytes += sz;
    c->entries++;
}

int em_gmatch_allowed(em_gmatch *m, const em_gvocab *v, em_gcache *cache, uint32_t *mask_bits, em_err *err)
{
    if (cache && (cache->g != m->g || cache->v != v))
        return em_err_set(err, EM_EINVAL, "grammar: the mask cache belongs to another grammar or vocabulary");
    if (eg_maybe_compact(m))
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    uint32_t *key = NULL;
    size_t n = 0;
    uint64_t h = 0;
    if (cache) {
        if (eg_state_key(m, &key, &n))
            return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
        h = XXH3_64bits(key, n * sizeof *key);
        pthread_mutex_lock(&cache->mu);
        gc_entry *e = find(cache, h, key, n);
        if (e) {
            memcpy(mask_bits, e->mask, cache->words * sizeof *mask_bits);
            lru_unlink(cache, e);
            lru_front(cache, e);
            cache->hits++;
        } else {
            cache->misses++;
        }
        pthread_mutex_unlock(&cache->mu);
        if (e) {
            free(key);
            return 0;
        }
    }
    if (walk(m, v, mask_bits)) {
        free(key);
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    }
    if (cache) {
        pthread_mutex_lock(&cache->mu);
        insert(cache, h, key, n, mask_bits);
        pthread_mutex_unlock(&cache->mu);
    }
    return 0;
}
