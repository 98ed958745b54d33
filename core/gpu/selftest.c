/* selftest.c — the boot known-answer check (selftest.h): fixed tokens
 * through the device's forward pass and through the CPU reference, their
 * logits compared stage by stage (an encoder's pooled rows against
 * core/run/encode.c); then each matrix pipeline the stages built, alone on
 * random inputs (core/gpu/kcheck.c). */
#include "core/gpu/selftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gpu/forward.h"
#include "core/gpu/kcheck.h"
#include "core/gpu/kparams.h"
#include "core/gpu/variants.h"
#include "core/model/quant.h"
#include "core/run/encode.h"
#include "core/run/ref.h"
#include "shaders/em_kernels.h"

#define N_PRE   6   /* prompt tokens of sequence A (prefill) */
#define N_DEC   2   /* then decode steps of A, one token each */
#define N_B     3   /* prompt tokens of sequence B in the mixed step */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Fixed, spread-out token ids below n_vocab (no vocabulary knowledge
 * needed: the forward pass takes any id). */
static void fixed_tokens(int32_t *t, uint32_t n, uint32_t salt, uint32_t n_vocab)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (salt + 1);
    for (uint32_t i = 0; i < n; i++) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 29;
        t[i] = (int32_t)(x % n_vocab);
    }
}

static void fault(em_selftest_stage s, float *logits, size_t n)
{
    static const char *const names[EM_SELFTEST_N] = { "prefill", "decode", "batch" };
    const char *f = getenv("EMBER_SELFTEST_FAULT");
    if (!f || strcmp(f, names[s]) != 0)
        return;
    for (size_t i = 0; i < n; i += 7)   /* as a wrong kernel would: some values far off */
        logits[i] = -3 * logits[i] + 1;
}

static void judge(em_selftest_stage_result *r, const float *dev, const float *ref, size_t n)
{
    r->ran = 1;
    r->nmse = em_kcheck_nmse(dev, ref, n);
    r->ok = isfinite(r->nmse) && r->nmse < EM_SELFTEST_NMSE;
}

/* The weight type whose packed rows matrix kernel k reads; -1 for a kernel
 * that is not a matrix kernel. */
static int mm_type(uint32_t k)
{
    static const uint32_t types[] = { EM_T_F32, EM_T_F16, EM_T_Q8_0, EM_T_Q4_0, EM_T_Q4_1, EM_T_Q5_0,
                                      EM_T_Q5_1, EM_T_IQ4_NL, EM_T_Q4_K, EM_T_Q5_K, EM_T_Q6_K, EM_T_IQ4_XS,
                                      EM_T_Q2_K, EM_T_Q3_K, EM_T_MXFP4 };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if ((uint32_t)em_fwd_mm_kernel(types[i]) == k)
            return (int)types[i];
    return -1;
}

/* The non-matrix kernels among the pipelines that stage s runs, as
 * "a, b, c" into out (prefill has no decode attention, decode no prefill
 * attention; the mixed step both; pool.comp only where pooled rows are
 * compared, an encoder's). */
static void other_names(const em_fwd_pipe_info *pi, uint32_t n, int s, int pooled, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        const char *name = em_kernels[pi[i].kernel].name;
        int dec = strncmp(name, "attn_dec", 8) == 0 || strcmp(name, "attn_reduce") == 0;
        int pre = strncmp(name, "attn_pre", 8) == 0;
        int expert = mm_type(pi[i].kernel) >= 0 && (pi[i].flags & EM_MM_EXPERT);   /* (not checked alone) */
        if ((mm_type(pi[i].kernel) >= 0 && !expert) || pi[i].kernel == EM_K_TOPK ||
            (pi[i].kernel == EM_K_POOL && !pooled) ||
            (s == EM_SELFTEST_PREFILL && dec) || (s == EM_SELFTEST_DECODE && pre))
            continue;
        char tn[24] = "";
        if (expert)
            snprintf(tn, sizeof tn, " (experts, tn=%u)", pi[i].tn);
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s%s%s", len ? ", " : "", name, tn);
    }
}

