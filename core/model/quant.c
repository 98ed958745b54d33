/* quant.c — reference (de)quantization of the GGUF block formats.
 *
 * Block layouts (little-endian, f16 = IEEE half):
 *   Q4_0  32 elts, 18 B : f16 d; u8 qs[16]            x = d * (nibble - 8); lo nibbles are
 *                                                     elements 0..15, hi nibbles 16..31
 *   Q4_1  32 elts, 20 B : f16 d, m; u8 qs[16]         x = d * nibble + m
 *   Q5_0  32 elts, 22 B : f16 d; u8 qh[4]; u8 qs[16]  5th bit of element j in bit j of qh
 *   Q5_1  32 elts, 24 B : f16 d, m; u8 qh[4]; u8 qs[16]
 *   Q8_0  32 elts, 34 B : f16 d; i8 qs[32]            x = d * q
 *   Q4_K 256 elts, 144 B: f16 d, dmin; u8 scales[12]; u8 qs[128]
 *                         8 sub-blocks of 32 with 6-bit scale and min packed in scales[]
 *   Q5_K 256 elts, 176 B: f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *   Q6_K 256 elts, 210 B: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
 *                         16 sub-blocks of 16, x = d * scale * (q6 - 32)
 *   Q2_K 256 elts,  84 B: u8 scales[16]; u8 qs[64]; f16 d, dmin
 *   Q3_K 256 elts, 110 B: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
 *   IQ4_NL  32 elts, 18 B: f16 d; u8 qs[16]         x = d * IQ4NL[nibble] (nibbles as Q4_0)
 *   IQ4_XS 256 elts, 136 B: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
 *                         8 sub-blocks of 32 with 6-bit scale ls (4 low bits in
 *                         scales_l, 2 high in scales_h), x = d * (ls - 32) * IQ4NL[nibble]
 *   MXFP4   32 elts, 17 B: u8 e (E8M0); u8 qs[16]   x = 2^(e - 128) * MXFP4[nibble] (the
 *                         E2M1 values doubled: 0 1 2 3 4 6 8 12 and their negatives) */
#include "core/model/quant.h"

#include <math.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/model/quantize.h"

float em_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                       /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t em_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t exp = (x >> 23) & 0xff;
    uint32_t man = x & 0x7fffff;
    if (exp == 0xff)                                   /* inf / nan */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f)                                     /* overflow -> inf */
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {                                      /* subnormal or zero */
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;                                        /* may carry into exp: correct */
    return (uint16_t)half;
}

float em_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float rd_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return em_f16_to_f32(h);
}

int em_quant_supported(uint32_t type)
{
    switch (type) {
    case EM_T_F32: case EM_T_F16: case EM_T_BF16:
    case EM_T_Q4_0: case EM_T_Q4_1: case EM_T_Q5_0: case EM_T_Q5_1: case EM_T_Q8_0:
    case EM_T_Q2_K: case EM_T_Q3_K: case EM_T_Q4_K: case EM_T_Q5_K: case EM_T_Q6_K:
    case EM_T_IQ4_NL: case EM_T_IQ4_XS: case EM_T_MXFP4:
        return 1;
    default:
        return 0;
    }
}

void em_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0xF) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = rd_f16(b), m = rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0xF) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void deq_q5(const uint8_t *b, float *y, int with_min)
{
    float d = rd_f16(b), m = with_min ? rd_f16(b + 2) : 0.0f;
    const uint8_t *p = b + (with_min ? 4 : 2);
    uint32_t qh;
    memcpy(&qh, p, 4);
    const uint8_t *qs = p + 4;
    int off = with_min ? 0 : 16;
    for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
        int x1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)(x0 - off) + m;
        y[j + 16] = d * (float)(x1 - off) + m;
    }
}

const int8_t em_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };
const int8_t em_mxfp4_values[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

/* 32 elements from 16 bytes of nibbles (byte j: element j low, j + 16
 * high) through a table, times d */
static void deq_table4(const uint8_t *qs, const int8_t *tab, float d, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)tab[qs[j] & 0xF];
        y[j + 16] = d * (float)tab[qs[j] >> 4];
    }
}

float em_e8m0_half(uint8_t e)
{
    /* 2^(e - 128): below 2^-126 a subnormal float */
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void deq_iq4_xs(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int ib = 0; ib < 8; ib++) {
        int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
        deq_table4(qs + 16 * ib, em_iq4nl_values, d * (float)(ls - 32), y + 32 * ib);
    }
}

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = rd_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)qs[j];
}

static void deq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *q = b + 16;
    float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                uint8_t sc = scales[is++];
                float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
            }
        }
        q += 32;
    }
}

void em_q3k_scales(const uint8_t *packed, uint8_t out[16])
{
    uint32_t aux[4];
    memcpy(aux, packed, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    memcpy(out, aux, 16);
}

static void deq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *q = b + 32;
    float d_all = rd_f16(b + 108);
    uint8_t scales[16];
    em_q3k_scales(b + 96, scales);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                float dl = d_all * (float)((int)scales[is++] - 32);
                for (int l = 0; l < 16; l++) {
                    int idx = l + 16 * half;
                    int v = (q[idx] >> shift) & 3;
                    *y++ = dl * (float)(v - ((hm[idx] & m) ? 0 : 4));
                }
            }
            m = (uint8_t)(m << 1);
        }
        q += 32;
    }
}

static void deq_q4_k(const uint8_t *b, float *y)
{
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2) {
        uint8_t sc, m;
        em_k4_scale_min(j, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        em_k4_scale_min(j + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
    }
}

static void deq_q5_k(const uint8_t *b, float *y)
{
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2) {
        uint8_t sc, m;
        em_k4_scale_min(j, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        em_k4_scale_min(j + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = rd_f16(b + 208);
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

void em_dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    const uint8_t *s = src;
    const em_ttype_info *ti = em_ttype_get(type);
    if (!ti)
        return;
    int64_t nb = n / ti->blck;
    switch (type) {
    case EM_T_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case EM_T_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rd_f16(s + 2 * i);
        return;
    case EM_T_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = em_bf16_to_f32(h);
        }
        return;
    default:
        break;
    }
    for (int64_t i = 0; i < nb; i++, s += ti->bytes, dst += ti->blck) {
        switch (type) {
        case EM_T_Q4_0: deq_q4_0(s, dst); break;
        case EM_T_Q4_1: deq_q4_1(s, dst); break;
        case EM_T_Q5_0: deq_q5(s, dst, 0); break;
        case EM_T_Q5_1: deq_q5(s, dst, 1); break;
        case EM_T_Q8_0: deq_q8_0(s, dst); break;
        case EM_T_Q2_K: deq_q2_k(s, dst); break;
        case EM_T_Q3_K: deq_q3_k(s, dst); break;
        case EM_T_Q4_K: deq_q4_k(s, dst); break;
        case EM_T_Q5_K: deq_q5_k(s, dst); break;
        case EM_T_Q6_K: deq_q6_k(s, dst); break;
        case EM_T_IQ4_NL: deq_table4(s + 2, em_iq4nl_values, rd_f16(s), dst); break;
        case EM_T_IQ4_XS: deq_iq4_xs(s, dst); break;
        case EM_T_MXFP4: deq_table4(s + 1, em_mxfp4_values, em_e8m0_half(s[0]), dst); break;
        default: return;
        }
    }
}

void em_quant_q8_0(const float *src, void *dst, int64_t n)
{
    em_quantize_row(EM_T_Q8_0, src, dst, n);
}

void em_quant_q4_0(const float *src, void *dst, int64_t n)
{
    em_quantize_row(EM_T_Q4_0, src, dst, n);
}
