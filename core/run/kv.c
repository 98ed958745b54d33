/* kv.c — the KV block pool: block tables per sequence slot, reference
 * counts, copy on write, and the prefix cache (chained xxhash of token ids,
 * verified against stored ids and parent blocks; LRU eviction). Host-side
 * bookkeeping only; the device copies are done by core/gpu/forward.c. */
#include "core/run/kv.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>


#define BLK        EM_KV_BLOCK
#define HASH_SEED  0x656d626572ull   /* "ember" */

enum { B_FREE, B_USED, B_CACHED };

typedef struct {
    int32_t  ref;          /* table references */
    int32_t  parent;       /* previous block of the registered prefix, -1 for the first */
    uint64_t hash;         /* chained hash when registered */
    int32_t  prev, next;   /* free list (next only) or LRU list of cached blocks */
    uint8_t  state;
    uint8_t  registered;   /* in the hash index */
    int32_t  toks[BLK];    /* the block's token ids when registered */
} blk;

typedef struct {
    int      open;
    uint32_t n_blocks;     /* blocks in the table */
    uint32_t len;          /* committed positions */
    uint32_t n_hashed;     /* leading full blocks whose chained hash is known */
    uint64_t *hashes;      /* [max_blocks]: chained hash of block i (i < n_hashed) */
    int32_t *table;        /* [max_blocks] */
} seq;

struct em_kv {
    em_kv_opts o;
    uint32_t   max_blocks;      /* per sequence */
    blk       *b;               /* [n_blocks] */
    seq       *s;               /* [max_seqs] */
    int32_t    free_head;
    uint32_t   n_free, n_cached, n_used;
    int32_t    lru_head, lru_tail;   /* least recently used first */
    int32_t   *index;           /* hash index: block ids, -1 empty; [index_cap] */
    uint32_t   index_cap;       /* power of two >= 2 * n_blocks */
    em_kv_stats st;
};

/* ---- lists ------------------------------------------------------------------ */

static void free_push(em_kv *kv, int32_t id)
{
    blk *b = &kv->b[id];
    b->state = B_FREE;
    b->next = kv->free_head;
    kv->free_head = id;
    kv->n_free++;
}

static int32_t free_pop(em_kv *kv)
{
    int32_t id = kv->free_head;
    if (id >= 0) {
        kv->free_head = kv->b[id].next;
        kv->n_free--;
    }
    return id;
}

static void lru_push(em_kv *kv, int32_t id)   /* most recently used end */
{
    blk *b = &kv->b[id];
    b->state = B_CACHED;
    b->prev = kv->lru_tail;
    b->next = -1;
    if (kv->lru_tail >= 0)
        kv->b[kv->lru_tail].next = id;
    else
        kv->lru_head = id;
    kv->lru_tail = id;
    kv->n_cached++;
}

static void lru_remove(em_kv *kv, int32_t id)
{
    blk *b = &kv->b[id];
    if (b->prev >= 0)
        kv->b[b->prev].next = b->next;
    else
        kv->lru_head = b->next;
    if (b->next >= 0)
        kv->b[b->next].prev = b->prev;
    else
        kv->lru_tail = b->prev;
    b->prev = b->next = -1;
    kv->n_cached--;
}

/* ---- hash index (linear probing, backward-shift deletion) -------------------- */

static uint32_t slot_of(const em_kv *kv, uint64_t h)
{
    return (uint32_t)(h ^ (h >> 29)) & (kv->index_cap - 1);
}

static void index_insert(em_kv *kv, int32_t id)
{
    uint32_t i = slot_of(kv, kv->b[id].hash);
    while (kv->index[i] >= 0)
        i = (i + 1) & (kv->index_cap - 1);
    kv->index[i] = id;
    kv->b[id].registered = 1;
}

