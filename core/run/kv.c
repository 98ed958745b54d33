/* kv.c — the KV block pool: block tables per sequence slot, reference
 * counts, copy on write, and the prefix cache (chained xxhash of token ids,
 * verified against stored ids and parent blocks; LRU eviction); for a
 * sliding-window model a second pool of the windowed layers' blocks, each
 * slot keeping its last window there. Host-side bookkeeping only; the
 * device copies are done by core/gpu/forward.c. */
#include "core/run/kv.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>


#define BLK        EM_KV_BLOCK
#define HASH_SEED  0x656d626572ull   /* "ember" */

enum { B_FREE, B_USED, B_CACHED };

typedef struct {
    int32_t  ref;          /* table references */
    int32_t  parent;       /* previous block of the registered prefix, -1 for the first (window
                            * pool: the main pool's block before it, the anchor) */
    uint32_t gen;          /* main pool: bumped whenever the block takes new content */
    uint32_t parent_gen;   /* window pool: the anchor's gen when this block was registered */
    uint64_t hash;         /* chained hash when registered */
    int32_t  prev, next;   /* free list (next only) or LRU list of cached blocks */
    uint8_t  state;
    uint8_t  registered;   /* in the hash index */
    int32_t  toks[BLK];    /* the block's token ids when registered */
} blk;

/* One pool of blocks: the main one (every layer, or the global layers of a
 * sliding-window model) and the window pool (the windowed layers). */
typedef struct {
    uint32_t n_blocks;
    blk     *b;                /* [n_blocks] */
    int32_t  free_head;
    uint32_t n_free, n_cached, n_used;
    int32_t  lru_head, lru_tail;   /* least recently used first */
    int32_t *index;            /* hash index: block ids, -1 empty; [index_cap] */
    uint32_t index_cap;        /* power of two >= 2 * n_blocks */
} pool;

typedef struct {
    int      open;
    uint32_t n_blocks;     /* blocks in the tables (the window table's leading entries may be -1) */
    uint32_t len;          /* committed positions */
    uint32_t n_hashed;     /* leading full blocks whose chained hash is known */
    uint32_t w_lo;         /* window table: the entries before this one are released (-1) */
    uint64_t *hashes;      /* [max_blocks]: chained hash of block i (i < n_hashed) */
    int32_t *table[2];     /* [max_blocks] each: the main pool's, the window pool's (or NULL) */
} seq;

struct em_kv {
    em_kv_opts o;
    uint32_t   max_blocks;      /* per sequence */
    pool       p[2];            /* main, window (used when o.window) */
    uint32_t   n_pools;
    seq       *s;               /* [max_seqs] */
    int32_t   *scratch;         /* [max_blocks]: the window pool's blocks a match found */
    em_kv_stats st;
};

/* ---- lists ------------------------------------------------------------------ */

static void free_push(pool *pl, int32_t id)
{
    blk *b = &pl->b[id];
    b->state = B_FREE;
    b->next = pl->free_head;
    pl->free_head = id;
    pl->n_free++;
}

static int32_t free_pop(pool *pl)
{
    int32_t id = pl->free_head;
    if (id >= 0) {
        pl->free_head = pl->b[id].next;
        pl->n_free--;
    }
    return id;
}

static void lru_push(pool *pl, int32_t id)   /* most recently used end */
{
    blk *b = &pl->b[id];
    b->state = B_CACHED;
    b->prev = pl->lru_tail;
    b->next = -1;
    if (pl->lru_tail >= 0)
        pl->b[pl->lru_tail].next = id;
    else
        pl->lru_head = id;
    pl->lru_tail = id;
    pl->n_cached++;
}

static void lru_remove(pool *pl, int32_t id)
{
    blk *b = &pl->b[id];
    if (b->prev >= 0)
        pl->b[b->prev].next = b->next;
    else
        pl->lru_head = b->next;
    if (b->next >= 0)
        pl->b[b->next].prev = b->prev;
    else
        pl->lru_tail = b->prev;
    b->prev = b->next = -1;
    pl->n_cached--;
}

/* ---- hash index (linear probing, backward-shift deletion) -------------------- */

static uint32_t slot_of(const pool *pl, uint64_t h)
{
    return (uint32_t)(h ^ (h >> 29)) & (pl->index_cap - 1);
}

