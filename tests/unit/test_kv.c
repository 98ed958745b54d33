/* test_kv.c — the KV block pool: allocation, prefix matching (chained hashes
 * verified by parent and ids), LRU eviction, copy on write after a fork,
 * truncation, the busy answer when the pool is full, and a randomized run of
 * thousands of operations that checks the invariants after every one and
 * that the prefix cache never hands out a block holding other tokens; and
 * the window pool of sliding-window models (released blocks, matches from a
 * prefix's last window), alone and under the randomized run. */
#include <stdint.h>

#include "core/run/kv.h"
#include "tests/common/testutil.h"

#define B EM_KV_BLOCK

static em_kv *mk(uint32_t blocks, uint32_t seqs, uint32_t ctx, int cache)
{
    em_kv_opts o = { blocks, seqs, ctx, cache, 0, 0 };
    em_kv *kv = NULL;
    em_err e = { 0 };
    CHECKF(em_kv_create(&o, &kv, &e) == 0, "%s", e.msg);
    return kv;
}

static void invariants(em_kv *kv, const char *where)
{
    em_err e = { 0 };
    CHECKF(em_kv_check(kv, &e) == 0, "%s: %s", where, e.msg);
}

static void test_basics(void)
{
    em_kv *kv = mk(8, 2, 128, 0);
    int32_t a = -1, b = -1, c = -1;
    em_kv_copy cp[4];
    uint32_t ncp = 0;
    em_err e = { 0 };
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0 && em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(em_kv_seq_open(kv, &c, &e) == EM_EBUSY && strstr(e.msg, "slots"));
    CHECK(em_kv_seq_reserve(kv, a, 0, 17, cp, 4, &ncp, NULL) == 0 && em_kv_seq_blocks(kv, a) == 2);
    CHECK(em_kv_seq_reserve(kv, a, 17, 32, cp, 4, &ncp, NULL) == 0 && em_kv_seq_blocks(kv, a) == 2);
    CHECK(em_kv_seq_reserve(kv, b, 0, 6 * B, cp, 4, &ncp, NULL) == 0);
    CHECK(em_kv_available(kv) == 0);
    CHECK(em_kv_seq_reserve(kv, a, 32, 33, cp, 4, &ncp, &e) == EM_EBUSY && em_kv_seq_blocks(kv, a) == 2);
    CHECK(em_kv_seq_reserve(kv, a, 0, 129, cp, 4, &ncp, &e) == EM_ERANGE);
    invariants(kv, "full pool");
    em_kv_seq_truncate(kv, b, 2 * B + 1);
    CHECK(em_kv_seq_blocks(kv, b) == 3 && em_kv_available(kv) == 3);
    em_kv_seq_close(kv, a);
    em_kv_seq_close(kv, b);
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECK(st.free == 8 && st.used == 0 && st.cached == 0 && ncp == 0);
    invariants(kv, "closed");
    em_kv_destroy(kv);
}