/* Each matrix pipeline f built, alone: several token tiles (one partial),
 * rows past a whole number of workgroups, the variant's epilogues. */
static int kernel_checks(em_fwd *f, const em_model *m, const em_fwd_pipe_info *pi, uint32_t n,
                         em_selftest_report *rep, em_err *err)
{
    uint32_t lanes, rpw;
    em_fwd_mm_geometry(f, &lanes, &rpw);
    const char *fault = getenv("EMBER_SELFTEST_FAULT");
    double t0 = now_ms();
    for (uint32_t i = 0; i < n && rep->n_kernels < EM_SELFTEST_MAX_KERNELS; i++) {
        int type = mm_type(pi[i].kernel);
        if (pi[i].kernel == EM_K_TOPK) {   /* choosing tokens: over the model's vocabulary */
            em_selftest_kernel_result *k = &rep->kernel[rep->n_kernels++];
            uint32_t V = em_model_hparams(m)->n_vocab, bad = 0;
            char why[160];
            snprintf(k->kernel, sizeof k->kernel, "topk");
            snprintf(k->flags, sizeof k->flags, "none");
            snprintf(k->name, sizeof k->name, "topk V=%u", V);
            int rc = em_kcheck_topk(em_fwd_device(f), pi[i].pipe, V, 3, 2000 + i, &bad, why, sizeof why, err);
            if (rc)
                return em_err_set(err, rc, "self-test: the check of %s could not run: %s", k->name, err->msg);
            if (fault && strcmp(fault, "topk") == 0 && !bad) {
                bad = 1;
                snprintf(why, sizeof why, "row 0: candidate 0 missing (EMBER_SELFTEST_FAULT)");
            }
            k->nmse = bad;
            k->ok = bad == 0;
            if (bad)
                snprintf(k->detail, sizeof k->detail, "%s", why);
            continue;
        }
        if (type < 0 || (pi[i].flags & EM_MM_EXPERT))   /* (an expert product: the stages check it) */
            continue;
        em_selftest_kernel_result *k = &rep->kernel[rep->n_kernels++];
        char fl[48];
        em_kcheck_flags_name(pi[i].flags, fl, sizeof fl);
        snprintf(k->kernel, sizeof k->kernel, "%s", em_kernels[pi[i].kernel].name);
        snprintf(k->flags, sizeof k->flags, "%s", fl);
        snprintf(k->name, sizeof k->name, "%s tn=%u %s", em_kernels[pi[i].kernel].name, pi[i].tn, fl);
        k->tn = pi[i].tn;
        uint32_t blck = em_ttype_get((uint32_t)type)->blck;
        em_kcheck_mm_case c = {
            .src_type = (uint32_t)type,
            .K = blck == 256 ? 512 : 128,
            .N = 2 * rpw + 6,
            .T = pi[i].tn == 1 ? 3 : 2 * pi[i].tn + 3,
            .flags = pi[i].flags,
            .tn = pi[i].tn,
            .seed = 1000 + i,
        };
        if (fault && strcmp(fault, em_kernels[pi[i].kernel].name) == 0)
            c.flags ^= EM_MM_BIAS;   /* the check expects what the pipeline does not do */
        int rc = em_kcheck_mm(em_fwd_device(f), pi[i].pipe, lanes, rpw, &c, &k->nmse, err);
        if (rc)
            return em_err_set(err, rc, "self-test: the check of %s could not run: %s", k->name, err->msg);
        k->ok = isfinite(k->nmse) && k->nmse < EM_SELFTEST_KERNEL_NMSE;
    }
    rep->kernels_ms = now_ms() - t0;
    return 0;
}

