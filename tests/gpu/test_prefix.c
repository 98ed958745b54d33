/* test_prefix.c — the paged KV cache on the real forward pass: logits of a
 * sequence that reuses a cached prefix equal those computed without reuse
 * (NMSE < 1e-6), and a forked sequence that appends into a shared block
 * (copy on write on the device) continues exactly like a fresh one; for the
 * f16 and the q8_0 KV cache; no block leaked. After the reuse and after the
 * fork, single-token steps run the decode attention over the shared blocks
 * (in slots other than 0, so a kernel that reads the wrong block table
 * fails).
 * usage: test_prefix MODEL (relative to the shared folder) */
#include <stdint.h>

#include "core/gpu/forward.h"
#include "core/gpu/kparams.h"
#include "core/model/model.h"
#include "core/run/kv.h"
#include "tests/gpu/gpu_util.h"

static em_fwd *f;
static em_kv *kv;
static uint32_t V;

/* Feed tokens[from..n) of slot (positions from..n-1) in one step; logits of
 * every fed position into lg[n - from][V]. */
static int feed(int32_t slot, const int32_t *tokens, uint32_t from, uint32_t n, float *lg)
{
    em_err e = { 0 };
    em_kv_copy cp[16];
    uint32_t ncp = 0;
    int rc = em_kv_seq_reserve(kv, slot, from, n, cp, 16, &ncp, &e);
    if (!rc && ncp) {
        int32_t src[16], dst[16];
        for (uint32_t i = 0; i < ncp; i++) {
            src[i] = cp[i].src;
            dst[i] = cp[i].dst;
        }
        rc = em_fwd_copy_blocks(f, 0, src, dst, ncp, &e);
    }
    uint32_t T = n - from;
    int32_t pos[256], seq[256], rows[256];
    const int32_t *tables[4] = { 0 };
    tables[slot] = em_kv_seq_table(kv, slot);
    for (uint32_t i = 0; i < T; i++) {
        pos[i] = (int32_t)(from + i);
        seq[i] = slot;
        rows[i] = (int32_t)i;
    }
    if (!rc) {
        em_fwd_batch b = { T, tokens + from, pos, seq, T, rows, tables, NULL, NULL, NULL, 0, NULL };
        rc = em_fwd_step(f, &b, lg, &e);
    }
    if (!rc)
        em_kv_seq_commit(kv, slot, tokens, n);
    CHECKF(rc == 0, "feed: %s", e.msg);
    return rc;
}

static double nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return num / den;
}

