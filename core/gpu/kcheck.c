/* kcheck.c — single-kernel known-answer checks (kcheck.h): random weight
 * rows of a type packed the way core/gpu/forward.c uploads them, random
 * activations, one dispatch of the matrix kernel, and the same product on
 * the CPU through core/run/ref.c with every fused epilogue applied. */
#include "core/gpu/kcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/forward.h"
#include "core/gpu/kparams.h"
#include "core/gpu/topk.h"
#include "core/gpu/wpack.h"
#include "core/model/quant.h"
#include "core/run/ref.h"

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float frand(uint64_t *s) { return (float)((double)(next(s) >> 11) / 9007199254740992.0) * 2 - 1; }

/* N random rows of a type: random bytes with the scale fields made sane. */
static uint8_t *random_rows(uint64_t *s, uint32_t type, uint32_t K, uint32_t N, size_t *row_bytes)
{
    const em_ttype_info *ti = em_ttype_get(type);
    *row_bytes = (size_t)K / ti->blck * ti->bytes;
    uint8_t *m = malloc(*row_bytes * N);
    if (!m)
        return NULL;
    for (size_t i = 0; i < *row_bytes * N; i++)
        m[i] = (uint8_t)next(s);
    size_t nb = (size_t)K / ti->blck * N;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = m + b * ti->bytes;
        int offs[2] = { -1, -1 };
        switch (type) {
        case EM_T_F32: { float v = frand(s); memcpy(blk, &v, 4); break; }
        case EM_T_F16: { uint16_t h = em_f32_to_f16(frand(s)); memcpy(blk, &h, 2); break; }
        case EM_T_BF16: {
            float v = frand(s);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(blk, &h, 2);
            break;
        }
        case EM_T_Q4_0: case EM_T_Q8_0: case EM_T_Q5_0: case EM_T_IQ4_NL: case EM_T_IQ4_XS: offs[0] = 0; break;
        case EM_T_Q4_1: case EM_T_Q5_1: case EM_T_Q4_K: case EM_T_Q5_K: offs[0] = 0; offs[1] = 2; break;
        case EM_T_Q6_K: offs[0] = 208; break;
        case EM_T_Q2_K: offs[0] = 80; offs[1] = 82; break;
        case EM_T_Q3_K: offs[0] = 108; break;
        case EM_T_MXFP4: blk[0] = (uint8_t)(118 + next(s) % 8); break;   /* scales 2^-10 .. 2^-3 */
        }
        for (int i = 0; i < 2; i++) {
            if (offs[i] < 0)
                continue;
            uint16_t h = em_f32_to_f16(0.002f + 0.02f * fabsf(frand(s)));
            memcpy(blk + offs[i], &h, 2);
        }
    }
    return m;
}

/* The N rows at w (rb bytes each) packed as core/gpu/forward.c uploads them
 * into qw and sc (sized by the layout; sc zeroed first). */
static int pack(const em_wpack_layout *L, const uint8_t *w, size_t rb, uint32_t N, uint32_t *qw,
                uint16_t *sc)
{
    float *tmp = malloc(L->K_pad * sizeof *tmp);
    if (!tmp)
        return -1;
    for (uint32_t g = 0; g < L->n_groups; g++) {
        const void *rows[256];   /* em_wpack_layout_for allows groups up to 256 rows */
        for (uint32_t r = 0; r < L->R; r++)
            rows[r] = g * L->R + r < N ? w + (g * L->R + r) * rb : NULL;
        em_wpack_group(L, rows, (uint32_t *)((uint8_t *)qw + g * L->group_qw_bytes),
                       L->has_sc ? (uint16_t *)((uint8_t *)sc + g * L->group_sc_bytes) : NULL, tmp);
    }
    free(tmp);
    return 0;
}

static int upload(em_vk *vk, const void *data, size_t n, em_vk_buf *b, em_err *err)
{
    int rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, n ? n : 16, b, err);
    if (!rc && n && data)
        rc = em_vk_upload(vk, b, 0, data, n, NULL, err);
    return rc;
}

double em_kcheck_nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]))
            return NAN;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : num;
}