/* Every matrix pipeline f built checked alone, the stages' other kernels
 * named in rep->others, then rep->ok and, when not, rep->failure: the
 * first failed kernel, else the first failed stage (naming its other
 * kernels). pooled: the stages compared pooled rows (an encoder's), not
 * logits. 0, or kernel_checks' error. */
static int finish(em_fwd *f, const em_model *m, em_selftest_report *rep, int pooled, em_err *err)
{
    em_fwd_pipe_info pi[EM_SELFTEST_MAX_KERNELS];
    uint32_t n_pi = em_fwd_pipes(f, pi, EM_SELFTEST_MAX_KERNELS);
    if (n_pi > EM_SELFTEST_MAX_KERNELS)
        n_pi = EM_SELFTEST_MAX_KERNELS;
    int rc = kernel_checks(f, m, pi, n_pi, rep, err);
    if (rc)
        return rc;
    other_names(pi, n_pi, pooled ? EM_SELFTEST_PREFILL : EM_SELFTEST_BATCH, pooled, rep->others, sizeof rep->others);
    rep->ok = 1;
    for (uint32_t i = 0; i < rep->n_kernels && rep->ok; i++) {
        const em_selftest_kernel_result *k = &rep->kernel[i];
        if (!k->ok) {
            rep->ok = 0;
            if (strcmp(k->kernel, "topk") == 0)
                snprintf(rep->failure, sizeof rep->failure,
                         "the token-choosing kernel %s disagrees with the CPU on random logits (%.0f of 3 rows; %s)",
                         k->name, k->nmse, k->detail);
            else
                snprintf(rep->failure, sizeof rep->failure,
                         "the matrix kernel %s gives output %s against the CPU reference on random inputs "
                         "(NMSE %.3g, limit %.0e)",
                         k->name, isfinite(k->nmse) ? "far off" : "that is not finite", k->nmse,
                         EM_SELFTEST_KERNEL_NMSE);
        }
    }
    for (int s = 0; s < EM_SELFTEST_N && rep->ok; s++) {
        const em_selftest_stage_result *x = &rep->stage[s];
        if (x->ran && !x->ok) {
            /* the matrix kernels passed alone: name the stage's others */
            char names[160];
            other_names(pi, n_pi, s, pooled, names, sizeof names);
            rep->ok = 0;
            snprintf(rep->failure, sizeof rep->failure,
                     "the %s stage (%s) gives %s %s against the CPU reference (NMSE %.3g, limit %.0e) "
                     "while every matrix kernel passes alone: suspect %s",
                     x->name, x->kernels, pooled ? "pooled rows" : "logits",
                     isfinite(x->nmse) ? "far off" : "that are not finite", x->nmse, EM_SELFTEST_NMSE, names);
        }
    }
    return 0;
}

/* An encoder's stage (in the prefill's place): two whole sequences in one
 * step, their pooled rows (A's mean, B's first token; B's second half of
 * token type 1 where the model has two) against core/run/encode.c. */
