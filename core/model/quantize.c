/* quantize.c — float rows to GGUF blocks, rounding as the reference
 * quantizer does so that ember's files match the reference tool's.
 *
 * The rules, per layout (block layouts: core/model/quant.c):
 *   Q8_0  d = max|x| / 127 (kept as f16), q = round-half-away(x / d).
 *   Q4_0  d = m / -8 where m is the value of largest magnitude (sign kept),
 *         q = min(15, trunc(x / d + 8.5)).  Q5_0: m / -16, + 16.5, max 31.
 *   Q5_1  d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5).
 *   Q4_K / Q5_K  eight sub-blocks of 32, each fitted with a scale and a
 *         non-positive offset by an iterative weighted least-squares search
 *         (fit_scale_min: start from the min/max grid, then try nstep+1
 *         slightly stretched grids, solve the 2x2 normal equations for each,
 *         keep the best weighted squared error; weights av|x| + |x|). The
 *         sub-block scales and mins are then quantized to 6 bits against the
 *         largest of each (super-scales d, dmin as f16), and the values are
 *         rounded again against the 6-bit scales actually stored.
 *   Q6_K  sixteen sub-blocks of 16, each fitted with a symmetric scale
 *         (fit_scale_sym: grid from the signed extreme, 19 stretched grids,
 *         weights x^2, keep the largest sumlx^2/suml2), scales rounded to
 *         int8 against the extreme one (d = -max_scale / 128), values
 *         rounded again against the stored scales.
 * Rounding to nearest uses round-half-to-even through a float bias (the
 * reference's nearest_int), not roundf: the two differ on ties. */
#include "core/model/quantize.h"

#include <math.h>
#include <string.h>

#include "core/model/quant.h"

#define QK_K 256

/* Nearest integer, ties to even, as float addition rounds. |v| is clamped to
 * 2^22 (far beyond any quant range) so that the bias trick stays exact. */
static int q_round(float v)
{
    if (v > 4194303.0f)
        v = 4194303.0f;
    else if (v < -4194303.0f)
        v = -4194303.0f;
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = em_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float get_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return em_f16_to_f32(h);
}

uint16_t em_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000)              /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ---- 32-element blocks ----------------------------------------------------- */

/* The value of largest magnitude, sign kept (first one on ties). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0, m = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            m = x[j];
        }
    }
    return m;
}

/* Q8_0 block [34 B] <- x[32] */
static void q8_0_block(const float *x, uint8_t *y)
{
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 32; j++)
        y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

/* Q4_0 block [18 B] <- x[32] */
static void q4_0_block(const float *x, uint8_t *y)
{
    float d = signed_absmax(x, 32) / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(y, d);
    for (int j = 0; j < 16; j++) {
        int a = (int)(int8_t)(x[j] * id + 8.5f), b = (int)(int8_t)(x[j + 16] * id + 8.5f);
        a = a > 15 ? 15 : a;
        b = b > 15 ? 15 : b;
        y[2 + j] = (uint8_t)(a | (b << 4));
    }
}