/* Q4_0 rows times x as mm.comp computes them: x in 8 bits per block of 32
 * (d = amax / 127 rounded to f16, values x * 127 / amax rounded half away
 * from zero), the integer products per block times both scales. */
static void ref_q4_0_q8(const uint8_t *w, uint32_t K, uint32_t N, const float *x, float *out)
{
    for (uint32_t n = 0; n < N; n++) {
        double acc = 0;
        for (uint32_t b = 0; b < K / 32; b++) {
            const uint8_t *blk = w + ((size_t)n * (K / 32) + b) * 18;
            uint16_t dwh;
            memcpy(&dwh, blk, 2);
            const float *xb = x + b * 32;
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(xb[j]));
            float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            long isum = 0;
            for (int j = 0; j < 32; j++) {
                int q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
                isum += (long)(q - 8) * (long)roundf(xb[j] * id);
            }
            double dh = d <= 65504.0f ? em_f16_to_f32(em_f32_to_f16(d)) : d;   /* f32 past the f16 range */
            acc += (double)em_f16_to_f32(dwh) * dh * (double)isum;
        }
        out[n] = (float)acc;
    }
}

/* What the kernel writes into y (T rows of ys floats, output at column 2). */
static void reference(const em_kcheck_mm_case *c, const em_wpack_layout *L, const uint8_t *w,
                      const float *x, uint32_t xs, const float *vecs, uint32_t bias_off,
                      const int32_t *step, uint32_t ys, float *ref, float *xin, float *full)
{
    const uint32_t K = c->K, N = c->N, flags = c->flags;
    uint32_t out_cols = (flags & EM_MM_SWIGLU) ? N / 2 : N;
    for (uint32_t t = 0; t < c->T; t++) {
        const float *xr = x + (size_t)step[t] * xs;
        if (L->type == EM_T_Q4_0) {
            /* the kernel quantizes x (times the norm weight) and applies the
             * RMS scale to the sums */
            double ss = 0;
            for (uint32_t k = 0; k < K; k++) {
                ss += (double)xr[k] * xr[k];
                xin[k] = (flags & EM_MM_NORM_IN) ? xr[k] * vecs[k] : xr[k];
            }
            ref_q4_0_q8(w, K, N, xin, full);
            if (flags & EM_MM_NORM_IN)
                for (uint32_t n = 0; n < N; n++)
                    full[n] *= (float)(1.0 / sqrt(ss / K + 1e-5));
        } else if (flags & EM_MM_NORM_IN) {
            em_ref_rmsnorm(xin, xr, vecs, (int)K, 1e-5f);
            em_ref_matvec(c->src_type, w, K, N, xin, full);
        } else {
            memcpy(xin, xr, K * sizeof *xin);
            em_ref_matvec(c->src_type, w, K, N, xin, full);
        }
        if (flags & EM_MM_BIAS)
            for (uint32_t n = 0; n < N; n++)
                full[n] += vecs[bias_off + n];
        float *yr = ref + (size_t)t * ys + 2;
        for (uint32_t j = 0; j < out_cols; j++) {
            float v = full[j];
            if (flags & EM_MM_SWIGLU)
                ((flags & EM_MM_GELU) ? em_ref_geglu : em_ref_swiglu)(&v, &full[2 * j], &full[2 * j + 1], 1);
            yr[j] = (flags & EM_MM_ADD_OUT) ? yr[j] + v : v;
        }
    }
}