static void test_prefix(void)
{
    em_kv *kv = mk(16, 4, 256, 1);
    int32_t toks[80], other[80];
    for (int i = 0; i < 80; i++) {
        toks[i] = 100 + i;
        other[i] = i < B ? 999 : 100 + i;     /* differs in block 0 only */
    }
    int32_t a, b;
    em_kv_copy cp[4];
    uint32_t ncp = 0;
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0);
    CHECK(em_kv_seq_match(kv, a, toks, 70) == 0);
    CHECK(em_kv_seq_reserve(kv, a, 0, 70, cp, 4, &ncp, NULL) == 0);
    em_kv_seq_commit(kv, a, toks, 70);          /* 4 full blocks registered */
    int32_t ta[5];
    memcpy(ta, em_kv_seq_table(kv, a), sizeof ta);
    em_kv_seq_close(kv, a);
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECK(st.cached == 4 && st.free == 12);

    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    /* 49 tokens: at most (49 - 1) / 16 = 3 blocks, one token left to compute */
    CHECK(em_kv_seq_match(kv, b, toks, 49) == 48);
    CHECK(memcmp(em_kv_seq_table(kv, b), ta, 3 * sizeof(int32_t)) == 0);
    em_kv_seq_close(kv, b);
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(em_kv_seq_match(kv, b, toks, 48) == 32);
    em_kv_seq_close(kv, b);
    /* same ids from block 1 on but another block 0: nothing matches */
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(em_kv_seq_match(kv, b, other, 80) == 0);
    em_kv_seq_close(kv, b);
    /* a change inside block 2 stops the match there */
    int32_t t2[80];
    memcpy(t2, toks, sizeof t2);
    t2[2 * B + 5] = 7;
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(em_kv_seq_match(kv, b, t2, 80) == 2 * B);
    invariants(kv, "partial match");
    em_kv_seq_close(kv, b);
    em_kv_get_stats(kv, &st);
    CHECK(st.lookups == 5 && st.hit_blocks == 3 + 2 + 2);

    /* LRU: fill the pool so that cached blocks are evicted, oldest first */
    int32_t c;
    CHECK(em_kv_seq_open(kv, &c, NULL) == 0);
    CHECK(em_kv_seq_reserve(kv, c, 0, 12 * B, cp, 4, &ncp, NULL) == 0);   /* uses the 12 free */
    CHECK(em_kv_seq_reserve(kv, c, 12 * B, 13 * B, cp, 4, &ncp, NULL) == 0);  /* evicts one */
    em_kv_get_stats(kv, &st);
    CHECK(st.evictions == 1 && st.cached == 3);
    invariants(kv, "after eviction");
    em_kv_seq_close(kv, c);
    /* block 3 of the chain was used least recently (the later matches only
     * attached blocks 0-2, which moved them to the recent end): it went
     * first, so the chain now ends after block 2 */
    int32_t d;
    CHECK(em_kv_seq_open(kv, &d, NULL) == 0);
    CHECK(em_kv_seq_match(kv, d, toks, 70) == 3 * B);
    em_kv_seq_close(kv, d);
    invariants(kv, "end");

    /* a device rebuilt: the cache forgets every prefix, a sequence in use keeps its blocks */
    int32_t e;
    CHECK(em_kv_seq_open(kv, &e, NULL) == 0);
    CHECK(em_kv_seq_reserve(kv, e, 0, 2 * B, cp, 4, &ncp, NULL) == 0);
    em_kv_get_stats(kv, &st);
    uint32_t cached = st.cached, used = st.used;
    CHECK(cached > 0 && used == 2);
    em_kv_drop_cached(kv);
    em_kv_get_stats(kv, &st);
    CHECK(st.cached == 0 && st.used == 2 && st.free == 16 - 2);
    invariants(kv, "cache dropped");
    em_kv_seq_close(kv, e);
    CHECK(em_kv_seq_open(kv, &d, NULL) == 0);
    CHECK(em_kv_seq_match(kv, d, toks, 70) == 0);   /* nothing left to match */
    em_kv_seq_close(kv, d);
    invariants(kv, "after the drop");
    em_kv_destroy(kv);
}