#define N_EA 7
#define N_EB 5
static int encoder_stage(em_fwd *f, const em_model *m, em_selftest_report *rep, em_err *err)
{
    const em_hparams *hp = em_model_hparams(m);
    const uint32_t E = hp->n_embd, T = N_EA + N_EB;
    int32_t tok[N_EA + N_EB], pos[N_EA + N_EB], seq[N_EA + N_EB], pool[4] = { 0, N_EA, N_EA, 1 };
    uint8_t types[N_EA + N_EB] = { 0 };
    fixed_tokens(tok, T, 2, hp->n_vocab);
    for (uint32_t i = 0; i < T; i++) {
        pos[i] = (int32_t)(i < N_EA ? i : i - N_EA);
        seq[i] = i < N_EA ? 0 : 1;
        types[i] = hp->n_token_types > 1 && i >= N_EA + N_EB / 2;
    }
    float *h = malloc((size_t)N_EA * E * sizeof *h), *ref = malloc(2 * (size_t)E * sizeof *ref);
    float *dev = malloc(2 * (size_t)E * sizeof *dev);
    int rc = 0;
    if (!h || !ref || !dev) {
        rc = em_err_set(err, EM_ENOMEM, "self-test: out of memory");
        goto done;
    }
    double tr = now_ms();
    if ((rc = em_ref_encode(m, tok, NULL, N_EA, h, err)))
        goto done;
    em_pool(EM_POOL_MEAN, h, N_EA, E, ref);
    if ((rc = em_ref_encode(m, tok + N_EA, types + N_EA, N_EB, h, err)))
        goto done;
    em_pool(EM_POOL_CLS, h, N_EB, E, ref + E);
    rep->ref_ms = now_ms() - tr;
    double td = now_ms();
    em_fwd_batch b = { T, tok, pos, seq, 0, NULL, NULL, NULL, NULL, types, 2, pool };
    if ((rc = em_fwd_step(f, &b, NULL, err)))
        goto done;
    rep->stage[EM_SELFTEST_PREFILL].device_ms = now_ms() - td;
    for (uint32_t d = 0; d < E; d++) {
        dev[d] = em_fwd_pooled_row(f, 0)[d] / N_EA;
        dev[E + d] = em_fwd_pooled_row(f, 1)[d];
    }
    rep->stage[EM_SELFTEST_PREFILL].rows = 2;
    rep->stage[EM_SELFTEST_PREFILL].kernels = "the encoder over two whole sequences (biased matrix kernels, "
                                              "attention over each run, LayerNorms, GELU, pooled rows)";
    fault(EM_SELFTEST_PREFILL, dev, 2 * (size_t)E);
    judge(&rep->stage[EM_SELFTEST_PREFILL], dev, ref, 2 * (size_t)E);
    rep->stage[EM_SELFTEST_DECODE].skipped = "an encoder generates nothing";
    rep->stage[EM_SELFTEST_BATCH].skipped = "an encoder generates nothing";
done:
    free(h);
    free(ref);
    free(dev);
    return rc;
}

