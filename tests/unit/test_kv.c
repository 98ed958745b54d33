/* test_kv.c — the KV block pool: allocation, prefix matching (chained hashes
 * verified by parent and ids), LRU eviction, copy on write after a fork,
 * truncation, the busy answer when the pool is full, and a randomized run of
 * thousands of operations that checks the invariants after every one and
 * that the prefix cache never hands out a block holding other tokens. */
#include <stdint.h>

#include "core/run/kv.h"
#include "tests/common/testutil.h"

#define B EM_KV_BLOCK

static em_kv *mk(uint32_t blocks, uint32_t seqs, uint32_t ctx, int cache)
{
    em_kv_opts o = { blocks, seqs, ctx, cache };
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
static void test_random(void)
{
    enum { NB = 48, NS = 6, CTX = 160, OPS = 20000 };
    unsigned long long seed = 2024;
    em_kv *kv = mk(NB, NS, CTX, 1);
    int32_t content[NB][B];          /* shadow: token ids in each block (-1 unknown) */
    memset(content, 0xff, sizeof content);
    int32_t toks[NS][CTX];
    uint32_t len[NS];
    int open[NS] = { 0 };
    int32_t slot_of[NS];
    em_kv_copy cp[64];
    int bad_hits = 0;
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
            continue;
        }
        int32_t s = slot_of[k];
        if (op < 6) {                                   /* grow (prefill or decode) */
            uint32_t n = len[k] + 1 + (op < 3 ? (uint32_t)(test_rand(&seed) % 30) : 0);
            if (n > CTX)
                n = CTX;
            uint32_t ncp = 0;
            if (em_kv_seq_reserve(kv, s, len[k], n, cp, 64, &ncp, NULL) == 0) {
                for (uint32_t c = 0; c < ncp; c++)
                    memcpy(content[cp[c].dst], content[cp[c].src], sizeof content[0]);
                const int32_t *t = em_kv_seq_table(kv, s);
                for (uint32_t p = len[k]; p < n; p++)     /* "the step writes" */
                    content[t[p / B]][p % B] = toks[k][p];
                em_kv_seq_commit(kv, s, toks[k], n);
                len[k] = n;
            }
        } else if (op < 7) {
            uint32_t n = len[k] ? (uint32_t)(test_rand(&seed) % len[k]) : 0;
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
            CHECKF(0, "after operation %d: %s", it, e.msg);
            break;
        }
    }
    CHECKF(bad_hits == 0, "%d cached blocks held other tokens than asked for", bad_hits);
    for (int k = 0; k < NS; k++)
        if (open[k])
            em_kv_seq_close(kv, slot_of[k]);
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECKF(st.used == 0 && st.free + st.cached == NB, "leak: free %u cached %u used %u", st.free,
           st.cached, st.used);
    CHECK(st.hit_blocks > 100 && st.evictions > 10 && st.cow_copies > 10);
    printf("random: %llu lookups, %llu hit blocks, %llu evictions, %llu copies\n",
           (unsigned long long)st.lookups, (unsigned long long)st.hit_blocks,
           (unsigned long long)st.evictions, (unsigned long long)st.cow_copies);
    em_kv_destroy(kv);
}

int main(void)
{
    test_basics();
    test_prefix();
    test_fork_cow();
    test_random();
    return test_summary("kv");
}
