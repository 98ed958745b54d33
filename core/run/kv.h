/* kv.h — the KV cache's block pool, seen from the host: which device block
 * holds which positions of which sequence.
 *
 * The device memory (core/gpu/forward.c) is one pool of n_blocks blocks of
 * EM_KV_BLOCK positions each, covering all layers' K and V. em_kv hands
 * blocks to sequences (each sequence slot has a block table), counts
 * references so that sequences can share blocks, and keeps a prefix cache:
 * a full block is known by the hash of all token ids from the start of its
 * sequence to its end (chained xxhash, verified against the stored ids and
 * the parent block, so a hash collision can never alias two prefixes). When
 * a sequence ends, its registered full blocks stay cached until the pool
 * needs them (least recently used first); a new sequence with the same
 * prefix attaches them instead of recomputing.
 *
 * A model with sliding-window layers (window > 0) keeps those layers' K/V
 * in a second pool of n_blocks_window blocks: each slot has a second table,
 * whose entries for positions no later query of the slot sees (before the
 * last `window` positions of what is committed) are released at commit
 * (-1 in the table; a registered block stays cached). The main pool holds
 * the other layers for the whole context. A window block is registered in
 * the prefix cache under the main pool's block before it, so a cached
 * prefix is found when the main pool has all of it and the window pool the
 * blocks its last window needs.
 *
 * Invariant, checked by em_kv_check() for each pool: free + cached + used =
 * n_blocks, where used blocks have references, cached ones have none but
 * are in the prefix cache, free ones neither.
 *
 * Not thread-safe: one owner (the scheduler thread) calls everything. All
 * pointers passed in are borrowed for the call. */
#ifndef EM_KV_H
#define EM_KV_H

#include <stdint.h>

#include "core/err.h"

/* Positions per KV block: the unit of the pool, of prefix sharing and of
 * every block table (the attention kernels' BLK is the same 16). */
#define EM_KV_BLOCK 16

/* The first block a query at position pos reads under a sliding window of
 * `window` positions (its own included; 0: no window, block 0): the one
 * holding pos + 1 - window. */
static inline uint32_t em_kv_window_first_block(uint32_t window, uint32_t pos)
{
    return window && pos + 1 > window ? (pos + 1 - window) / EM_KV_BLOCK : 0;
}

/* The element type of the device's K and V rows (--kv-type). */
typedef enum { EM_KV_F16 = 0, EM_KV_Q8_0 = 1 } em_kv_type;

typedef struct em_kv em_kv;

typedef struct {
    uint32_t n_blocks;      /* pool size */
    uint32_t max_seqs;      /* sequence slots */
    uint32_t max_ctx;       /* positions per sequence (table length = ceil(max_ctx / 16)) */
    int      prefix_cache;  /* 1: keep and share full blocks by prefix */
    uint32_t window;        /* the sliding window (positions a query sees), 0: none */
    uint32_t n_blocks_window; /* the window pool's size (with window) */
} em_kv_opts;

/* A block copy the device must make before the next step writes (copy on
 * write of a shared block). */
typedef struct {
    int32_t  src, dst;
    uint32_t pool;   /* 0: the main pool, 1: the window pool */
} em_kv_copy;

typedef struct {
    uint32_t n_blocks, free, cached, used;
    uint64_t lookups;       /* prefix lookups (one per em_kv_seq_match call) */
    uint64_t hit_blocks;    /* blocks attached from the cache */
    uint64_t evictions;     /* cached blocks reclaimed for new data */
    uint64_t cow_copies;    /* shared blocks copied before a write */
    uint64_t tokens_live;   /* committed positions of the open slots */
    uint64_t tokens_alloc;  /* positions of the blocks those slots hold (main pool) */
    uint32_t w_blocks, w_free, w_cached, w_used;   /* the window pool (0 without one) */
} em_kv_stats;

int  em_kv_create(const em_kv_opts *o, em_kv **out, em_err *err);
void em_kv_destroy(em_kv *kv);   /* accepts NULL */

/* Take a free sequence slot (EM_EBUSY when all are in use). The slot starts
 * empty: no blocks, length 0. */
int em_kv_seq_open(em_kv *kv, int32_t *slot, em_err *err);

/* Release the slot and its blocks: registered full blocks become cached
 * (with prefix caching on), the others free. */
void em_kv_seq_close(em_kv *kv, int32_t slot);

/* Attach the longest cached prefix of tokens[0..n) that is made of whole
 * blocks, to an empty slot. At most (n - 1) / EM_KV_BLOCK blocks are
 * attached, so that at least one token is always left to compute (it gives
 * the logits). Returns the number of positions now holding valid K/V. */
uint32_t em_kv_seq_match(em_kv *kv, int32_t slot, const int32_t *tokens, uint32_t n);

/* Make positions [0, n) of the slot writable: allocate blocks up to
 * ceil(n / 16), evicting cached blocks least recently used first, and
 * copy-on-write any shared block that positions [from, n) write into
 * (a block registered in the prefix cache and not shared is unregistered
 * instead, its content is about to change). With a window, the window
 * table from the window of position `from` on (EM_ESTATE when positions
 * it needs were released: from must not go below what was committed by
 * more than the commit kept). Copies are appended to copies[*n_copies]
 * (room for max_copies; EM_ERANGE if short). EM_EBUSY, with nothing
 * changed, when a pool cannot supply the blocks. */
int em_kv_seq_reserve(em_kv *kv, int32_t slot, uint32_t from, uint32_t n,
                      em_kv_copy *copies, uint32_t max_copies, uint32_t *n_copies, em_err *err);

/* Record that positions [0, n) hold the K/V of tokens[0..n) (the slot's
 * whole history), register every newly full block in the prefix cache, and
 * (window) release the window blocks before the window of position n. */
void em_kv_seq_commit(em_kv *kv, int32_t slot, const int32_t *tokens, uint32_t n);

/* Shrink the slot to n positions (releasing whole blocks past them). With
 * a window, to no less than the last commit's window reaches back: below
 * it, the positions the next queries read are gone and the slot's next
 * reserve is refused (the scheduler truncates only to what it committed). */
void em_kv_seq_truncate(em_kv *kv, int32_t slot, uint32_t n);

/* Open a new slot sharing every block of src (references counted); writes
 * into a shared block are copied first (em_kv_seq_reserve). */
int em_kv_seq_fork(em_kv *kv, int32_t src, int32_t *dst, em_err *err);

/* The slot's block table (borrowed; valid until the next call that changes
 * the slot) and its number of blocks. */
const int32_t *em_kv_seq_table(const em_kv *kv, int32_t slot);
/* The window pool's table (same indexing; -1 where released), NULL without a window. */
const int32_t *em_kv_seq_table_window(const em_kv *kv, int32_t slot);
uint32_t       em_kv_seq_blocks(const em_kv *kv, int32_t slot);
uint32_t       em_kv_seq_len(const em_kv *kv, int32_t slot);   /* committed positions */

/* Blocks a new allocation can get now from the main pool: free + evictable cached. */
uint32_t em_kv_available(const em_kv *kv);

/* Forget every cached block (the prefix cache's finished prefixes): each
 * goes back to the free list, out of the index. Blocks in use stay. For a
 * device that was lost and rebuilt: what the cache pointed at is gone. */
void em_kv_drop_cached(em_kv *kv);

void em_kv_get_stats(const em_kv *kv, em_kv_stats *st);

/* Verify the invariants (counts, reference counts against the tables, the
 * hash index); EM_ESTATE with the first violation in err. For tests. */
int em_kv_check(const em_kv *kv, em_err *err);

#endif