static void test_fork_cow(void)
{
    em_kv *kv = mk(8, 3, 128, 1);
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = i;
    int32_t a, b;
    em_kv_copy cp[4];
    uint32_t ncp = 0;
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0);
    CHECK(em_kv_seq_reserve(kv, a, 0, 20, cp, 4, &ncp, NULL) == 0);
    em_kv_seq_commit(kv, a, toks, 20);
    CHECK(em_kv_seq_fork(kv, a, &b, NULL) == 0 && em_kv_seq_len(kv, b) == 20);
    CHECK(memcmp(em_kv_seq_table(kv, a), em_kv_seq_table(kv, b), 2 * sizeof(int32_t)) == 0);
    invariants(kv, "forked");
    /* b appends at position 20: block 1 is shared, so it is copied */
    CHECK(em_kv_seq_reserve(kv, b, 20, 21, cp, 4, &ncp, NULL) == 0 && ncp == 1);
    CHECK(cp[0].src == em_kv_seq_table(kv, a)[1] && cp[0].dst == em_kv_seq_table(kv, b)[1]);
    CHECK(em_kv_seq_table(kv, a)[0] == em_kv_seq_table(kv, b)[0]);   /* block 0 still shared */
    invariants(kv, "copied");
    /* a writes into its own registered block 0 (a rewind): it is unregistered */
    ncp = 0;
    CHECK(em_kv_seq_reserve(kv, a, 3, 20, cp, 4, &ncp, NULL) == 0 && ncp == 1);   /* block 0 shared */
    em_kv_seq_close(kv, a);
    em_kv_seq_close(kv, b);
    invariants(kv, "closed");
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECK(st.used == 0 && st.free + st.cached == 8 && st.cow_copies == 2);
    em_kv_destroy(kv);
}

/* Random operations against a shadow of what each block holds. */
/* Thousands of random operations; window > 0: with a window pool of nbw
 * blocks, whose content is shadowed too (what the queries of each step can
 * see must be the sequence's own tokens, through matches, copies and
 * releases). */
