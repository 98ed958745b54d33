/* test_encoder.c — the encoder and the pooled rows on the real forward
 * pass. all-MiniLM-L6-v2 (bert, F16): the twelve golden texts
 * (../shared/golden/embeddings/all-MiniLM-L6-v2.json: the Hugging Face
 * tokenizer's ids, sentence-transformers' vectors from the F32 weights)
 * batched several to a step in varied slots, their mean-pooled rows equal
 * the CPU reference's (em_ref_encode + em_pool: cosine >= 0.99999, max
 * difference < 2e-3 of the row's largest value) and the golden vectors
 * (cosine >= 0.999); the first token's rows with token types (a reranker's
 * pair, types 1 on the second text) equal the reference's; batches that
 * break the encoder's rules (or pass its learned positions) are refused. A decoder's pooled rows (output
 * norm applied) over a prompt cut into two steps sum to its reference
 * mean and last token (em_ref_embed). usage: test_encoder */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/model/model.h"
#include "core/run/encode.h"
#include "tests/gpu/gpu_util.h"

#define MAXT 256
#define MAXS 8

static double cosine(const float *a, const float *b, uint32_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb + 1e-300);
}

/* max |a - b| over max |b| */
static double rel_diff(const float *a, const float *b, uint32_t n)
{
    double d = 0, m = 0;
    for (uint32_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / (m + 1e-30);
}

static json_t *array_in(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_loads(json_string_value(v), 0, NULL) : json_incref(v);
}

typedef struct {
    int32_t  ids[128];
    uint8_t  types[128];
    uint32_t n;
    float    gold[384];
} text;

static void check_bert(em_vk *vk)
{
    em_err e = { 0 };
    em_model *m = NULL;
    REQUIRE_V(em_model_open(test_shared("models/all-MiniLM-L6-v2-F16.gguf"), &m, &e) == 0);
    const em_hparams *hp = em_model_hparams(m);
    const uint32_t E = hp->n_embd;
    em_fwd_opts o = { .max_tokens = MAXT, .max_seqs = MAXS, .max_ctx = 512 };
    em_fwd *f = NULL, *f2 = NULL;
    CHECK_OK(em_fwd_create(vk, m, &o, &f, &e), e);
    em_fwd_opts o2 = { .max_tokens = 1024, .max_seqs = 1, .max_ctx = 1024 };   /* (a context past the positions) */
    CHECK_OK(em_fwd_create(vk, m, &o2, &f2, &e), e);
    json_error_t je;
    json_t *gold = json_load_file(test_shared("golden/embeddings/all-MiniLM-L6-v2.json"), 0, &je);
    REQUIRE_V(f && json_is_array(gold) && json_array_size(gold) == 12);
    text *tx = calloc(13, sizeof *tx);
    REQUIRE_V(tx);
    size_t nt = 0, i;
    json_t *c;
    json_array_foreach(gold, i, c) {
        json_t *ids = array_in(c, "ids"), *want = array_in(c, "embedding");
        REQUIRE_V(json_is_array(ids) && json_array_size(ids) <= 128 && json_array_size(want) == E);
        tx[nt].n = (uint32_t)json_array_size(ids);
        for (uint32_t j = 0; j < tx[nt].n; j++)
            tx[nt].ids[j] = (int32_t)json_integer_value(json_array_get(ids, j));
        for (uint32_t d = 0; d < E; d++)
            tx[nt].gold[d] = (float)json_number_value(json_array_get(want, d));
        nt++;
        json_decref(ids);
        json_decref(want);
    }
    /* a 13th: a reranker's pair, texts 0 and 1 ([CLS] a [SEP] b [SEP]), b's tokens of type 1 */
    text *pr = &tx[12];
    memcpy(pr->ids, tx[0].ids, tx[0].n * sizeof *pr->ids);
    memcpy(pr->ids + tx[0].n, tx[1].ids + 1, (tx[1].n - 1) * sizeof *pr->ids);
    pr->n = tx[0].n + tx[1].n - 1;
    for (uint32_t j = tx[0].n; j < pr->n; j++)
        pr->types[j] = 1;

    /* every text through the reference: hidden states, then mean and first */
    float *ref_mean = malloc(13 * E * sizeof *ref_mean), *ref_cls = malloc(13 * E * sizeof *ref_cls);
    float *h = malloc(128 * E * sizeof *h);
    REQUIRE_V(ref_mean && ref_cls && h);
    for (size_t t = 0; t < 13; t++) {
        CHECK_OK(em_ref_encode(m, tx[t].ids, t == 12 ? tx[t].types : NULL, tx[t].n, h, &e), e);
        em_pool(EM_POOL_MEAN, h, tx[t].n, E, ref_mean + t * E);
        em_pool(EM_POOL_CLS, h, tx[t].n, E, ref_cls + t * E);
    }

    /* steps of up to MAXS texts and MAXT tokens, slots in reverse order (a
     * kernel that confused slots with runs would mix texts); each text
     * pooled twice: its mean (its whole run) and its first token */
    int32_t tok[MAXT], pos[MAXT], seq[MAXT], pool[4 * MAXS];
    uint8_t types[MAXT];
    size_t t0 = 0;
    int steps = 0;
    while (t0 < 13) {
        uint32_t T = 0, ns = 0;
        size_t t1 = t0;
        while (t1 < 13 && ns + 1 <= MAXS / 2 && T + tx[t1].n <= MAXT) {
            for (uint32_t j = 0; j < tx[t1].n; j++) {
                tok[T + j] = tx[t1].ids[j];
                pos[T + j] = (int32_t)j;
                seq[T + j] = (int32_t)(MAXS - 1 - ns);
                types[T + j] = tx[t1].types[j];
            }
            pool[2 * ns] = (int32_t)T;
            pool[2 * ns + 1] = (int32_t)tx[t1].n;
            T += tx[t1].n;
            ns++;
            t1++;
        }
        for (uint32_t k = 0; k < ns; k++) {   /* the first-token spans after the ns means */
            pool[2 * (ns + k)] = pool[2 * k];
            pool[2 * (ns + k) + 1] = 1;
        }
        em_fwd_batch b = { T, tok, pos, seq, 0, NULL, NULL, NULL, NULL, types, 2 * ns, pool };
        int rc = em_fwd_step(f, &b, NULL, &e);
        CHECKF(rc == 0, "encoder step: %s", e.msg);
        if (rc)
            break;
        for (uint32_t k = 0; k < ns; k++) {
            size_t t = t0 + k;
            const float *sum = em_fwd_pooled_row(f, k), *first = em_fwd_pooled_row(f, ns + k);
            float mean[384];
            for (uint32_t d = 0; d < E; d++)
                mean[d] = sum[d] / (float)tx[t].n;
            double cr = cosine(mean, ref_mean + t * E, E), dr = rel_diff(mean, ref_mean + t * E, E);
            double cf = cosine(first, ref_cls + t * E, E), df = rel_diff(first, ref_cls + t * E, E);
            CHECKF(cr >= 0.99999 && dr < 2e-3, "text %zu: mean vs reference cosine %.7f, diff %.2e", t, cr, dr);
            CHECKF(cf >= 0.99999 && df < 2e-3, "text %zu: first token vs reference cosine %.7f, diff %.2e", t, cf,
                   df);
            if (t < 12) {
                double cg = cosine(mean, tx[t].gold, E);
                CHECKF(cg >= 0.999, "text %zu: vs golden cosine %.6f", t, cg);
            }
        }
        t0 = t1;
        steps++;
    }
    CHECK(steps >= 2);

    /* the rules: a sequence not from position 0, logits, a type past the
     * model's, a span past the step */
    int32_t p1[2] = { 1, 2 }, s1[2] = { 0, 0 }, t2[2] = { 101, 102 }, row = 0, sp[2] = { 0, 3 };
    uint8_t ty[2] = { 0, 2 };
    em_fwd_batch bad = { 2, t2, p1, s1, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL };
    CHECK(em_fwd_step(f, &bad, NULL, &e) == EM_EINVAL && strstr(e.msg, "whole"));
    p1[0] = 0;
    p1[1] = 1;
    bad.n_logits = 1;
    bad.logit_rows = &row;
    float lg[1];
    CHECK(em_fwd_step(f, &bad, lg, &e) == EM_EINVAL && strstr(e.msg, "logits"));
    bad.n_logits = 0;
    bad.types = ty;
    CHECK(em_fwd_step(f, &bad, NULL, &e) == EM_ERANGE && strstr(e.msg, "type"));
    bad.types = NULL;
    bad.n_pool = 1;
    bad.pool = sp;
    CHECK(em_fwd_step(f, &bad, NULL, &e) == EM_ERANGE && strstr(e.msg, "span"));
    sp[1] = 2;
    CHECK_OK(em_fwd_step(f, &bad, NULL, &e), e);
    /* a sequence past the model's 512 learned positions (the context allows it) */
    {
        static int32_t lt[520], lp[520], ls[520];
        for (int k = 0; k < 520; k++) {
            lt[k] = 1000;
            lp[k] = k;
            ls[k] = 0;
        }
        em_fwd_batch lb = { 520, lt, lp, ls, 0, NULL, NULL, NULL, NULL, NULL, 0, NULL };
        CHECK(em_fwd_step(f2, &lb, NULL, &e) == EM_ERANGE && strstr(e.msg, "512"));
    }

    free(ref_mean);
    free(ref_cls);
    free(h);
    free(tx);
    json_decref(gold);
    em_fwd_destroy(f);
    em_fwd_destroy(f2);
    em_model_close(m);
}

/* A decoder: a 20-token prompt in slot 2 over two steps (12 + 8), pooled
 * spans of each step summed on the host: the mean and the last token equal
 * em_ref_embed's (output-normed hidden states). */
static void check_decoder(em_vk *vk, const char *rel)
{
    em_err e = { 0 };
    em_model *m = NULL;
    REQUIRE_V(em_model_open(test_shared(rel), &m, &e) == 0);
    const uint32_t E = em_model_hparams(m)->n_embd, N = 20, V = em_model_hparams(m)->n_vocab;
    em_fwd_opts o = { .max_tokens = 32, .max_seqs = 4, .max_ctx = 64 };
    em_fwd *f = NULL;
    CHECK_OK(em_fwd_create(vk, m, &o, &f, &e), e);
    REQUIRE_V(f);
    int32_t ids[20], table[4] = { 3, 1, 0, 2 }, pos[20], seq[20], row;
    for (uint32_t i = 0; i < N; i++) {
        ids[i] = (int32_t)((i * 37 + 5) % V);
        pos[i] = (int32_t)i;
        seq[i] = 2;
    }
    const int32_t *tables[4] = { NULL, NULL, table, NULL };
    float *sum = calloc(E, sizeof *sum), *last = calloc(E, sizeof *last), *want = malloc(E * sizeof *want);
    float *lg = malloc(V * sizeof *lg);
    REQUIRE_V(sum && last && want && lg);
    uint32_t cut[3] = { 0, 12, N };
    for (int k = 0; k < 2; k++) {
        uint32_t T = cut[k + 1] - cut[k];
        int32_t sp[4] = { 0, (int32_t)T, (int32_t)T - 1, 1 };
        row = (int32_t)T - 1;
        /* (the last step asks for the logits too: pooled rows and logits in one step) */
        em_fwd_batch b = { T, ids + cut[k], pos + cut[k], seq + cut[k], (uint32_t)k, &row, tables, NULL, NULL,
                           NULL, 2, sp };
        int rc = em_fwd_step(f, &b, k ? lg : NULL, &e);
        CHECKF(rc == 0, "decoder step %d: %s", k, e.msg);
        if (rc)
            break;
        for (uint32_t d = 0; d < E; d++)
            sum[d] += em_fwd_pooled_row(f, 0)[d];
        if (k == 1)
            memcpy(last, em_fwd_pooled_row(f, 1), E * sizeof *last);
    }
    for (uint32_t d = 0; d < E; d++)
        sum[d] /= (float)N;
    CHECK_OK(em_ref_embed(m, ids, N, EM_POOL_MEAN, 0, want, &e), e);
    double cm = cosine(sum, want, E), dm = rel_diff(sum, want, E);
    CHECKF(cm >= 0.9999 && dm < 1e-2, "%s: mean vs reference cosine %.7f, diff %.2e", rel, cm, dm);
    CHECK_OK(em_ref_embed(m, ids, N, EM_POOL_LAST, 0, want, &e), e);
    double cl = cosine(last, want, E), dl = rel_diff(last, want, E);
    CHECKF(cl >= 0.9999 && dl < 1e-2, "%s: last vs reference cosine %.7f, diff %.2e", rel, cl, dl);
    free(sum);
    free(last);
    free(want);
    free(lg);
    em_fwd_destroy(f);
    em_model_close(m);
}

int main(void)
{
    if (!test_shared_dir()) {
        printf("SKIP: no shared folder\n");
        return 77;
    }
    em_vk *vk = gpu_open("encoder", NULL);
    check_bert(vk);
    check_decoder(vk, "models/synth/synth-llama-256-F32.gguf");
    check_decoder(vk, "models/synth/synth-qwen2-256-Q4_K_M.gguf");
    gpu_close(vk);
    return test_summary("encoder");
}