/* The low nibbles and the 5th bits of 32 five-bit values: qs[16], qh (bit j = element j). */
static void pack5(const int *l, uint8_t *qh4, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((l[j] & 0xF) | ((l[j + 16] & 0xF) << 4));
        qh |= (uint32_t)((l[j] >> 4) & 1) << j;
        qh |= (uint32_t)((l[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh4, &qh, 4);
}

/* Q5_0 block [22 B: d, qh[4], qs[16]] <- x[32] */
static void q5_0_block(const float *x, uint8_t *y)
{
    float d = signed_absmax(x, 32) / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(y, d);
    int l[32];
    for (int j = 0; j < 32; j++) {
        int v = (int)(int8_t)(x[j] * id + 16.5f);
        l[j] = v > 31 ? 31 : v;
    }
    pack5(l, y + 2, y + 6);
}

/* Q5_1 block [24 B: d, m, qh[4], qs[16]] <- x[32] */
static void q5_1_block(const float *x, uint8_t *y)
{
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    float d = (mx - mn) / 31.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(y, d);
    put_f16(y + 2, mn);
    int l[32];
    for (int j = 0; j < 32; j++)
        l[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
    pack5(l, y + 4, y + 8);
}

/* ---- K-quant searches ------------------------------------------------------- */

/* Fit x[n] ~ scale * L + min with L in [0, nmax] and min <= 0, minimising
 * sum w (scale*L + min - x)^2. The first grid spans [min(x, 0), max(x)];
 * then, for is = 0..nstep, a grid of (nmax + rmin + rdelta*is) steps over
 * [min, max(x)], where min is the best offset found so far, is refitted by
 * least squares (min clamped to 0 and the scale refitted when the fit wants
 * a positive offset) and kept when its weighted error is lower. L[n] gets
 * the best levels, *neg_min the offset negated (>= 0); returns the scale.
 * aux[n] is scratch. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, uint8_t *aux, float rmin, float rdelta, int nstep)
{
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0)
        lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0;
    }
    float iscale = (float)nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(q_round(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best += w[i] * (diff * diff);
    }
    float min = lo;     /* the grids start from the best offset found so far */
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (hi - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(q_round(iscale * (x[i] - min)), 0, nmax);
            aux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0))
            continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / det;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (m > 0) {
            m = 0;
            s = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * aux[i] + m - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, aux, (size_t)n);
            best = err;
            scale = s;
            min = m;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Fit x[n] ~ scale * l with l in [-nmax, nmax-1] (stored in L as l + nmax),
 * weights x^2: grids from the signed extreme (-nmax / m, then stretched by
 * 0.1 steps from -0.9 to +0.9), keeping the one with the largest
 * sumlx^2 / suml2; the scale is the least-squares one. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
    float m = signed_absmax(x, n);
    if (fabsf(m) < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float iscale = -(float)nmax / m, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(q_round(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / m;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(q_round(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(clampi(q_round(iscale * x[i]), -nmax, nmax - 1) + nmax);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* The 6-bit scale and min of sub-block j (0..7) in a Q4_K/Q5_K scales[12]. */
static void k4_get(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K (nmax 15) or Q5_K (nmax 31) levels of one 256 block: fills
 * hdr[16] = d, dmin, scales[12] and L[256]. */
static void k45_levels(const float *x, int nmax, uint8_t *hdr, uint8_t *L)
{
    float scales[8], mins[8], w[32];
    uint8_t aux[32];
    float max_scale = 0, max_min = 0;
    float rmin = nmax == 15 ? -1.0f : -0.5f;
    int nstep = nmax == 15 ? 20 : 15;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av + fabsf(xs[l]);
        scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], aux, rmin, 0.1f, nstep);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sc = hdr + 4;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)q_round(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)q_round(inv_min * mins[j]);
        ls = ls > 63 ? 63 : ls;
        lm = lm > 63 ? 63 : lm;
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    put_f16(hdr, max_scale / 63.0f);
    put_f16(hdr + 2, max_min / 63.0f);
    float d_all = get_f16(hdr), dmin_all = get_f16(hdr + 2);
    for (int j = 0; j < 8; j++) {     /* round again against the stored scales */
        int s, m;
        k4_get(j, sc, &s, &m);
        float d = d_all * (float)s;
        if (d == 0)
            continue;
        float dm = dmin_all * (float)m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clampi(q_round((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

/* Q4_K block [144 B] <- x[256] */
static void q4_k_block(const float *x, uint8_t *y)
{
    uint8_t L[QK_K];
    k45_levels(x, 15, y, L);
    uint8_t *q = y + 16;
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; l++)
            q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

/* Q5_K block [176 B: d, dmin, scales[12], qh[32], qs[128]] <- x[256] */
static void q5_k_block(const float *x, uint8_t *y)
{
    uint8_t L[QK_K];
    k45_levels(x, 31, y, L);
    uint8_t *qh = y + 16, *ql = y + 48;
    memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK_K; n += 64, ql += 32) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
}

/* Q6_K block [210 B: ql[128], qh[64], scales[16] (int8), d] <- x[256] */
static void q6_k_block(const float *x, uint8_t *y)
{
    int8_t L[QK_K];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs) {
            max_abs = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    memset(y, 0, 210);
    if (max_abs < 1e-15f)
        return;                                   /* all zero: d = 0 */
    float iscale = -128.0f / max_scale;
    put_f16(y + 208, 1 / iscale);
    int8_t *sc = (int8_t *)(y + 192);
    for (int ib = 0; ib < 16; ib++) {
        int v = q_round(iscale * scales[ib]);
        sc[ib] = (int8_t)(v > 127 ? 127 : v);
    }
    float d_all = get_f16(y + 208);
    for (int j = 0; j < 16; j++) {                /* round again against the stored scales */
        float d = d_all * (float)sc[j];
        if (d == 0)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(clampi(q_round(x[16 * j + i] / d), -32, 31) + 32);
    }
    uint8_t *ql = y, *qh = y + 128;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
            ql[l] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            ql[l + 32] = (uint8_t)((b & 0xF) | ((e & 0xF) << 4));
            qh[l] = (uint8_t)((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
        }
    }
}

/* ---- rows ------------------------------------------------------------------ */

int em_quantize_can(uint32_t type)
{
    switch (type) {
    case EM_T_F32: case EM_T_F16: case EM_T_BF16:
    case EM_T_Q4_0: case EM_T_Q5_0: case EM_T_Q5_1: case EM_T_Q8_0:
    case EM_T_Q4_K: case EM_T_Q5_K: case EM_T_Q6_K:
        return 1;
    default:
        return 0;
    }
}

size_t em_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    const em_ttype_info *ti = em_ttype_get(type);
    if (!ti || !em_quantize_can(type) || n % ti->blck)
        return 0;
    uint8_t *o = dst;
    switch (type) {
    case EM_T_F32:
        memcpy(dst, src, (size_t)n * 4);
        return (size_t)n * 4;
    case EM_T_F16:
    case EM_T_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = type == EM_T_F16 ? em_f32_to_f16(src[i]) : em_f32_to_bf16(src[i]);
            memcpy(o + 2 * i, &h, 2);
        }
        return (size_t)n * 2;
    default:
        break;
    }
    int64_t nb = n / ti->blck;
    for (int64_t b = 0; b < nb; b++, src += ti->blck, o += ti->bytes) {
        switch (type) {
        case EM_T_Q8_0: q8_0_block(src, o); break;
        case EM_T_Q4_0: q4_0_block(src, o); break;
        case EM_T_Q5_0: q5_0_block(src, o); break;
        case EM_T_Q5_1: q5_1_block(src, o); break;
        case EM_T_Q4_K: q4_k_block(src, o); break;
        case EM_T_Q5_K: q5_k_block(src, o); break;
        default:        q6_k_block(src, o); break;
        }
    }
    return (size_t)nb * ti->bytes;
}