static void run(em_vk *vk, const em_model *m, uint32_t kv_type)
{
    em_err e = { 0 };
    em_fwd_opts fo = { .max_tokens = 256, .max_seqs = 4, .max_ctx = 256, .n_blocks = 64,
                       .max_logits = 256, .kv_type = kv_type };
    if (em_fwd_create(vk, m, &fo, &f, &e)) {
        CHECKF(0, "%s", e.msg);
        return;
    }
    em_kv_opts ko = { 64, 4, 256, 1, 0, 0 };
    CHECK(em_kv_create(&ko, &kv, &e) == 0);
    int32_t px[120], py[120];
    for (int i = 0; i < 120; i++) {
        px[i] = (int32_t)(3 + (i * 37) % (V - 3));
        py[i] = i < 100 ? px[i] : (int32_t)(3 + (i * 11 + 5) % (V - 3));
    }
    float *la = malloc((size_t)256 * V * sizeof *la), *lb = malloc((size_t)256 * V * sizeof *lb);

    /* A: the whole of px; closed, its full blocks stay cached */
    int32_t a, b, c;
    CHECK(em_kv_seq_open(kv, &a, NULL) == 0);
    CHECK(em_kv_seq_match(kv, a, px, 120) == 0);
    feed(a, px, 0, 120, la);
    em_kv_seq_close(kv, a);
    /* B: py reuses px's first 96 positions (6 whole blocks of the 100 shared);
     * an empty sequence holds slot 0, so B is in slot 1 */
    int32_t z;
    CHECK(em_kv_seq_open(kv, &z, NULL) == 0);
    CHECK(em_kv_seq_open(kv, &b, NULL) == 0);
    CHECK(b == 1);
    uint32_t reused = em_kv_seq_match(kv, b, py, 120);
    CHECKF(reused == 96, "reused %u positions", reused);
    /* the rest as a prompt chunk, then one token per step: decode attention
     * over reused blocks */
    feed(b, py, reused, 112, lb);
    for (uint32_t i = 112; i < 120; i++)
        feed(b, py, i, i + 1, lb + (size_t)(i - reused) * V);
    em_kv_seq_close(kv, b);
    em_kv_seq_close(kv, z);
    /* reference: py from scratch in a pool without a cache */
    em_kv_destroy(kv);
    em_kv_opts ko2 = { 64, 4, 256, 0, 0, 0 };
    CHECK(em_kv_create(&ko2, &kv, &e) == 0);
    CHECK(em_kv_seq_open(kv, &c, NULL) == 0);
    feed(c, py, 0, 120, la);
    double err = nmse(lb, la + (size_t)96 * V, (size_t)24 * V);
    CHECKF(err < 1e-6, "%s KV: logits after a reused prefix differ: nmse %.3e", em_fwd_kv_type_name(kv_type), err);
    printf("%s KV: reused 96 positions, nmse %.3e against no reuse\n", em_fwd_kv_type_name(kv_type), err);

    /* fork at 40 (block 2 half full), both append 8 different tokens: the
     * shared block is copied before the fork writes into it */
    em_kv_seq_close(kv, c);
    int32_t p0, p1, t0[48], t1[48];
    for (int i = 0; i < 48; i++) {
        t0[i] = px[i];
        t1[i] = i < 40 ? px[i] : py[100 + (i - 40)];
    }
    CHECK(em_kv_seq_open(kv, &p0, NULL) == 0);
    feed(p0, t0, 0, 40, la);
    CHECK(em_kv_seq_fork(kv, p0, &p1, NULL) == 0);
    for (uint32_t i = 40; i < 48; i++)   /* one token per step: decode; the first copies block 2 */
        feed(p1, t1, i, i + 1, lb + (size_t)(i - 40) * V);
    feed(p0, t0, 40, 44, la);            /* a chunk, then single steps */
    for (uint32_t i = 44; i < 48; i++)
        feed(p0, t0, i, i + 1, la + (size_t)(i - 40) * V);
    em_kv_stats st;
    em_kv_get_stats(kv, &st);
    CHECK(st.cow_copies == 1);
    /* fresh runs of t0 and t1 */
    float *ref = malloc((size_t)256 * V * sizeof *ref);
    int32_t r0;
    em_kv_seq_close(kv, p0);
    em_kv_seq_close(kv, p1);
    CHECK(em_kv_seq_open(kv, &r0, NULL) == 0);
    feed(r0, t1, 0, 48, ref);
    double e1 = nmse(lb, ref + (size_t)40 * V, (size_t)8 * V);
    em_kv_seq_close(kv, r0);
    CHECK(em_kv_seq_open(kv, &r0, NULL) == 0);
    feed(r0, t0, 0, 48, ref);
    double e0 = nmse(la, ref + (size_t)40 * V, (size_t)8 * V);
    em_kv_seq_close(kv, r0);
    CHECKF(e0 < 1e-6 && e1 < 1e-6, "%s KV: forked sequences differ from fresh ones: %.3e %.3e",
           em_fwd_kv_type_name(kv_type), e0, e1);
    em_kv_get_stats(kv, &st);
    CHECK(st.used == 0 && st.free + st.cached == 64);
    CHECK(em_kv_check(kv, &e) == 0);
    free(ref);
    free(la);
    free(lb);
    em_kv_destroy(kv);
    em_fwd_destroy(f);
    kv = NULL;
    f = NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 || !test_shared_dir()) {
        printf("SKIP: shared folder absent\n");
        return 77;
    }
    em_model *m = NULL;
    em_err e = { 0 };
    if (em_model_open(test_shared(argv[1]), &m, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    V = em_model_hparams(m)->n_vocab;
    em_vk *vk = gpu_open("prefix", NULL);
    run(vk, m, EM_KV_F16);
    if (em_model_hparams(m)->head_dim % 32 == 0)
        run(vk, m, EM_KV_Q8_0);
    gpu_close(vk);
    em_model_close(m);
    return test_summary("prefix");
}