static void test_random(uint32_t window, uint32_t nbw)
{
    enum { NB = 48, NS = 6, CTX = 160, OPS = 20000, NBW_MAX = 64 };
    unsigned long long seed = 2024;
    em_kv_opts o = { NB, NS, CTX, 1, window, nbw };
    em_kv *kv = NULL;
    em_err ce = { 0 };
    CHECKF(em_kv_create(&o, &kv, &ce) == 0, "%s", ce.msg);
    if (!kv || nbw > NBW_MAX)
        return;
    int32_t content[NB][B];          /* shadow: token ids in each block (-1 unknown) */
    int32_t content_w[NBW_MAX][B];   /* and in each window-pool block */
    memset(content, 0xff, sizeof content);
    memset(content_w, 0xff, sizeof content_w);
    int32_t toks[NS][CTX];
    uint32_t len[NS];
    int open[NS] = { 0 };
    int32_t slot_of[NS];
    em_kv_copy cp[64];
    int bad_hits = 0, bad_window = 0, gone = 0;
    for (int it = 0; it < OPS; it++) {
        int k = (int)(test_rand(&seed) % NS);
        int op = (int)(test_rand(&seed) % 10);
        if (!open[k]) {
            int32_t s;
            if (em_kv_seq_open(kv, &s, NULL))
                continue;
            slot_of[k] = s;
            open[k] = 1;
            /* prompts from a small alphabet of prefixes so that matches happen */
            uint32_t base = (uint32_t)(test_rand(&seed) % 3);
            for (int i = 0; i < CTX; i++)
                toks[k][i] = (int32_t)(base * 1000 + (i < 40 ? i : (int)(test_rand(&seed) % 4)));
            uint32_t n = 1 + (uint32_t)(test_rand(&seed) % 100);
            len[k] = em_kv_seq_match(kv, s, toks[k], n);
            for (uint32_t b = 0; b < len[k] / B; b++) {
                int32_t id = em_kv_seq_table(kv, s)[b];
                bad_hits += memcmp(content[id], toks[k] + b * B, sizeof content[id]) != 0;
            }
            /* the window pool: the blocks of the next query's window */
            uint32_t lo = window && len[k] + 1 > window ? (len[k] + 1 - window) / B : 0;
            for (uint32_t b = lo; window && b < len[k] / B; b++) {
                int32_t id = em_kv_seq_table_window(kv, s)[b];
                bad_hits += id < 0 || memcmp(content_w[id], toks[k] + b * B, sizeof content_w[id]) != 0;
            }
            continue;
        }
        int32_t s = slot_of[k];
        if (op < 6) {                                   /* grow (prefill or decode) */
            uint32_t n = len[k] + 1 + (op < 3 ? (uint32_t)(test_rand(&seed) % 30) : 0);
            if (n > CTX)
                n = CTX;
            uint32_t ncp = 0;
            em_err re = { 0 };
            int rc = em_kv_seq_reserve(kv, s, len[k], n, cp, 64, &ncp, &re);
            gone += rc == EM_ESTATE;
            if (rc == 0) {
                for (uint32_t c = 0; c < ncp; c++) {
                    if (cp[c].pool)
                        memcpy(content_w[cp[c].dst], content_w[cp[c].src], sizeof content_w[0]);
                    else
                        memcpy(content[cp[c].dst], content[cp[c].src], sizeof content[0]);
                }
                const int32_t *t = em_kv_seq_table(kv, s), *tw = em_kv_seq_table_window(kv, s);
                for (uint32_t p = len[k]; p < n; p++) {   /* "the step writes" */
                    content[t[p / B]][p % B] = toks[k][p];
                    if (window)
                        content_w[tw[p / B]][p % B] = toks[k][p];
                }
                /* "the step's queries read": every position some query's window sees */
                for (uint32_t p = len[k] + 1 > window ? len[k] + 1 - window : 0; window && p < n; p++)
                    bad_window += tw[p / B] < 0 || content_w[tw[p / B]][p % B] != toks[k][p];
                em_kv_seq_commit(kv, s, toks[k], n);
                len[k] = n;
            }
        } else if (op < 7) {
            /* (with a window: back to a committed length the window still
             * covers, as the scheduler does after speculation; lower, the
             * slot's next reserve is refused, counted in `gone`) */
            uint32_t n = len[k] ? (uint32_t)(test_rand(&seed) % len[k]) : 0;
            if (window && op == 6 && it % 2)
                n = len[k];
            em_kv_seq_truncate(kv, s, n);
            len[k] = n;
        } else if (op < 8) {
            int f = -1;
            for (int j = 0; j < NS; j++)
                if (!open[j])
                    f = j;
            int32_t d;
            if (f >= 0 && em_kv_seq_fork(kv, s, &d, NULL) == 0) {
                open[f] = 1;
                slot_of[f] = d;
                memcpy(toks[f], toks[k], sizeof toks[k]);
                len[f] = len[k];
            }
        } else {
            em_kv_seq_close(kv, s);
            open[k] = 0;
        }
        em_err e = { 0 };
        if (em_kv_check(kv, &e)) {
            CHECKF(0, "window %u: after operation %d: %s", window, it, e.msg);
            break;
        }
    }
    CHECKF(bad_hits == 0, "window %u: %d cached blocks held other tokens than asked for", window, bad_hits);
    CHECKF(bad_window == 0, "window %u: %d positions a query sees held other tokens", window, bad_window);
    for (int k = 0; k < NS; k++)
        if (open[k])
            em_kv_seq_close(kv, slot_of[k]);
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECKF(st.used == 0 && st.free + st.cached == NB, "leak: free %u cached %u used %u", st.free,
           st.cached, st.used);
    CHECKF(st.w_used == 0 && st.w_free + st.w_cached == st.w_blocks && st.w_blocks == (window ? nbw : 0),
           "window pool leak: free %u cached %u used %u of %u", st.w_free, st.w_cached, st.w_used, st.w_blocks);
    CHECK(st.hit_blocks > 100 && st.evictions > 10 && st.cow_copies > 10);
    printf("random (window %u): %llu lookups, %llu hit blocks, %llu evictions, %llu copies, %d reserves after a "
           "truncation below the window refused\n", window, (unsigned long long)st.lookups,
           (unsigned long long)st.hit_blocks, (unsigned long long)st.evictions, (unsigned long long)st.cow_copies,
           gone);
    em_kv_destroy(kv);
}

/* The window pool step by step: a slot holds only its window's blocks, the
 * released ones stay cached, a prefix is found from its last window alone
 * (the earlier window blocks evicted), a match stops where the window pool
 * lacks a block, and a write below the kept window is refused. */