static void index_insert(pool *pl, int32_t id)
{
    uint32_t i = slot_of(pl, pl->b[id].hash);
    while (pl->index[i] >= 0)
        i = (i + 1) & (pl->index_cap - 1);
    pl->index[i] = id;
    pl->b[id].registered = 1;
}

static void index_remove(pool *pl, int32_t id)
{
    uint32_t mask = pl->index_cap - 1, i = slot_of(pl, pl->b[id].hash);
    while (pl->index[i] != id)
        i = (i + 1) & mask;
    pl->index[i] = -1;
    /* shift later members of the cluster back into the hole */
    for (uint32_t j = (i + 1) & mask; pl->index[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = slot_of(pl, pl->b[pl->index[j]].hash);
        int moves = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
        if (moves) {
            pl->index[i] = pl->index[j];
            pl->index[j] = -1;
            i = j;
        }
    }
    pl->b[id].registered = 0;
}

/* The registered block holding exactly tokens toks[0..16) after parent
 * (of generation parent_gen: the window pool's anchors). */
static int32_t index_find(const pool *pl, uint64_t h, int32_t parent, uint32_t parent_gen, const int32_t *toks)
{
    uint32_t mask = pl->index_cap - 1;
    for (uint32_t i = slot_of(pl, h); pl->index[i] >= 0; i = (i + 1) & mask) {
        const blk *b = &pl->b[pl->index[i]];
        if (b->hash == h && b->parent == parent && b->parent_gen == parent_gen &&
            memcmp(b->toks, toks, sizeof b->toks) == 0)
            return pl->index[i];
    }
    return -1;
}

static uint64_t chain(uint64_t prev, const int32_t *toks)
{
    return XXH3_64bits_withSeed(toks, BLK * sizeof *toks, prev);
}

/* ---- blocks ------------------------------------------------------------------ */

/* A block for new data: free first, else the least recently used cached one. */
static int32_t take_block(em_kv *kv, pool *pl)
{
    int32_t id = free_pop(pl);
    if (id < 0 && pl->lru_head >= 0) {
        id = pl->lru_head;
        lru_remove(pl, id);
        index_remove(pl, id);
        kv->st.evictions++;
    }
    if (id >= 0) {
        blk *b = &pl->b[id];
        b->state = B_USED;
        b->ref = 1;
        b->registered = 0;
        b->parent = -1;
        b->parent_gen = 0;
        b->gen++;
        pl->n_used++;
    }
    return id;
}

static void release(em_kv *kv, pool *pl, int32_t id)
{
    blk *b = &pl->b[id];
    if (--b->ref > 0)
        return;
    pl->n_used--;
    if (b->registered && kv->o.prefix_cache)
        lru_push(pl, id);
    else {
        if (b->registered)
            index_remove(pl, id);
        free_push(pl, id);
    }
}

static void attach(pool *pl, int32_t id)
{
    blk *b = &pl->b[id];
    if (b->state == B_CACHED) {
        lru_remove(pl, id);
        b->state = B_USED;
        b->ref = 0;
        pl->n_used++;
    }
    b->ref++;
}

/* The first block the window pool needs for queries at positions >= pos. */
static uint32_t window_lo(const em_kv *kv, uint32_t pos)
{
    return em_kv_window_first_block(kv->o.window, pos);
}

static int pool_init(pool *pl, uint32_t n_blocks)
{
    pl->n_blocks = n_blocks;
    pl->index_cap = 16;
    while (pl->index_cap < 2 * n_blocks)
        pl->index_cap *= 2;
    pl->b = calloc(n_blocks, sizeof *pl->b);
    pl->index = malloc(pl->index_cap * sizeof *pl->index);
    if (!pl->b || !pl->index)
        return -1;
    memset(pl->index, 0xff, pl->index_cap * sizeof *pl->index);
    pl->free_head = pl->lru_head = pl->lru_tail = -1;
    for (int32_t i = (int32_t)n_blocks - 1; i >= 0; i--) {
        pl->b[i].prev = pl->b[i].next = -1;
        free_push(pl, i);
    }
    return 0;
}

static void pool_drop_cached(pool *pl)
{
    while (pl->lru_head >= 0) {
        int32_t id = pl->lru_head;
        lru_remove(pl, id);
        index_remove(pl, id);
        free_push(pl, id);
    }
}

/* ---- public ------------------------------------------------------------------ */

int em_kv_create(const em_kv_opts *o, em_kv **out, em_err *err)
{
    *out = NULL;
    if (!o->n_blocks || !o->max_seqs || !o->max_ctx || o->n_blocks > (1u << 28) || o->n_blocks_window > (1u << 28) ||
        (o->window && !o->n_blocks_window))
        return em_err_set(err, EM_EINVAL, "kv: pool of %u blocks (window pool %u, window %u), %u slots, context %u "
                          "is invalid", o->n_blocks, o->n_blocks_window, o->window, o->max_seqs, o->max_ctx);
    em_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return em_err_set(err, EM_ENOMEM, "kv: out of memory");
    kv->o = *o;
    if (!o->window)
        kv->o.n_blocks_window = 0;
    kv->max_blocks = (o->max_ctx + BLK - 1) / BLK;
    kv->n_pools = o->window ? 2 : 1;
    kv->s = calloc(o->max_seqs, sizeof *kv->s);
    kv->scratch = malloc(kv->max_blocks * sizeof *kv->scratch);
    int ok = kv->s && kv->scratch && pool_init(&kv->p[0], o->n_blocks) == 0 &&
             (kv->n_pools == 1 || pool_init(&kv->p[1], o->n_blocks_window) == 0);
    for (uint32_t i = 0; ok && i < o->max_seqs; i++) {
        seq *q = &kv->s[i];
        ok = (q->table[0] = malloc(kv->max_blocks * sizeof(int32_t))) != NULL &&
             (kv->n_pools == 1 || (q->table[1] = malloc(kv->max_blocks * sizeof(int32_t))) != NULL) &&
             (q->hashes = malloc(kv->max_blocks * sizeof(uint64_t))) != NULL;
    }
    if (!ok) {
        em_kv_destroy(kv);
        return em_err_set(err, EM_ENOMEM, "kv: out of memory for %u blocks", o->n_blocks);
    }
    *out = kv;
    return 0;
}

void em_kv_destroy(em_kv *kv)
{
    if (!kv)
        return;
    for (uint32_t i = 0; kv->s && i < kv->o.max_seqs; i++) {
        free(kv->s[i].table[0]);
        free(kv->s[i].table[1]);
        free(kv->s[i].hashes);
    }
    for (int k = 0; k < 2; k++) {
        free(kv->p[k].b);
        free(kv->p[k].index);
    }
    free(kv->s);
    free(kv->scratch);
    free(kv);
}

int em_kv_seq_open(em_kv *kv, int32_t *slot, em_err *err)
{
    for (uint32_t i = 0; i < kv->o.max_seqs; i++) {
        seq *s = &kv->s[i];
        if (s->open)
            continue;
        s->open = 1;
        s->n_blocks = s->len = s->n_hashed = s->w_lo = 0;
        *slot = (int32_t)i;
        return 0;
    }
    return em_err_set(err, EM_EBUSY, "kv: all %u sequence slots are in use", kv->o.max_seqs);
}

/* Release the slot's blocks from index `from` on (both tables), and its
 * window table's entries before `lo` (they hold positions no query of the
 * slot sees again). */
static void release_range(em_kv *kv, seq *s, uint32_t from, uint32_t lo)
{
    for (uint32_t i = from; i < s->n_blocks; i++) {
        release(kv, &kv->p[0], s->table[0][i]);
        if (kv->n_pools == 2 && s->table[1][i] >= 0)
            release(kv, &kv->p[1], s->table[1][i]);
    }
    if (s->n_blocks > from)
        s->n_blocks = from;
    for (uint32_t i = s->w_lo; kv->n_pools == 2 && i < lo && i < s->n_blocks; i++)
        if (s->table[1][i] >= 0) {
            release(kv, &kv->p[1], s->table[1][i]);
            s->table[1][i] = -1;
        }
    if (lo > s->w_lo)
        s->w_lo = lo;
}

void em_kv_seq_close(em_kv *kv, int32_t slot)
{
    seq *s = &kv->s[slot];
    if (!s->open)
        return;
    release_range(kv, s, 0, 0);
    s->open = 0;
    s->n_blocks = s->len = s->n_hashed = s->w_lo = 0;
}

uint32_t em_kv_seq_match(em_kv *kv, int32_t slot, const int32_t *tokens, uint32_t n)
{
    seq *s = &kv->s[slot];
    kv->st.lookups++;
    if (!kv->o.prefix_cache || s->n_blocks || n == 0)
        return s->len;
    uint32_t max = (n - 1) / BLK;
    if (max > kv->max_blocks)
        max = kv->max_blocks;
    /* the main pool: the longest chain of registered blocks */
    uint64_t h = HASH_SEED;
    int32_t parent = -1;
    uint32_t m = 0;
    for (; m < max; m++) {
        uint64_t hi = chain(h, tokens + (size_t)m * BLK);
        int32_t id = index_find(&kv->p[0], hi, parent, 0, tokens + (size_t)m * BLK);
        if (id < 0)
            break;
        s->table[0][m] = id;
        s->hashes[m] = hi;
        h = hi;
        parent = id;
    }
    if (kv->n_pools == 2) {
        /* the window pool: its block i is registered under the main pool's
         * block i - 1 (verified by the chain above), so a window's blocks are
         * found without the earlier ones (released, maybe evicted); the
         * match ends where the blocks the next query's window needs are all
         * there */
        int32_t *w = kv->scratch;
        uint32_t last_miss = UINT32_MAX;   /* the last block before m found missing, UINT32_MAX: none */
        uint32_t best = 0;
        for (uint32_t i = 0; i < m; i++) {
            int32_t anchor = i ? s->table[0][i - 1] : -1;
            w[i] = index_find(&kv->p[1], s->hashes[i], anchor, anchor >= 0 ? kv->p[0].b[anchor].gen : 0,
                              tokens + (size_t)i * BLK);
            if (w[i] < 0)
                last_miss = i;
            if (last_miss == UINT32_MAX || last_miss < window_lo(kv, (i + 1) * BLK))
                best = i + 1;
        }
        m = best;
        uint32_t lo = window_lo(kv, m * BLK);
        s->w_lo = lo;
        for (uint32_t i = 0; i < m; i++) {
            s->table[1][i] = i >= lo ? w[i] : -1;
            if (i >= lo)
                attach(&kv->p[1], w[i]);
        }
    }
    for (uint32_t i = 0; i < m; i++)
        attach(&kv->p[0], s->table[0][i]);
    kv->st.hit_blocks += m;
    s->n_blocks = s->n_hashed = m;
    s->len = m * BLK;
    return s->len;
}

int em_kv_seq_reserve(em_kv *kv, int32_t slot, uint32_t from, uint32_t n,
                      em_kv_copy *copies, uint32_t max_copies, uint32_t *n_copies, em_err *err)
{
    seq *s = &kv->s[slot];
    uint32_t need = (n + BLK - 1) / BLK;
    if (need > kv->max_blocks)
        return em_err_set(err, EM_ERANGE, "kv: %u positions exceed the %u-position context", n,
                          kv->o.max_ctx);
    uint32_t first = from / BLK, lo = window_lo(kv, from);
    /* blocks each pool must supply: the copies of shared blocks written into,
     * the new blocks past the table, and (window) the holes in the window */
    uint32_t take[2] = { 0, 0 }, cow = 0;
    for (uint32_t k = 0; k < kv->n_pools; k++) {
        if (k && lo < s->w_lo)   /* (window: positions the queries read were released) */
            return em_err_set(err, EM_ESTATE, "kv: slot %d's positions before %u are gone (sliding window); "
                              "it cannot write from %u", slot, s->w_lo * BLK, from);
        for (uint32_t i = k ? lo : first; i < need; i++) {
            int32_t id = i < s->n_blocks ? s->table[k][i] : -1;
            int shared = id >= 0 && i >= first && kv->p[k].b[id].ref > 1;
            take[k] += id < 0 || shared;
            cow += shared;
        }
        if (take[k] > kv->p[k].n_free + kv->p[k].n_cached)
            return em_err_set(err, EM_EBUSY, "kv: %u blocks needed, %u available%s", take[k],
                              kv->p[k].n_free + kv->p[k].n_cached, k ? " (the sliding-window pool)" : "");
    }
    if (cow && *n_copies + cow > max_copies)
        return em_err_set(err, EM_ERANGE, "kv: no room for %u block copies", cow);
    for (uint32_t k = 0; k < kv->n_pools; k++) {
        pool *pl = &kv->p[k];
        for (uint32_t i = k ? lo : first; i < need; i++) {
            int32_t id = i < s->n_blocks ? s->table[k][i] : -1;
            if (id < 0) {
                s->table[k][i] = take_block(kv, pl);
                continue;
            }
            if (i < first)
                continue;                          /* (window: read, not written) */
            blk *b = &pl->b[id];
            if (b->ref > 1) {                      /* shared: copy before writing */
                int32_t nid = take_block(kv, pl);
                copies[(*n_copies)++] = (em_kv_copy){ id, nid, k };
                b->ref--;
                s->table[k][i] = nid;
                kv->st.cow_copies++;
            } else if (b->registered) {            /* ours alone: its content changes */
                index_remove(pl, id);
                b->gen++;
            }
        }
    }
    if (first < s->n_hashed)
        s->n_hashed = first;                   /* hashes from here on are rebuilt at commit */
    if (need > s->n_blocks)
        s->n_blocks = need;
    return 0;
}

void em_kv_seq_commit(em_kv *kv, int32_t slot, const int32_t *tokens, uint32_t n)
{
    seq *s = &kv->s[slot];
    s->len = n;
    uint32_t full = n / BLK;
    if (full > s->n_blocks)
        full = s->n_blocks;
    for (uint32_t i = s->n_hashed; kv->o.prefix_cache && i < full; i++) {
        const int32_t *t = tokens + (size_t)i * BLK;
        uint64_t h = chain(i ? s->hashes[i - 1] : HASH_SEED, t);
        int32_t id = s->table[0][i], parent = i ? s->table[0][i - 1] : -1;
        blk *b = &kv->p[0].b[id];
        if (!b->registered && index_find(&kv->p[0], h, parent, 0, t) < 0) {
            b->hash = h;
            b->parent = parent;
            memcpy(b->toks, t, sizeof b->toks);
            index_insert(&kv->p[0], id);
        }
        /* the window pool's block, anchored to the main pool's previous one */
        int32_t wid = kv->n_pools == 2 ? s->table[1][i] : -1;
        uint32_t pgen = parent >= 0 ? kv->p[0].b[parent].gen : 0;
        if (wid >= 0 && !kv->p[1].b[wid].registered && index_find(&kv->p[1], h, parent, pgen, t) < 0) {
            blk *wb = &kv->p[1].b[wid];
            wb->hash = h;
            wb->parent = parent;
            wb->parent_gen = pgen;
            memcpy(wb->toks, t, sizeof wb->toks);
            index_insert(&kv->p[1], wid);
        }
        s->hashes[i] = h;
        s->n_hashed = i + 1;
    }
    /* window: what no later query sees goes back (to the cache when registered) */
    release_range(kv, s, s->n_blocks, window_lo(kv, n));
}

void em_kv_seq_truncate(em_kv *kv, int32_t slot, uint32_t n)
{
    seq *s = &kv->s[slot];
    release_range(kv, s, (n + BLK - 1) / BLK, 0);
    if (s->len > n)
        s->len = n;
    if (s->n_hashed > n / BLK)
        s->n_hashed = n / BLK;
}

int em_kv_seq_fork(em_kv *kv, int32_t src, int32_t *dst, em_err *err)
{
    int rc = em_kv_seq_open(kv, dst, err);
    if (rc)
        return rc;
    seq *a = &kv->s[src], *b = &kv->s[*dst];
    memcpy(b->hashes, a->hashes, a->n_hashed * sizeof *a->hashes);
    for (uint32_t k = 0; k < kv->n_pools; k++) {
        memcpy(b->table[k], a->table[k], a->n_blocks * sizeof *a->table[k]);
        for (uint32_t i = 0; i < a->n_blocks; i++)
            if (a->table[k][i] >= 0)
                kv->p[k].b[a->table[k][i]].ref++;
    }
    b->n_blocks = a->n_blocks;
    b->len = a->len;
    b->n_hashed = a->n_hashed;
    b->w_lo = a->w_lo;
    return 0;
}

const int32_t *em_kv_seq_table(const em_kv *kv, int32_t slot) { return kv->s[slot].table[0]; }
const int32_t *em_kv_seq_table_window(const em_kv *kv, int32_t slot) { return kv->s[slot].table[1]; }
uint32_t em_kv_seq_blocks(const em_kv *kv, int32_t slot) { return kv->s[slot].n_blocks; }
uint32_t em_kv_seq_len(const em_kv *kv, int32_t slot) { return kv->s[slot].len; }
uint32_t em_kv_available(const em_kv *kv) { return kv->p[0].n_free + kv->p[0].n_cached; }

void em_kv_drop_cached(em_kv *kv)
{
    for (uint32_t k = 0; k < kv->n_pools; k++)
        pool_drop_cached(&kv->p[k]);
}

void em_kv_get_stats(const em_kv *kv, em_kv_stats *st)
{
    *st = kv->st;
    st->n_blocks = kv->p[0].n_blocks;
    st->free = kv->p[0].n_free;
    st->cached = kv->p[0].n_cached;
    st->used = kv->p[0].n_used;
    st->w_blocks = kv->p[1].n_blocks;
    st->w_free = kv->p[1].n_free;
    st->w_cached = kv->p[1].n_cached;
    st->w_used = kv->p[1].n_used;
    st->tokens_live = st->tokens_alloc = 0;
    for (uint32_t i = 0; i < kv->o.max_seqs; i++) {
        if (!kv->s[i].open)
            continue;
        st->tokens_live += kv->s[i].len;
        st->tokens_alloc += (uint64_t)kv->s[i].n_blocks * BLK;
    }
}

static int pool_check(const em_kv *kv, uint32_t k, em_err *err)
{
    const pool *pl = &kv->p[k];
    uint32_t n = pl->n_blocks, nf = 0, nc = 0, nu = 0, nreg = 0;
    const char *what = k ? "kv window pool" : "kv";
    int32_t *refs = calloc(n ? n : 1, sizeof *refs);
    int rc = 0;
    if (!refs)
        return em_err_set(err, EM_ENOMEM, "kv: out of memory");
    for (uint32_t i = 0; i < kv->o.max_seqs && !rc; i++) {
        const seq *s = &kv->s[i];
        for (uint32_t j = 0; s->open && j < s->n_blocks && !rc; j++) {
            int32_t id = s->table[k][j];
            if (k == 1 && (j < s->w_lo) != (id == -1))
                rc = em_err_set(err, EM_ESTATE, "%s: slot %u holds block %d at %u (released before %u)", what, i,
                                id, j, s->w_lo);
            else if (id >= 0 && (uint32_t)id < n)
                refs[id]++;
            else if (id != -1)
                rc = em_err_set(err, EM_ESTATE, "%s: slot %u holds block %d at %u", what, i, id, j);
        }
    }
    for (uint32_t i = 0; i < n && !rc; i++) {
        const blk *b = &pl->b[i];
        nf += b->state == B_FREE;
        nc += b->state == B_CACHED;
        nu += b->state == B_USED;
        nreg += b->registered;
        if (b->state == B_USED && b->ref != refs[i])
            rc = em_err_set(err, EM_ESTATE, "%s: block %u has %d references, tables hold %d", what, i, b->ref,
                            refs[i]);
        else if (b->state != B_USED && refs[i])
            rc = em_err_set(err, EM_ESTATE, "%s: block %u is in a table but not in use", what, i);
        else if (b->state == B_CACHED && !b->registered)
            rc = em_err_set(err, EM_ESTATE, "%s: cached block %u is not in the prefix index", what, i);
        else if (b->state == B_FREE && b->registered)
            rc = em_err_set(err, EM_ESTATE, "%s: free block %u is still in the prefix index", what, i);
    }
    uint32_t in_index = 0;
    for (uint32_t i = 0; i < pl->index_cap && !rc; i++) {
        if (pl->index[i] < 0)
            continue;
        in_index++;
        const blk *b = &pl->b[pl->index[i]];
        if (index_find(pl, b->hash, b->parent, b->parent_gen, b->toks) < 0)
            rc = em_err_set(err, EM_ESTATE, "%s: index entry %u cannot be found again", what, i);
    }
    if (!rc && (nf != pl->n_free || nc != pl->n_cached || nu != pl->n_used || nf + nc + nu != n))
        rc = em_err_set(err, EM_ESTATE, "%s: counts free %u/%u cached %u/%u used %u/%u of %u", what, nf,
                        pl->n_free, nc, pl->n_cached, nu, pl->n_used, n);
    if (!rc && in_index != nreg)
        rc = em_err_set(err, EM_ESTATE, "%s: %u blocks registered, %u in the index", what, nreg, in_index);
    free(refs);
    return rc;
}

int em_kv_check(const em_kv *kv, em_err *err)
{
    int rc = 0;
    for (uint32_t k = 0; k < kv->n_pools && !rc; k++)
        rc = pool_check(kv, k, err);
    return rc;
}
