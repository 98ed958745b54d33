/* test_kernels.c — the matrix and embedding kernels against core/ref.c for
 * every weight type (the seven with kernels, and the ones converted to F16
 * at upload), over awkward shapes: one row, rows not a multiple of the
 * workgroup, K not a multiple of 32 (plain types), long rows, several token
 * counts, and every fused epilogue (norm, bias, residual add, SwiGLU,
 * gathered input rows). Weights are random blocks with sane scales. */
#include <math.h>
#include <stdint.h>

#include "core/forward.h"
#include "core/kparams.h"
#include "core/quant.h"
#include "core/ref.h"
#include "core/wpack.h"
#include "shaders/em_kernels.h"
#include "tests/gpu/gpu_util.h"

static unsigned long long seed = 7;
static float x_scale = 1;   /* magnitude of the random inputs */

static float frand(void) { return (float)((double)(test_rand(&seed) >> 11) / 9007199254740992.0) * 2 - 1; }

/* Random rows of a type: random bytes with the f16 scale fields made sane. */
static uint8_t *random_rows(uint32_t type, uint32_t K, uint32_t N, size_t *row_bytes)
{
    const em_ttype_info *ti = em_ttype_get(type);
    *row_bytes = (size_t)K / ti->blck * ti->bytes;
    uint8_t *m = malloc(*row_bytes * N);
    for (size_t i = 0; i < *row_bytes * N; i++)
        m[i] = (uint8_t)test_rand(&seed);
    size_t nb = (size_t)K / ti->blck * N;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = m + b * ti->bytes;
        int offs[2] = { -1, -1 };
        switch (type) {
        case EM_T_F32:
            for (uint32_t j = 0; j < 1; j++) { float v = frand(); memcpy(blk, &v, 4); }
            break;
        case EM_T_F16: { uint16_t h = em_f32_to_f16(frand()); memcpy(blk, &h, 2); break; }
        case EM_T_BF16: { float v = frand(); uint32_t u; memcpy(&u, &v, 4); uint16_t h = (uint16_t)(u >> 16); memcpy(blk, &h, 2); break; }
        case EM_T_Q4_0: case EM_T_Q8_0: case EM_T_Q5_0: offs[0] = 0; break;
        case EM_T_Q4_1: case EM_T_Q5_1: case EM_T_Q4_K: case EM_T_Q5_K: offs[0] = 0; offs[1] = 2; break;
        case EM_T_Q6_K: offs[0] = 208; break;
        case EM_T_Q2_K: offs[0] = 80; offs[1] = 82; break;
        case EM_T_Q3_K: offs[0] = 108; break;
        }
        for (int i = 0; i < 2; i++) {
            if (offs[i] < 0)
                continue;
            uint16_t h = em_f32_to_f16(0.002f + 0.02f * fabsf(frand()));
            memcpy(blk + offs[i], &h, 2);
        }
    }
    return m;
}

typedef struct {
    em_vk *vk;
    uint32_t L, RPW;            /* lanes and rows per workgroup of mm.comp */
    em_vk_pipe *pipes[128];
    uint32_t keys[128][3];
    int n_pipes;
} harness;

static em_vk_pipe *pipe_for(harness *h, uint32_t k, uint32_t tn, uint32_t flags)
{
    for (int i = 0; i < h->n_pipes; i++)
        if (h->keys[i][0] == k && h->keys[i][1] == tn && h->keys[i][2] == flags)
            return h->pipes[i];
    if (h->n_pipes == (int)(sizeof h->pipes / sizeof h->pipes[0])) {
        CHECKF(0, "harness: more than %d pipelines", h->n_pipes);
        exit(1);
    }
    uint32_t spec[4] = { h->L, h->RPW, tn, flags };
    if (k >= EM_K_EMBED_F32 && k <= EM_K_EMBED_Q6_K) {
        spec[0] = h->RPW;   /* rows per packed group */
        spec[1] = tn;       /* blocks per chunk of the packed table (embed_case) */
    }
    em_err err = { 0 };
    em_vk_pipe *p = NULL;
    int rc = em_vk_pipe_create(h->vk, &em_kernels[k], spec, k >= EM_K_EMBED_F32 && k <= EM_K_EMBED_Q6_K ? 2 : 4,
                               0, &p, &err);
    CHECK_OK(rc, err);
    h->pipes[h->n_pipes] = p;
    h->keys[h->n_pipes][0] = k;
    h->keys[h->n_pipes][1] = tn;
    h->keys[h->n_pipes][2] = flags;
    h->n_pipes++;
    return p;
}