int em_selftest_run(em_fwd *f, const em_model *m, em_selftest_report *rep, em_err *err)
{
    static const struct { const char *name, *kernels; } info[EM_SELFTEST_N] = {
        { "prefill", "the matrix kernels over several tokens and prefill attention" },
        { "decode", "the single-token matrix kernels and decode attention" },
        { "batch", "a step mixing two sequences (their block tables, decode and prefill attention together)" },
    };
    const em_fwd_opts *o = em_fwd_get_opts(f);
    const uint32_t V = em_model_hparams(m)->n_vocab;
    const uint32_t n_all = N_PRE + N_DEC;
    double t0 = now_ms();
    memset(rep, 0, sizeof *rep);
    for (int s = 0; s < EM_SELFTEST_N; s++) {
        rep->stage[s].name = info[s].name;
        rep->stage[s].kernels = info[s].kernels;
        rep->stage[s].nmse = NAN;
    }
    const int enc = em_model_hparams(m)->encoder;
    if (enc ? o->max_tokens < N_EA + N_EB || o->max_ctx < N_EA || o->max_seqs < 2
            : o->max_tokens < N_PRE || o->max_ctx < n_all + 1 || o->n_blocks < 1 || o->max_logits < 1)
        return em_err_set(err, EM_EINVAL, "self-test: the forward pass is too small for it (%u tokens a step, "
                          "%u positions)", o->max_tokens, o->max_ctx);
    if (enc) {
        int rc = encoder_stage(f, m, rep, err);
        if (!rc)
            rc = finish(f, m, rep, 1, err);
        rep->total_ms = now_ms() - t0;
        return rc;
    }
    int batch = o->max_seqs >= 2 && o->n_blocks >= 2 && (!o->n_blocks_window || o->n_blocks_window >= 2) &&
                o->max_logits >= 2 && o->max_tokens >= 1 + N_B;
    uint32_t pre_rows = o->max_logits < N_PRE ? o->max_logits : N_PRE;   /* the last ones */

    int32_t ta[N_PRE + N_DEC + 1], tb[N_B];
    fixed_tokens(ta, N_PRE + N_DEC + 1, 0, V);
    fixed_tokens(tb, N_B, 1, V);
    size_t ref_n = (size_t)(N_PRE + N_DEC + 1 + N_B) * V;
    float *ref = malloc(ref_n * sizeof *ref);             /* A's rows, then B's */
    float *dev = malloc((size_t)(N_PRE > 2 ? N_PRE : 2) * V * sizeof *dev);
    const int32_t **tables = calloc(o->max_seqs, sizeof *tables);
    em_ref *r = NULL;
    int rc = 0;
    if (!ref || !dev || !tables) {
        rc = em_err_set(err, EM_ENOMEM, "self-test: out of memory");
        goto done;
    }

    /* the reference: A's tokens one by one, then B's */
    double tr = now_ms();
    if ((rc = em_ref_create(m, n_all + 1 > N_B ? n_all + 1 : N_B, &r, err)))
        goto done;
    for (uint32_t i = 0; i < n_all + batch && !rc; i++)
        rc = em_ref_forward(r, ta[i], i, ref + (size_t)i * V, err);
    for (uint32_t i = 0; i < N_B && batch && !rc; i++)
        rc = em_ref_forward(r, tb[i], i, ref + (size_t)(n_all + 1 + i) * V, err);
    if (rc)
        goto done;
    rep->ref_ms = now_ms() - tr;

    /* prefill: A's prompt in one step, block 0 (of the window pool too, where there is one) */
    static const int32_t block0[1] = { 0 }, block1[1] = { 1 };
    int32_t pos[N_PRE + 1], seq[N_PRE + 1], rows[N_PRE + 1];
    uint8_t decode[N_PRE + 1];
    tables[0] = block0;
    for (uint32_t i = 0; i < N_PRE; i++) {
        pos[i] = (int32_t)i;
        seq[i] = 0;
        rows[i] = (int32_t)(N_PRE - pre_rows + i);
        decode[i] = 0;
    }
    double td = now_ms();
    em_fwd_batch b = { N_PRE, ta, pos, seq, pre_rows, rows, tables, decode, tables, NULL, 0, NULL };
    if ((rc = em_fwd_step(f, &b, dev, err)))
        goto done;
    rep->stage[EM_SELFTEST_PREFILL].device_ms = now_ms() - td;
    rep->stage[EM_SELFTEST_PREFILL].rows = pre_rows;
    fault(EM_SELFTEST_PREFILL, dev, (size_t)pre_rows * V);
    judge(&rep->stage[EM_SELFTEST_PREFILL], dev, ref + (size_t)(N_PRE - pre_rows) * V, (size_t)pre_rows * V);

    /* decode: A's next tokens, one a step; the stage's rows compared together */
    float *dec = malloc((size_t)N_DEC * V * sizeof *dec);
    if (!dec) {
        rc = em_err_set(err, EM_ENOMEM, "self-test: out of memory");
        goto done;
    }
    td = now_ms();
    for (uint32_t i = 0; i < N_DEC && !rc; i++) {
        int32_t p = (int32_t)(N_PRE + i), s0 = 0, row = 0;
        uint8_t one = 1;
        em_fwd_batch bd = { 1, ta + N_PRE + i, &p, &s0, 1, &row, tables, &one, tables, NULL, 0, NULL };
        rc = em_fwd_step(f, &bd, dec + (size_t)i * V, err);
    }
    if (rc) {
        free(dec);
        goto done;
    }
    rep->stage[EM_SELFTEST_DECODE].device_ms = now_ms() - td;
    rep->stage[EM_SELFTEST_DECODE].rows = N_DEC;
    fault(EM_SELFTEST_DECODE, dec, (size_t)N_DEC * V);
    judge(&rep->stage[EM_SELFTEST_DECODE], dec, ref + (size_t)N_PRE * V, (size_t)N_DEC * V);
    free(dec);

    /* batch: A's next decode beside B's whole prompt (block 1); rows: A's, B's last */
    if (batch) {
        tables[1] = block1;
        int32_t tok[1 + N_B];
        tok[0] = ta[n_all];
        pos[0] = (int32_t)n_all;
        seq[0] = 0;
        decode[0] = 1;
        for (uint32_t i = 0; i < N_B; i++) {
            tok[1 + i] = tb[i];
            pos[1 + i] = (int32_t)i;
            seq[1 + i] = 1;
            decode[1 + i] = 0;
        }
        rows[0] = 0;
        rows[1] = N_B;
        td = now_ms();
        em_fwd_batch bb = { 1 + N_B, tok, pos, seq, 2, rows, tables, decode, tables, NULL, 0, NULL };
        if ((rc = em_fwd_step(f, &bb, dev, err)))
            goto done;
        rep->stage[EM_SELFTEST_BATCH].device_ms = now_ms() - td;
        rep->stage[EM_SELFTEST_BATCH].rows = 2;
        fault(EM_SELFTEST_BATCH, dev, (size_t)2 * V);
        /* the reference rows: A at n_all, B at its last token, side by side */
        memcpy(ref + (size_t)n_all * V + V, ref + (size_t)(n_all + N_B) * V, (size_t)V * sizeof *ref);
        judge(&rep->stage[EM_SELFTEST_BATCH], dev, ref + (size_t)n_all * V, (size_t)2 * V);
    } else {
        rep->stage[EM_SELFTEST_BATCH].skipped = "one sequence slot";
    }

    /* every matrix pipeline alone, and the verdict */
    rc = finish(f, m, rep, 0, err);
done:
    rep->total_ms = now_ms() - t0;
    em_ref_destroy(r);
    free(ref);
    free(dev);
    free(tables);
    return rc;
}