int em_kcheck_mm(em_vk *vk, em_vk_pipe *pipe, uint32_t lanes, uint32_t rpw, const em_kcheck_mm_case *c,
                 double *nmse, em_err *err)
{
    const uint32_t K = c->K, N = c->N, T = c->T, flags = c->flags;
    const float xsc = c->x_scale > 0 ? c->x_scale : 1;
    uint64_t s = c->seed;
    *nmse = NAN;
    if (!K || !N || !T || !c->tn || ((flags & EM_MM_SWIGLU) && N % 2))
        return em_err_set(err, EM_EINVAL, "kernel check: bad case (K %u, N %u, T %u, tn %u)", K, N, T, c->tn);
    em_wpack_layout L;
    int rc = em_wpack_layout_for(c->src_type, K, N, rpw, lanes, &L, err);
    if (rc)
        return rc;
    uint32_t xs = (L.K_pad + 31) / 32 * 32;
    uint32_t n_in = T + 2;                                 /* more input rows than tokens (gather) */
    uint32_t out_cols = (flags & EM_MM_SWIGLU) ? N / 2 : N;
    uint32_t ys = out_cols + 5;
    uint32_t bias_off = (K + 3) / 4 * 4, n_vecs = bias_off + N + 8;
    size_t qw_bytes = L.group_qw_bytes * L.n_groups;
    size_t sc_bytes = (L.group_sc_bytes * L.n_groups + 15) / 16 * 16 + 16;   /* whole words */
    size_t rb = 0;
    uint8_t *w = random_rows(&s, c->src_type, K, N, &rb);
    uint32_t *qw = malloc(qw_bytes);
    uint16_t *sc = calloc(1, sc_bytes);
    float *x = calloc((size_t)n_in * xs, sizeof *x);
    float *vecs = malloc(n_vecs * sizeof *vecs);
    int32_t *step = malloc(T * sizeof *step);
    float *y0 = malloc((size_t)T * ys * sizeof *y0), *y = malloc((size_t)T * ys * sizeof *y);
    float *ref = malloc((size_t)T * ys * sizeof *ref);
    float *xin = malloc(K * sizeof *xin), *full = malloc(N * sizeof *full);
    em_vk_buf b[6];
    memset(b, 0, sizeof b);
    em_vk_dset *ds = NULL;
    em_vk_cmd *cmd = NULL;
    if (!w || !qw || !sc || !x || !vecs || !step || !y0 || !y || !ref || !xin || !full ||
        pack(&L, w, rb, N, qw, sc)) {
        rc = em_err_set(err, EM_ENOMEM, "kernel check: out of memory");
        goto done;
    }
    for (uint32_t t = 0; t < n_in; t++)
        for (uint32_t k = 0; k < K; k++)
            x[(size_t)t * xs + k] = xsc * frand(&s);
    for (uint32_t i = 0; i < n_vecs; i++)
        vecs[i] = 0.5f + frand(&s);
    for (uint32_t t = 0; t < T; t++)
        step[t] = (flags & EM_MM_GATHER_IN) ? (int32_t)((t * 7 + 1) % n_in) : (int32_t)t;
    for (size_t i = 0; i < (size_t)T * ys; i++)
        y0[i] = frand(&s);

    /* bindings: weights, scales, x, y, vectors, step ints */
    if ((rc = upload(vk, qw, qw_bytes, &b[0], err)) || (rc = upload(vk, sc, sc_bytes, &b[1], err)) ||
        (rc = upload(vk, x, (size_t)n_in * xs * 4, &b[2], err)) ||
        (rc = upload(vk, y0, (size_t)T * ys * 4, &b[3], err)) ||
        (rc = upload(vk, vecs, (size_t)n_vecs * 4, &b[4], err)) ||
        (rc = upload(vk, step, (size_t)T * sizeof *step, &b[5], err)) ||
        (rc = em_vk_dset_create(vk, pipe, b, &ds, err)))
        goto done;
    em_pc_mm pc = { L.K_pad, K, N, T, xs, ys, 2, 0, 0, bias_off, 0, 1e-5f };
    uint32_t gx = (N + rpw - 1) / rpw;
    uint32_t gy = em_mm_grid_y(L.K_pad, lanes, rpw, T, c->tn, gx);
    if (!gy) {
        rc = em_err_set(err, EM_EINVAL, "kernel check: rows of %u too long for one token tile", K);
        goto done;
    }
    if ((rc = em_vk_cmd_create(vk, 0, &cmd, err)) || (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_vk_cmd_dispatch(cmd, pipe, ds, &pc, gx, gy, 1);
    if ((rc = em_vk_cmd_end(cmd, err)) || (rc = em_vk_cmd_submit_wait(cmd, err)) ||
        (rc = em_vk_download(vk, &b[3], 0, y, (size_t)T * ys * 4, NULL, err)))
        goto done;
    memcpy(ref, y0, (size_t)T * ys * sizeof *ref);
    reference(c, &L, w, x, xs, vecs, bias_off, step, ys, ref, xin, full);
    *nmse = em_kcheck_nmse(y, ref, (size_t)T * ys);
done:
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(vk, ds);
    for (int i = 0; i < 6; i++)
        em_vk_free(vk, &b[i]);
    free(w); free(qw); free(sc); free(x); free(vecs); free(step);
    free(y0); free(y); free(ref); free(xin); free(full);
    return rc;
}

int em_kcheck_embed(em_vk *vk, em_vk_pipe *pipe, uint32_t lanes, uint32_t rpw, uint32_t src_type,
                    uint32_t E, uint32_t V, uint64_t seed, double *nmse, em_err *err)
{
    uint64_t s = seed;
    *nmse = NAN;
    em_wpack_layout L;
    int rc = em_wpack_layout_for(src_type, E, V, rpw, lanes, &L, err);
    if (rc)
        return rc;
    const int32_t toks[5] = { 0, (int32_t)V - 1, (int32_t)V / 2, (int32_t)(3 % V), (int32_t)V - 1 };
    const uint32_t T = 5, xs = E + 4;
    size_t qw_bytes = L.group_qw_bytes * L.n_groups;
    size_t sc_bytes = (L.group_sc_bytes * L.n_groups + 15) / 16 * 16 + 16;   /* whole words */
    size_t rb = 0;
    uint8_t *w = random_rows(&s, src_type, E, V, &rb);
    uint32_t *qw = malloc(qw_bytes);
    uint16_t *sc = calloc(1, sc_bytes);
    float *x = malloc((size_t)T * xs * 4), *ref = malloc((size_t)E * 4);
    em_vk_buf b[4];
    memset(b, 0, sizeof b);
    em_vk_dset *ds = NULL;
    em_vk_cmd *cmd = NULL;
    if (!w || !qw || !sc || !x || !ref || pack(&L, w, rb, V, qw, sc)) {
        rc = em_err_set(err, EM_ENOMEM, "kernel check: out of memory");
        goto done;
    }
    /* bindings: weights, scales, step ints (the tokens), x */
    if ((rc = upload(vk, qw, qw_bytes, &b[0], err)) || (rc = upload(vk, sc, sc_bytes, &b[1], err)) ||
        (rc = upload(vk, toks, sizeof toks, &b[2], err)) ||
        (rc = upload(vk, NULL, (size_t)T * xs * 4, &b[3], err)) ||
        (rc = em_vk_dset_create(vk, pipe, b, &ds, err)) || (rc = em_vk_cmd_create(vk, 0, &cmd, err)) ||
        (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_pc_embed pc = { E, T, xs, 0, 0, V, 1.0f };
    em_vk_cmd_dispatch(cmd, pipe, ds, &pc, (E / 4 + 63) / 64, T, 1);
    if ((rc = em_vk_cmd_end(cmd, err)) || (rc = em_vk_cmd_submit_wait(cmd, err)) ||
        (rc = em_vk_download(vk, &b[3], 0, x, (size_t)T * xs * 4, NULL, err)))
        goto done;
    double worst = 0;
    for (uint32_t t = 0; t < T && isfinite(worst); t++) {
        em_dequant_row(src_type, w + (size_t)toks[t] * rb, ref, E);
        double e = em_kcheck_nmse(x + (size_t)t * xs, ref, E);
        worst = isfinite(e) && e <= worst ? worst : e;
    }
    *nmse = worst;
done:
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(vk, ds);
    for (int i = 0; i < 4; i++)
        em_vk_free(vk, &b[i]);
    free(w); free(qw); free(sc); free(x); free(ref);
    return rc;
}

typedef struct { float v; int32_t id; } vid;

/* value descending, NaN last, lowest id on ties */
static int cmp_vid(const void *a, const void *b)
{
    const vid *x = a, *y = b;
    int xn = isnan(x->v), yn = isnan(y->v);
    if (xn != yn)
        return xn - yn;
    if (!xn && x->v != y->v)
        return x->v < y->v ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void em_topk_steer_ref(float *row, uint32_t V, const em_sample_steer *st)
{
    for (uint32_t k = 0; k < st->n_adj; k++) {
        if ((uint32_t)st->adj[k].id >= V)
            continue;
        float *v = &row[st->adj[k].id];
        if (st->adj[k].rep != 1)
            *v = *v > 0 ? *v / st->adj[k].rep : *v * st->adj[k].rep;
        *v -= st->adj[k].sub;
    }
    for (uint32_t i = 0; st->allow && i < V; i++)
        if (!(st->allow[i / 32] >> (i % 32) & 1))
            row[i] = -INFINITY;
}

void em_topk_ref(const float *x, uint32_t V, float temp, em_sample_top *t, int32_t *ids, void *scratch_mem)
{
    vid *scratch = scratch_mem;
    for (uint32_t i = 0; i < V; i++)
        scratch[i] = (vid){ x[i], (int32_t)i };
    qsort(scratch, V, sizeof *scratch, cmp_vid);
    float mx = scratch[0].v;
    double s1 = 0, st = 0;
    for (uint32_t i = 0; i < V && isfinite(mx); i++) {
        s1 += exp((double)x[i] - mx);
        st += temp > 0 ? exp(((double)x[i] - mx) / temp) : 0;
    }
    uint32_t k = V < EM_SAMPLE_TOPK ? V : EM_SAMPLE_TOPK;
    for (uint32_t j = 0; j < k; j++)
        ids[j] = scratch[j].id;
    *t = (em_sample_top){ mx, scratch[0].id, (float)s1, (float)st, k, ids, NULL };
}

int em_kcheck_topk(em_vk *vk, em_vk_pipe *pipe, uint32_t V, uint32_t L, uint64_t seed, uint32_t *bad, char *why,
                   size_t cap, em_err *err)
{
    uint64_t s = seed;
    *bad = 0;
    why[0] = 0;
    enum { NADJ = 24 };
    uint32_t words = (V + 31) / 32;
    size_t steer_words = em_topk_steer_words(L, (uint64_t)L * NADJ, V);
    float *x = malloc((size_t)L * V * sizeof *x), *ref = malloc((size_t)L * V * sizeof *ref);
    uint32_t *w = calloc(steer_words, 4), *o = malloc((size_t)L * EM_TOPK_STRIDE * 4);
    uint32_t *allow = malloc((size_t)L * words * 4);
    em_sample_adj *adj = malloc((size_t)L * NADJ * sizeof *adj);
    em_sample_steer *st = calloc(L, sizeof *st);
    int32_t *rid = malloc(EM_SAMPLE_TOPK * sizeof *rid);
    vid *scratch = malloc((size_t)V * sizeof *scratch);
    em_sample_top *dev = malloc(L * sizeof *dev);
    em_vk_buf b[3];
    memset(b, 0, sizeof b);
    em_vk_dset *ds = NULL;
    em_vk_cmd *cmd = NULL;
    int rc = 0;
    if (!x || !ref || !w || !o || !allow || !adj || !st || !rid || !dev || !scratch) {
        rc = em_err_set(err, EM_ENOMEM, "kernel check: out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)L * V; i++)
        x[i] = (i % 13 == 5 && i % V) ? x[i - 1] : 8 * frand(&s);   /* exact ties */
    for (uint32_t r = 0; r < L; r++) {
        st[r].temp = r == 0 ? 0.0f : 0.5f + (float)r / 4;
        st[r].adj = adj + (size_t)r * NADJ;
        st[r].n_adj = V >= 4 * NADJ ? NADJ : 0;
        for (uint32_t k = 0; k < st[r].n_adj; k++) {   /* distinct ids: a stride through the row */
            float rep = k % 3 == 0 ? 1.3f : 1.0f, sub = k == 1 ? INFINITY : 2 * frand(&s);
            adj[(size_t)r * NADJ + k] = (em_sample_adj){ (int32_t)((k * 4 + r) % V), rep, sub };
        }
        uint32_t *a = allow + (size_t)r * words;
        for (uint32_t q = 0; q < words; q++)
            a[q] = (uint32_t)next(&s) & (uint32_t)next(&s);   /* a quarter of the tokens */
        st[r].allow = r % 2 ? a : NULL;
    }
    /* the reference: the same steering on the CPU */
    memcpy(ref, x, (size_t)L * V * sizeof *ref);
    for (uint32_t r = 0; r < L; r++)
        em_topk_steer_ref(ref + (size_t)r * V, V, &st[r]);
    em_topk_pack(w, st, L, V);
    em_pc_topk pc = { V, EM_TOPK_STRIDE };
    if ((rc = upload(vk, x, (size_t)L * V * 4, &b[0], err)) || (rc = upload(vk, w, steer_words * 4, &b[1], err)) ||
        (rc = upload(vk, NULL, (size_t)L * EM_TOPK_STRIDE * 4, &b[2], err)) ||
        (rc = em_vk_dset_create(vk, pipe, b, &ds, err)) || (rc = em_vk_cmd_create(vk, 0, &cmd, err)) ||
        (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_vk_cmd_dispatch(cmd, pipe, ds, &pc, L, 1, 1);
    if ((rc = em_vk_cmd_end(cmd, err)) || (rc = em_vk_cmd_submit_wait(cmd, err)) ||
        (rc = em_vk_download(vk, &b[2], 0, o, (size_t)L * EM_TOPK_STRIDE * 4, NULL, err)) ||
        (rc = em_vk_download(vk, &b[0], 0, x, (size_t)L * V * 4, NULL, err)))
        goto done;
    em_topk_unpack(o, L, dev);
    for (uint32_t r = 0; r < L; r++) {
        const float *row = ref + (size_t)r * V;
        em_sample_top t;
        em_topk_ref(row, V, st[r].temp, &t, rid, scratch);
        const em_sample_top *d = &dev[r];
        char what[160] = "";
        if (d->argmax != t.argmax || d->max != t.max)
            snprintf(what, sizeof what, "argmax %d (%g), the CPU's %d (%g)", d->argmax, (double)d->max, t.argmax,
                     (double)t.max);
        else if (!(fabs(d->sum1 - t.sum1) <= 1e-4 * t.sum1) || !(fabs(d->sum_t - t.sum_t) <= 1e-4 * t.sum_t + 1e-30))
            snprintf(what, sizeof what, "sums %g, %g; the CPU's %g, %g", (double)d->sum1, (double)d->sum_t,
                     (double)t.sum1, (double)t.sum_t);
        else if (d->n != t.n)
            snprintf(what, sizeof what, "%u candidates, the CPU's %u", d->n, t.n);
        for (uint32_t j = 0; j < t.n && !what[0]; j++) {
            int found = 0;
            for (uint32_t q = 0; q < d->n && !found; q++)
                found = d->id[q] == rid[j] && (d->val[q] == row[rid[j]] ||
                        fabsf(d->val[q] - row[rid[j]]) <= 1e-6f * fabsf(row[rid[j]]));
            if (!found)
                snprintf(what, sizeof what, "candidate %u (id %d, %g) missing", j, rid[j], (double)row[rid[j]]);
        }
        if (what[0] && !(*bad)++)
            snprintf(why, cap, "row %u of %u tokens: %s", r, V, what);
    }
done:
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(vk, ds);
    for (int i = 0; i < 3; i++)
        em_vk_free(vk, &b[i]);
    free(x); free(ref); free(w); free(o); free(allow); free(adj); free(st); free(rid); free(dev);
    free(scratch);
    return rc;
}

const char *em_kcheck_flags_name(uint32_t flags, char *buf, size_t cap)
{
    static const char *const names[] = { "norm_in", "bias", "add_out", "swiglu", "gather_in", "gelu", "expert",
                                         "expert_tok", "oai" };
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (flags & (1u << i))
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "+" : "", names[i]);
    if (!n)
        snprintf(buf, cap, "none");
    return buf;
}