/* The N rows at w (rb bytes each) packed the way core/forward.c uploads
 * them: *qw and *sc are malloc'd (sc padded to whole words). */
static void pack(const em_wpack_layout *L, const uint8_t *w, size_t rb, uint32_t N, uint32_t **qw,
                 uint16_t **sc)
{
    *qw = malloc(L->group_qw_bytes * L->n_groups);
    *sc = calloc(1, L->group_sc_bytes * L->n_groups + 16);
    float *tmp = malloc(L->K_pad * sizeof *tmp);
    for (uint32_t g = 0; g < L->n_groups; g++) {
        const void *rows[256];   /* em_wpack_layout_for allows groups up to 256 rows */
        for (uint32_t r = 0; r < L->R; r++)
            rows[r] = g * L->R + r < N ? w + (g * L->R + r) * rb : NULL;
        em_wpack_group(L, rows, (uint32_t *)((uint8_t *)*qw + g * L->group_qw_bytes),
                       L->has_sc ? (uint16_t *)((uint8_t *)*sc + g * L->group_sc_bytes) : NULL, tmp);
    }
    free(tmp);
}

static em_vk_buf upload(harness *h, const void *data, size_t n)
{
    em_vk_buf b = { 0 };
    em_err err = { 0 };
    int rc = em_vk_alloc(h->vk, EM_VK_MEM_DEVICE, n ? n : 16, &b, &err);
    CHECK_OK(rc, err);
    if (!rc && n && data) {
        rc = em_vk_upload(h->vk, &b, 0, data, n, NULL, &err);
        CHECK_OK(rc, err);
    }
    return b;
}

static double nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
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