static void test_window(void)
{
    em_kv_opts o = { 64, 4, 512, 1, 40, 12 };   /* window 40: at most 4 blocks of it live per slot here */
    em_kv *kv = NULL;
    em_err e = { 0 };
    CHECKF(em_kv_create(&o, &kv, &e) == 0, "%s", e.msg);
    if (!kv)
        return;
    int32_t toks[200];
    for (int i = 0; i < 200; i++)
        toks[i] = 7 + i;
    int32_t a = -1, b = -1;
    em_kv_copy cp[8];
    uint32_t ncp = 0;
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0);
    /* 160 positions in steps of 32: the window table keeps blocks from (n + 1 - 40) / 16 on */
    for (uint32_t n = 0; n < 160; n += 32) {
        CHECKF(em_kv_seq_reserve(kv, a, n, n + 32, cp, 8, &ncp, &e) == 0, "reserve %u: %s", n, e.msg);
        em_kv_seq_commit(kv, a, toks, n + 32);
        invariants(kv, "window growth");
    }
    const int32_t *tw = em_kv_seq_table_window(kv, a);
    uint32_t live = 0;
    for (uint32_t i = 0; i < 10; i++)
        live += tw[i] >= 0;
    CHECKF(live == 3 && tw[6] < 0 && tw[7] >= 0 && tw[9] >= 0, "window table: %u blocks live, 6: %d, 7: %d",
           live, tw[6], tw[7]);   /* (160 + 1 - 40) / 16 = 7 */
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECKF(st.used == 10 && st.w_used == 3 && st.w_cached == 7, "pools: main %u used, window %u used %u cached",
           st.used, st.w_used, st.w_cached);
    CHECK(em_kv_seq_reserve(kv, a, 100, 120, cp, 8, &ncp, &e) == EM_ESTATE && strstr(e.msg, "sliding window"));
    em_kv_seq_close(kv, a);
    /* the same 160 tokens + more: all 10 blocks found (the match keeps one token) */
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECKF(em_kv_seq_match(kv, b, toks, 170) == 160, "match: %u", em_kv_seq_len(kv, b));
    tw = em_kv_seq_table_window(kv, b);
    CHECKF(tw[6] < 0 && tw[7] >= 0 && tw[8] >= 0 && tw[9] >= 0, "matched window table 6..9: %d %d %d %d", tw[6],
           tw[7], tw[8], tw[9]);
    invariants(kv, "window match");
    em_kv_seq_close(kv, b);
    /* evict the window pool's early blocks (other tokens fill it): the
     * prefix is still found from its last window */
    int32_t other[200];
    for (int i = 0; i < 200; i++)
        other[i] = 5000 + i;
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0);
    for (uint32_t n = 0; n < 112; n += 16) {
        CHECK(em_kv_seq_reserve(kv, a, n, n + 16, cp, 8, &ncp, NULL) == 0);
        em_kv_seq_commit(kv, a, other, n + 16);
    }
    em_kv_seq_close(kv, a);
    em_kv_get_stats(kv, &st);
    CHECKF(st.evictions > 0, "no window block was evicted (%llu)", (unsigned long long)st.evictions);
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    uint32_t m = em_kv_seq_match(kv, b, toks, 170);
    CHECKF(m == 160 || m == 144 || m == 128, "match after eviction: %u (the window blocks 7..9 or earlier ends)", m);
    invariants(kv, "match after eviction");
    em_kv_seq_close(kv, b);
    /* a prefix whose last window is gone entirely: a shorter match or none */
    em_kv_drop_cached(kv);
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(em_kv_seq_match(kv, b, toks, 170) == 0);
    em_kv_seq_close(kv, b);
    invariants(kv, "dropped");
    em_kv_destroy(kv);
}

int main(void)
{
    test_basics();
    test_prefix();
    test_fork_cow();
    test_random(0, 0);
    test_random(24, 40);
    test_window();
    return test_summary("kv");
}