json_t *em_selftest_json(const em_selftest_report *rep)
{
    json_t *stages = json_array();
    for (int i = 0; i < EM_SELFTEST_N; i++) {
        const em_selftest_stage_result *s = &rep->stage[i];
        json_t *o = json_pack("{s:s, s:s, s:b}", "name", s->name, "checks", s->kernels, "ran", s->ran);
        if (!o)
            continue;
        if (s->ran) {
            json_object_set_new(o, "rows", json_integer(s->rows));
            json_object_set_new(o, "nmse", isfinite(s->nmse) ? json_real(s->nmse) : json_null());
            json_object_set_new(o, "ok", json_boolean(s->ok));
            json_object_set_new(o, "device_ms", json_real(round(s->device_ms * 10) / 10));
        } else {
            json_object_set_new(o, "skipped", json_string(s->skipped ? s->skipped : ""));
        }
        json_array_append_new(stages, o);
    }
    json_t *kernels = json_array();
    for (uint32_t i = 0; i < rep->n_kernels; i++) {
        const em_selftest_kernel_result *k = &rep->kernel[i];
        json_array_append_new(kernels, json_pack("{s:s, s:o, s:b}", "name", k->name, "nmse",
                                                 isfinite(k->nmse) ? json_real(k->nmse) : json_null(), "ok",
                                                 k->ok));
    }
    return json_pack("{s:b, s:f, s:o, s:f, s:o, s:s, s:f, s:f, s:f, s:s*}", "ok", rep->ok, "limit_nmse",
                     EM_SELFTEST_NMSE, "stages", stages, "kernel_limit_nmse", EM_SELFTEST_KERNEL_NMSE, "kernels",
                     kernels, "other_kernels", rep->others, "kernels_ms", round(rep->kernels_ms * 10) / 10,
                     "reference_ms", round(rep->ref_ms * 10) / 10, "total_ms", round(rep->total_ms * 10) / 10,
                     "failure", rep->ok ? NULL : rep->failure);
}