/* One mm case: N x K weights of src_type, T tokens, fused flags, tn tokens per pass. */
static void mm_case(harness *h, uint32_t src_type, uint32_t K, uint32_t N, uint32_t T, uint32_t flags,
                    uint32_t tn)
{
    em_err err = { 0 };
    size_t rb;
    uint8_t *w = random_rows(src_type, K, N, &rb);
    em_wpack_layout L;
    int rc = em_wpack_layout_for(src_type, K, N, h->RPW, h->L, &L, &err);
    CHECK_OK(rc, err);
    if (rc) {
        free(w);
        return;
    }
    uint32_t *qw;
    uint16_t *sc;
    pack(&L, w, rb, N, &qw, &sc);
    uint32_t xs = (L.K_pad + 31) / 32 * 32;
    uint32_t n_in = T + 2;                                 /* more input rows than tokens (gather) */
    uint32_t out_cols = (flags & EM_MM_SWIGLU) ? N / 2 : N;
    uint32_t ys = out_cols + 5;
    float *x = calloc((size_t)n_in * xs, sizeof *x);
    for (uint32_t t = 0; t < n_in; t++)
        for (uint32_t k = 0; k < K; k++)
            x[t * xs + k] = x_scale * frand();
    float *vecs = malloc((K + N + 8) * sizeof *vecs);
    for (uint32_t i = 0; i < K + N + 8; i++)
        vecs[i] = 0.5f + frand();
    uint32_t norm_off = 0, bias_off = (K + 3) / 4 * 4;
    int32_t *step = malloc(T * sizeof *step);
    for (uint32_t t = 0; t < T; t++)
        step[t] = (flags & EM_MM_GATHER_IN) ? (int32_t)((t * 7 + 1) % n_in) : (int32_t)t;
    float *y0 = malloc((size_t)T * ys * sizeof *y0);
    for (size_t i = 0; i < (size_t)T * ys; i++)
        y0[i] = frand();

    em_vk_buf bqw = upload(h, qw, L.group_qw_bytes * L.n_groups);
    em_vk_buf bsc = upload(h, sc, (L.group_sc_bytes * L.n_groups + 15) / 16 * 16 + 16);   /* whole words */
    em_vk_buf bx = upload(h, x, (size_t)n_in * xs * 4);
    em_vk_buf bv = upload(h, vecs, (K + N + 8) * 4);
    em_vk_buf bs = upload(h, step, T * sizeof *step);
    em_vk_buf by = upload(h, y0, (size_t)T * ys * 4);
    em_vk_pipe *p = pipe_for(h, (uint32_t)em_fwd_mm_kernel(L.type), tn, flags);
    em_vk_buf binds[6] = { bqw, bsc, bx, by, bv, bs };
    em_vk_dset *ds = NULL;
    em_vk_cmd *cmd = NULL;
    rc = em_vk_dset_create(h->vk, p, binds, &ds, &err);
    CHECK_OK(rc, err);
    em_pc_mm pc = { L.K_pad, K, N, T, xs, ys, 2, 0, norm_off, bias_off, 0, 1e-5f };
    uint32_t gx = (N + h->RPW - 1) / h->RPW;
    uint32_t gy = em_mm_grid_y(L.K_pad, h->L, h->RPW, T, tn, gx);
    CHECK(gy > 0);
    if (!rc && !(rc = em_vk_cmd_create(h->vk, 0, &cmd, &err)) && !(rc = em_vk_cmd_begin(cmd, &err))) {
        em_vk_cmd_dispatch(cmd, p, ds, &pc, gx, gy, 1);
        rc = em_vk_cmd_end(cmd, &err);
        if (!rc)
            rc = em_vk_cmd_submit_wait(cmd, &err);
    }
    CHECK_OK(rc, err);
    float *y = malloc((size_t)T * ys * sizeof *y);
    rc = em_vk_download(h->vk, &by, 0, y, (size_t)T * ys * 4, NULL, &err);
    CHECK_OK(rc, err);

    /* reference */
    float *ref = malloc((size_t)T * ys * sizeof *ref), *xin = malloc(K * sizeof *xin);
    float *full = malloc(N * sizeof *full);
    memcpy(ref, y0, (size_t)T * ys * sizeof *ref);
    for (uint32_t t = 0; t < T; t++) {
        const float *xr = x + (size_t)step[t] * xs;
        if (L.type == EM_T_Q4_0) {
            /* the kernel quantizes x (times the norm weight) and applies the
             * RMS scale to the sums */
            double ss = 0;
            for (uint32_t k = 0; k < K; k++) {
                ss += (double)xr[k] * xr[k];
                xin[k] = (flags & EM_MM_NORM_IN) ? xr[k] * vecs[norm_off + k] : xr[k];
            }
            ref_q4_0_q8(w, K, N, xin, full);
            if (flags & EM_MM_NORM_IN)
                for (uint32_t n = 0; n < N; n++)
                    full[n] *= (float)(1.0 / sqrt(ss / K + 1e-5));
        } else if (flags & EM_MM_NORM_IN) {
            em_ref_rmsnorm(xin, xr, vecs + norm_off, (int)K, 1e-5f);
            em_ref_matvec(src_type, w, K, N, xin, full);
        } else {
            memcpy(xin, xr, K * sizeof *xin);
            em_ref_matvec(src_type, w, K, N, xin, full);
        }
        for (uint32_t n = 0; n < N; n++)
            if (flags & EM_MM_BIAS)
                full[n] += vecs[bias_off + n];
        float *yr = ref + (size_t)t * ys + 2;
        for (uint32_t j = 0; j < out_cols; j++) {
            float v = full[j];
            if (flags & EM_MM_SWIGLU)
                em_ref_swiglu(&v, &full[2 * j], &full[2 * j + 1], 1);
            yr[j] = (flags & EM_MM_ADD_OUT) ? yr[j] + v : v;
        }
    }
    int converted = L.type != src_type;
    double e = nmse(y, ref, (size_t)T * ys);
    double limit = converted ? 1e-5 : 1e-9;   /* f16 rounding of converted types; else summation order */
    CHECKF(e < limit, "mm %s K=%u N=%u T=%u flags=%u tn=%u: nmse %.3e", em_ttype_name(src_type), K, N, T,
           flags, tn, e);
    em_vk_free(h->vk, &bqw);
    em_vk_free(h->vk, &bsc);
    em_vk_free(h->vk, &bx);
    em_vk_free(h->vk, &bv);
    em_vk_free(h->vk, &bs);
    em_vk_free(h->vk, &by);
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(h->vk, ds);
    free(w); free(qw); free(sc); free(x); free(vecs); free(y0); free(y); free(ref);
    free(xin); free(full); free(step);
}