static void index_remove(em_kv *kv, int32_t id)
{
    uint32_t mask = kv->index_cap - 1, i = slot_of(kv, kv->b[id].hash);
    while (kv->index[i] != id)
        i = (i + 1) & mask;
    kv->index[i] = -1;
    /* shift later members of the cluster back into the hole */
    for (uint32_t j = (i + 1) & mask; kv->index[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = slot_of(kv, kv->b[kv->index[j]].hash);
        int moves = (j > i) ? (home <= i || home > j) : (home <= i && home > j);
        if (moves) {
            kv->index[i] = kv->index[j];
            kv->index[j] = -1;
            i = j;
        }
    }
    kv->b[id].registered = 0;
}

/* The registered block holding exactly tokens toks[0..16) after parent. */
static int32_t index_find(const em_kv *kv, uint64_t h, int32_t parent, const int32_t *toks)
{
    uint32_t mask = kv->index_cap - 1;
    for (uint32_t i = slot_of(kv, h); kv->index[i] >= 0; i = (i + 1) & mask) {
        const blk *b = &kv->b[kv->index[i]];
        if (b->hash == h && b->parent == parent && memcmp(b->toks, toks, sizeof b->toks) == 0)
            return kv->index[i];
    }
    return -1;
}

static uint64_t chain(uint64_t prev, const int32_t *toks)
{
    return XXH3_64bits_withSeed(toks, BLK * sizeof *toks, prev);
}

/* ---- blocks ------------------------------------------------------------------ */

/* A block for new data: free first, else the least recently used cached one. */
static int32_t take_block(em_kv *kv)
{
    int32_t id = free_pop(kv);
    if (id < 0 && kv->lru_head >= 0) {
        id = kv->lru_head;
        lru_remove(kv, id);
        index_remove(kv, id);
        kv->st.evictions++;
    }
    if (id >= 0) {
        blk *b = &kv->b[id];
        b->state = B_USED;
        b->ref = 1;
        b->registered = 0;
        b->parent = -1;
        kv->n_used++;
    }
    return id;
}

static void release(em_kv *kv, int32_t id)
{
    blk *b = &kv->b[id];
    if (--b->ref > 0)
        return;
    kv->n_used--;
    if (b->registered && kv->o.prefix_cache)
        lru_push(kv, id);
    else {
        if (b->registered)
            index_remove(kv, id);
        free_push(kv, id);
    }
}

static void attach(em_kv *kv, int32_t id)
{
    blk *b = &kv->b[id];
    if (b->state == B_CACHED) {
        lru_remove(kv, id);
        b->state = B_USED;
        b->ref = 0;
        kv->n_used++;
    }
    b->ref++;
}

/* ---- public ------------------------------------------------------------------ */

int em_kv_create(const em_kv_opts *o, em_kv **out, em_err *err)
{
    *out = NULL;
    if (!o->n_blocks || !o->max_seqs || !o->max_ctx || o->n_blocks > (1u << 28))
        return em_err_set(err, EM_EINVAL, "kv: pool of %u blocks, %u slots, context %u is invalid",
                          o->n_blocks, o->max_seqs, o->max_ctx);
    em_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return em_err_set(err, EM_ENOMEM, "kv: out of memory");
    kv->o = *o;
    kv->max_blocks = (o->max_ctx + BLK - 1) / BLK;
    kv->index_cap = 16;
    while (kv->index_cap < 2 * o->n_blocks)
        kv->index_cap *= 2;
    kv->b = calloc(o->n_blocks, sizeof *kv->b);
    kv->s = calloc(o->max_seqs, sizeof *kv->s);
    kv->index = malloc(kv->index_cap * sizeof *kv->index);
    int ok = kv->b && kv->s && kv->index;
    for (uint32_t i = 0; ok && i < o->max_seqs; i++)
        ok = (kv->s[i].table = malloc(kv->max_blocks * sizeof(int32_t))) != NULL &&
             (kv->s[i].hashes = malloc(kv->max_blocks * sizeof(uint64_t))) != NULL;
    if (!ok) {
        em_kv_destroy(kv);
        return em_err_set(err, EM_ENOMEM, "kv: out of memory for %u blocks", o->n_blocks);
    }
    memset(kv->index, 0xff, kv->index_cap * sizeof *kv->index);
    kv->free_head = kv->lru_head = kv->lru_tail = -1;
    for (int32_t i = (int32_t)o->n_blocks - 1; i >= 0; i--) {
        kv->b[i].prev = kv->b[i].next = -1;
        free_push(kv, i);
    }
    *out = kv;
    return 0;
}

void em_kv_destroy(em_kv *kv)
{
    if (!kv)
        return;
    for (uint32_t i = 0; kv->s && i < kv->o.max_seqs; i++) {
        free(kv->s[i].table);
        free(kv->s[i].hashes);
    }
    free(kv->s);
    free(kv->b);
    free(kv->index);
    free(kv);
}

int em_kv_seq_open(em_kv *kv, int32_t *slot, em_err *err)
{
    for (uint32_t i = 0; i < kv->o.max_seqs; i++) {
        seq *s = &kv->s[i];
        if (s->open)
            continue;
        s->open = 1;
        s->n_blocks = s->len = s->n_hashed = 0;
        *slot = (int32_t)i;
        return 0;
    }
    return em_err_set(err, EM_EBUSY, "kv: all %u sequence slots are in use", kv->o.max_seqs);
}

void em_kv_seq_close(em_kv *kv, int32_t slot)
{
    seq *s = &kv->s[slot];
    if (!s->open)
        return;
    for (uint32_t i = 0; i < s->n_blocks; i++)
        release(kv, s->table[i]);
    s->open = 0;
    s->n_blocks = s->len = s->n_hashed = 0;
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
    uint64_t h = HASH_SEED;
    int32_t parent = -1;
    uint32_t i = 0;
    for (; i < max; i++) {
        uint64_t hi = chain(h, tokens + (size_t)i * BLK);
        int32_t id = index_find(kv, hi, parent, tokens + (size_t)i * BLK);
        if (id < 0)
            break;
        attach(kv, id);
        s->table[i] = id;
        s->hashes[i] = hi;
        h = hi;
        parent = id;
    }
    kv->st.hit_blocks += i;
    s->n_blocks = s->n_hashed = i;
    s->len = i * BLK;
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
    uint32_t first = from / BLK, cow = 0;
    for (uint32_t i = first; i < s->n_blocks && i < need; i++)
        cow += kv->b[s->table[i]].ref > 1;
    uint32_t fresh = need > s->n_blocks ? need - s->n_blocks : 0;
    if (fresh + cow > kv->n_free + kv->n_cached)
        return em_err_set(err, EM_EBUSY, "kv: %u blocks needed, %u available", fresh + cow,
                          kv->n_free + kv->n_cached);
    if (cow && *n_copies + cow > max_copies)
        return em_err_set(err, EM_ERANGE, "kv: no room for %u block copies", cow);
    for (uint32_t i = first; i < s->n_blocks && i < need; i++) {
        int32_t id = s->table[i];
        blk *b = &kv->b[id];
        if (b->ref > 1) {                      /* shared: copy before writing */
            int32_t nid = take_block(kv);
            copies[(*n_copies)++] = (em_kv_copy){ id, nid };
            b->ref--;
            s->table[i] = nid;
            kv->st.cow_copies++;
        } else if (b->registered) {            /* ours alone: its content changes */
            index_remove(kv, id);
        }
    }
    if (first < s->n_hashed)
        s->n_hashed = first;                   /* hashes from here on are rebuilt at commit */
    for (uint32_t i = s->n_blocks; i < need; i++)
        s->table[i] = take_block(kv);
    if (need > s->n_blocks)
        s->n_blocks = need;
    return 0;
}

void em_kv_seq_commit(em_kv *kv, int32_t slot, const int32_t *tokens, uint32_t n)
{
    seq *s = &kv->s[slot];
    s->len = n;
    if (!kv->o.prefix_cache)
        return;
    uint32_t full = n / BLK;
    if (full > s->n_blocks)
        full = s->n_blocks;
    for (uint32_t i = s->n_hashed; i < full; i++) {
        const int32_t *t = tokens + (size_t)i * BLK;
        uint64_t h = chain(i ? s->hashes[i - 1] : HASH_SEED, t);
        int32_t id = s->table[i], parent = i ? s->table[i - 1] : -1;
        blk *b = &kv->b[id];
        if (!b->registered && index_find(kv, h, parent, t) < 0) {
            b->hash = h;
            b->parent = parent;
            memcpy(b->toks, t, sizeof b->toks);
            index_insert(kv, id);
        }
        s->hashes[i] = h;
        s->n_hashed = i + 1;
    }
}

void em_kv_seq_truncate(em_kv *kv, int32_t slot, uint32_t n)
{
    seq *s = &kv->s[slot];
    uint32_t keep = (n + BLK - 1) / BLK;
    while (s->n_blocks > keep)
        release(kv, s->table[--s->n_blocks]);
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
    memcpy(b->table, a->table, a->n_blocks * sizeof *a->table);
    memcpy(b->hashes, a->hashes, a->n_hashed * sizeof *a->hashes);
    for (uint32_t i = 0; i < a->n_blocks; i++)
        kv->b[a->table[i]].ref++;
    b->n_blocks = a->n_blocks;
    b->len = a->len;
    b->n_hashed = a->n_hashed;
    return 0;
}

const int32_t *em_kv_seq_table(const em_kv *kv, int32_t slot) { return kv->s[slot].table; }
uint32_t em_kv_seq_blocks(const em_kv *kv, int32_t slot) { return kv->s[slot].n_blocks; }
uint32_t em_kv_seq_len(const em_kv *kv, int32_t slot) { return kv->s[slot].len; }
uint32_t em_kv_available(const em_kv *kv) { return kv->n_free + kv->n_cached; }

void em_kv_drop_cached(em_kv *kv)
{
    while (kv->lru_head >= 0) {
        int32_t id = kv->lru_head;
        lru_remove(kv, id);
        index_remove(kv, id);
        free_push(kv, id);
    }
}

void em_kv_get_stats(const em_kv *kv, em_kv_stats *st)
{
    *st = kv->st;
    st->n_blocks = kv->o.n_blocks;
    st->free = kv->n_free;
    st->cached = kv->n_cached;
    st->used = kv->n_used;
    st->tokens_live = st->tokens_alloc = 0;
    for (uint32_t i = 0; i < kv->o.max_seqs; i++) {
        if (!kv->s[i].open)
            continue;
        st->tokens_live += kv->s[i].len;
        st->tokens_alloc += (uint64_t)kv->s[i].n_blocks * BLK;
    }
}

int em_kv_check(const em_kv *kv, em_err *err)
{
    uint32_t n = kv->o.n_blocks, nf = 0, nc = 0, nu = 0, nreg = 0;
    int32_t *refs = calloc(n, sizeof *refs);
    int rc = 0;
    if (!refs)
        return em_err_set(err, EM_ENOMEM, "kv: out of memory");
    for (uint32_t i = 0; i < kv->o.max_seqs; i++) {
        const seq *s = &kv->s[i];
        for (uint32_t k = 0; s->open && k < s->n_blocks; k++)
            refs[s->table[k]]++;
    }
    for (uint32_t i = 0; i < n && !rc; i++) {
        const blk *b = &kv->b[i];
        nf += b->state == B_FREE;
        nc += b->state == B_CACHED;
        nu += b->state == B_USED;
        nreg += b->registered;
        if (b->state == B_USED && b->ref != refs[i])
            rc = em_err_set(err, EM_ESTATE, "kv: block %u has %d references, tables hold %d", i, b->ref,
                            refs[i]);
        else if (b->state != B_USED && refs[i])
            rc = em_err_set(err, EM_ESTATE, "kv: block %u is in a table but not in use", i);
        else if (b->state == B_CACHED && !b->registered)
            rc = em_err_set(err, EM_ESTATE, "kv: cached block %u is not in the prefix index", i);
        else if (b->state == B_FREE && b->registered)
            rc = em_err_set(err, EM_ESTATE, "kv: free block %u is still in the prefix index", i);
    }
    uint32_t in_index = 0;
    for (uint32_t i = 0; i < kv->index_cap && !rc; i++) {
        if (kv->index[i] < 0)
            continue;
        in_index++;
        if (index_find(kv, kv->b[kv->index[i]].hash, kv->b[kv->index[i]].parent,
                       kv->b[kv->index[i]].toks) < 0)
            rc = em_err_set(err, EM_ESTATE, "kv: index entry %u cannot be found again", i);
    }
    if (!rc && (nf != kv->n_free || nc != kv->n_cached || nu != kv->n_used || nf + nc + nu != n))
        rc = em_err_set(err, EM_ESTATE, "kv: counts free %u/%u cached %u/%u used %u/%u of %u", nf,
                        kv->n_free, nc, kv->n_cached, nu, kv->n_used, n);
    if (!rc && in_index != nreg)
        rc = em_err_set(err, EM_ESTATE, "kv: %u blocks registered, %u in the index", nreg, in_index);
    free(refs);
    return rc;
}