/* Embedding rows of every kernel type against em_dequant_row. */
static void embed_case(harness *h, uint32_t src_type, uint32_t E, uint32_t V)
{
    em_err err = { 0 };
    size_t rb;
    uint8_t *w = random_rows(src_type, E, V, &rb);
    em_wpack_layout L;
    int rc = em_wpack_layout_for(src_type, E, V, h->RPW, h->L, &L, &err);
    CHECK_OK(rc, err);
    uint32_t *qw;
    uint16_t *sc;
    pack(&L, w, rb, V, &qw, &sc);
    int32_t toks[5] = { 0, (int32_t)V - 1, (int32_t)V / 2, 3 % V, (int32_t)V - 1 };
    uint32_t T = 5, xs = E + 4;
    em_vk_buf bqw = upload(h, qw, L.group_qw_bytes * L.n_groups);
    em_vk_buf bsc = upload(h, sc, (L.group_sc_bytes * L.n_groups + 15) / 16 * 16 + 16);   /* whole words */
    em_vk_buf bs = upload(h, toks, sizeof toks);
    em_vk_buf bx = upload(h, NULL, (size_t)T * xs * 4);
    uint32_t k = (uint32_t)em_fwd_embed_kernel(L.type);
    em_vk_pipe *p = pipe_for(h, k, L.C, 0);
    em_vk_buf binds[4] = { bqw, bsc, bs, bx };
    em_vk_dset *ds = NULL;
    em_vk_cmd *cmd = NULL;
    rc = em_vk_dset_create(h->vk, p, binds, &ds, &err);
    em_pc_embed pc = { E, T, xs, 0 };
    if (!rc && !(rc = em_vk_cmd_create(h->vk, 0, &cmd, &err)) && !(rc = em_vk_cmd_begin(cmd, &err))) {
        em_vk_cmd_dispatch(cmd, p, ds, &pc, (E / 4 + 63) / 64, T, 1);
        rc = em_vk_cmd_end(cmd, &err);
        if (!rc)
            rc = em_vk_cmd_submit_wait(cmd, &err);
    }
    CHECK_OK(rc, err);
    float *x = malloc((size_t)T * xs * 4), *ref = malloc(E * 4);
    em_vk_download(h->vk, &bx, 0, x, (size_t)T * xs * 4, NULL, &err);
    for (uint32_t t = 0; t < T; t++) {
        em_dequant_row(src_type, w + (size_t)toks[t] * rb, ref, E);
        double e = nmse(x + t * xs, ref, E);
        CHECKF(e < (L.type != src_type ? 1e-6 : 1e-12), "embed %s E=%u row %d: nmse %.3e",
               em_ttype_name(src_type), E, toks[t], e);
    }
    em_vk_free(h->vk, &bqw); em_vk_free(h->vk, &bsc); em_vk_free(h->vk, &bs); em_vk_free(h->vk, &bx);
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(h->vk, ds);
    free(w); free(qw); free(sc); free(x); free(ref);
}

int main(void)
{
    em_vk *vk = gpu_open("kernels", NULL);
    const em_vk_dev_info *di = em_vk_info(vk);
    harness h = { .vk = vk };
    /* the geometry ember picks for this device, and smaller ones */
    uint32_t sg = di->subgroup_size;
    uint32_t big = em_fwd_mm_rows(di, EM_FWD_TINY_BYTES), small = em_fwd_mm_rows(di, 0);
    uint32_t geoms[3][2] = { { sg, big }, { sg, small == big ? 16 : small }, { sg > 1 ? sg / 2 : 1, 8 } };
    static const uint32_t types[] = { EM_T_F32, EM_T_F16, EM_T_Q8_0, EM_T_Q4_0, EM_T_Q4_K, EM_T_Q5_K,
                                      EM_T_Q6_K, EM_T_BF16, EM_T_Q4_1, EM_T_Q5_0, EM_T_Q5_1, EM_T_Q2_K,
                                      EM_T_Q3_K };
    for (int gi = 0; gi < 3; gi++) {
        h.L = geoms[gi][0];
        h.RPW = geoms[gi][1];
        h.n_pipes = 0;
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            uint32_t t = types[i];
            uint32_t bs = em_ttype_get(t)->blck;
            uint32_t K1 = bs == 1 ? 40 : bs;              /* plain types: K not a multiple of 32 */
            mm_case(&h, t, K1, 1, 1, 0, 1);                /* single row */
            mm_case(&h, t, bs == 256 ? 512 : 96, 3 * h.RPW + 5, 3, EM_MM_NORM_IN | EM_MM_BIAS, 2);
            mm_case(&h, t, bs == 256 ? 256 : 64, 2 * h.RPW + 6, 9, EM_MM_SWIGLU | EM_MM_NORM_IN, 8);
            em_wpack_layout pl;
            em_err perr = { 0 };
            CHECK_OK(em_wpack_layout_for(t, bs == 256 ? 256 : 64, 1, h.RPW, h.L, &pl, &perr), perr);
            if (pl.type != EM_T_F32 && pl.type != EM_T_F16)
                mm_case(&h, t, bs == 256 ? 256 : 64, h.RPW + 2, 37, EM_MM_SWIGLU | EM_MM_BIAS, 16);  /* ember's tn 16: quantized */
            mm_case(&h, t, bs == 256 ? 768 : 160, h.RPW + 1, 17, EM_MM_ADD_OUT | EM_MM_GATHER_IN, 1);
            if (gi == 0)
                mm_case(&h, t, bs == 256 ? 16384 : 8192, 2 * h.RPW, 1, EM_MM_NORM_IN, 1);  /* long rows */
            if (gi == 0 && t == EM_T_Q4_0) {
                /* activations whose 8-bit scale (amax / 127) is past the
                 * f16 range: the kernel keeps it in f32 instead of inf */
                x_scale = 3e7f;
                mm_case(&h, t, 256, h.RPW, 3, 0, 2);
                x_scale = 1;
            }
            if (gi == 0 && (t == EM_T_Q4_0 || t == EM_T_Q4_K)) {
                /* past llvmpipe's loop limit unsplit: long rows (unit loop
                 * x row loop), and many 8-token tiles of short rows (the
                 * per-tile sums and writes); both fail without the row
                 * terms of em_mm_grid_y once the row loop is not unrolled */
                mm_case(&h, t, 8192 * 4, 2 * h.RPW, 160, 0, 1);
                mm_case(&h, t, 256, 2 * h.RPW, 10240, 0, 8);
                mm_case(&h, t, 256, 2 * h.RPW, 10240, 0, 16);
            }
            if (gi == 0 && (t == EM_T_F32 || t == EM_T_F16 || t == EM_T_Q8_0 || t == EM_T_Q4_0 ||
                            t == EM_T_Q4_K || t == EM_T_Q5_K || t == EM_T_Q6_K || t == EM_T_Q2_K)) {
                embed_case(&h, t, bs == 256 ? 512 : 96, 37);
            }
        }
    }
    gpu_close(vk);
    return test_summary("kernels");
}
