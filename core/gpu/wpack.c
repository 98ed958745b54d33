/* wpack.c — repack GGUF weight rows into the GPU's row-interleaved layout
 * (see wpack.h for the layout and why). */
#include "core/gpu/wpack.h"

#include <string.h>

#include "core/model/gguf.h"
#include "core/model/quant.h"

static int kernel_type(uint32_t t)
{
    switch (t) {
    case EM_T_F32: case EM_T_F16: case EM_T_Q8_0: case EM_T_Q4_0:
    case EM_T_Q4_1: case EM_T_Q5_0: case EM_T_Q5_1: case EM_T_IQ4_NL:
    case EM_T_Q4_K: case EM_T_Q5_K: case EM_T_Q6_K: case EM_T_IQ4_XS:
    case EM_T_Q2_K: case EM_T_Q3_K: case EM_T_MXFP4:
        return (int)t;
    default:
        return em_quant_supported(t) ? EM_T_F16 : -1;
    }
}

int em_wpack_layout_for(uint32_t src_type, uint32_t K, uint32_t N, uint32_t R, uint32_t lanes,
                        em_wpack_layout *out, em_err *err)
{
    memset(out, 0, sizeof *out);
    int kt = kernel_type(src_type);
    if (kt < 0)
        return em_err_set(err, EM_EUNSUPPORTED, "weights of type %s cannot be used on the GPU",
                          em_ttype_name(src_type));
    if (R == 0 || R > 256 || (R & (R - 1)) || K == 0 || N == 0 || lanes == 0 || lanes > 256)
        return em_err_set(err, EM_EINVAL, "wpack: bad shape %ux%u, group %u or lanes %u", N, K, R, lanes);
    out->src_type = src_type;
    out->type = (uint32_t)kt;
    out->K = K;
    out->N = N;
    out->R = R;
    switch (kt) {
    case EM_T_F32:  out->BS = 32;  out->W = 32; break;
    case EM_T_F16:  out->BS = 32;  out->W = 16; break;
    case EM_T_Q8_0: out->BS = 32;  out->W = 8;  out->has_sc = 1; break;
    case EM_T_Q4_0: case EM_T_IQ4_NL: case EM_T_MXFP4:
                    out->BS = 32;  out->W = 4;  out->has_sc = 1; break;
    case EM_T_Q4_1: out->BS = 32;  out->W = 4;  out->has_sc = 2; break;
    case EM_T_Q5_0: case EM_T_Q5_1:
                    out->BS = 32;  out->W = 4;  out->has_sc = 4; break;
    case EM_T_Q4_K: out->BS = 256; out->W = 36; break;
    case EM_T_Q5_K: out->BS = 256; out->W = 44; break;
    case EM_T_Q6_K: out->BS = 256; out->W = 52; out->has_sc = 1; break;
    case EM_T_IQ4_XS: out->BS = 256; out->W = 32; out->has_sc = 4; break;
    case EM_T_Q2_K: out->BS = 256; out->W = 20; out->has_sc = 2; break;
    case EM_T_Q3_K: out->BS = 256; out->W = 28; out->has_sc = 1; break;
    }
    if (kt == EM_T_Q4_0 && R < 2)
        return em_err_set(err, EM_EINVAL, "wpack: Q4_0 rows are packed in pairs (group of %u)", R);
    out->K_pad = (K + out->BS - 1) / out->BS * out->BS;
    if ((kt != EM_T_F32 && kt != EM_T_F16) && out->K_pad != K)
        return em_err_set(err, EM_EFORMAT, "wpack: row of %u is not a multiple of the block", K);
    out->nb = out->K_pad / out->BS;
    uint32_t units = out->BS == 256 ? 4 : 1;   /* mm.comp's units per block */
    out->C = lanes > units ? lanes / units : 1;
    out->n_groups = (N + R - 1) / R;
    out->group_qw_bytes = (uint64_t)out->nb * out->W * R * 4;
    out->group_sc_bytes = (uint64_t)out->nb * R * 2 * out->has_sc;
    return 0;
}

/* The chunk of block b: its first block *b0 and its width *c. */
static void chunk_of(const em_wpack_layout *L, uint32_t b, uint32_t *b0, uint32_t *c)
{
    *b0 = b - b % L->C;
    *c = L->nb - *b0 < L->C ? L->nb - *b0 : L->C;
}

uint64_t em_wpack_word(const em_wpack_layout *L, uint32_t b, uint32_t r)
{
    uint32_t b0, c;
    chunk_of(L, b, &b0, &c);
    if (L->type == EM_T_Q4_0)
        return ((uint64_t)b0 * L->R + 2 * ((uint64_t)(r / 2) * c + (b - b0))) * L->W;
    return ((uint64_t)b0 * L->R + (uint64_t)r * c + (b - b0)) * L->W;
}

uint64_t em_wpack_scale(const em_wpack_layout *L, uint32_t b, uint32_t r)
{
    uint32_t b0, c, S = L->R < 8 ? L->R : 8;
    chunk_of(L, b, &b0, &c);
    return (uint64_t)b0 * L->R + ((uint64_t)(r / S) * c + (b - b0)) * S + r % S;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Q4_0 rows in pairs: the 32 bytes of rows 2p and 2p+1 of a block become 8
 * words, word w holding elements 4w..4w+3 of row 2p in bits 4i..4i+3 and of
 * row 2p+1 in bits 16+4i..16+4i+3, so that (word >> 4i) & 0x000F000F is
 * both rows' element 4w+i in two 16-bit halves (mm.comp multiplies that by
 * an 8-bit activation once for both rows). qw holds the GGUF quants of each
 * row (byte j: element j low, element j+16 high) on entry. */
static void pair_q4_0(const em_wpack_layout *L, uint32_t *qw)
{
    for (uint32_t b = 0; b < L->nb; b++) {
        for (uint32_t r = 0; r < L->R; r += 2) {
            uint32_t *dst = qw + em_wpack_word(L, b, r);
            uint8_t q[2][16];
            memcpy(q, dst, sizeof q);   /* rows r and r+1: 4 words each, adjacent */
            for (uint32_t w = 0; w < 8; w++) {
                uint32_t v = 0;
                for (uint32_t i = 0; i < 4; i++) {
                    uint32_t k = 4 * w + i;
                    for (uint32_t h = 0; h < 2; h++) {
                        uint32_t n = k < 16 ? q[h][k] & 0xFu : (uint32_t)q[h][k - 16] >> 4;
                        v |= n << (16 * h + 4 * i);
                    }
                }
                dst[w] = v;
            }
        }
    }
}

/* The 12 scale bytes of a Q4_K/Q5_K block as three words that a lane
 * unpacks with fixed shifts (common.glsl k4_scale_min): the low 4 bits of
 * the eight 6-bit scales as nibbles of w[0], of the eight mins in w[1],
 * their top 2 bits in w[2] (scale k at bits 2k, min k at 16 + 2k). The
 * GGUF packing needs byte selects per sub-block; this is the same 96 bits. */
static void k4_scales(const uint8_t *q, uint32_t *w)
{
    w[0] = w[1] = w[2] = 0;
    for (int k = 0; k < 8; k++) {
        uint8_t sc, m;
        em_k4_scale_min(k, q, &sc, &m);
        w[0] |= (uint32_t)(sc & 15) << (4 * k);
        w[1] |= (uint32_t)(m & 15) << (4 * k);
        w[2] |= (uint32_t)(sc >> 4) << (2 * k) | (uint32_t)(m >> 4) << (16 + 2 * k);
    }
}

void em_wpack_group(const em_wpack_layout *L, const void *const *rows, uint32_t *qw,
                    uint16_t *sc, float *tmp)
{
    const uint32_t R = L->R, W = L->W, nb = L->nb;
    memset(qw, 0, L->group_qw_bytes);
    if (L->has_sc)
        memset(sc, 0, L->group_sc_bytes);
    const em_ttype_info *src = em_ttype_get(L->src_type);
    for (uint32_t r = 0; r < R; r++) {
        const uint8_t *row = rows[r];
        if (!row)
            continue;
        if (L->type == EM_T_F32 || L->type == EM_T_F16) {
            /* via floats: handles conversion and padding alike */
            if (L->src_type == EM_T_F32) {
                memcpy(tmp, row, (size_t)L->K * 4);
            } else {
                em_dequant_row(L->src_type, row, tmp, L->K);
            }
            for (uint32_t k = L->K; k < L->K_pad; k++)
                tmp[k] = 0;
            for (uint32_t b = 0; b < nb; b++) {
                const float *x = tmp + (size_t)b * 32;
                uint32_t *dst = qw + em_wpack_word(L, b, r);
                for (uint32_t w = 0; w < W; w++) {
                    uint32_t v;
                    if (L->type == EM_T_F32) {
                        memcpy(&v, &x[w], 4);
                    } else if (L->src_type == EM_T_F16) {   /* keep the exact halves */
                        uint32_t e = b * 32 + 2 * w;
                        uint16_t lo = e < L->K ? rd16(row + 2 * (size_t)e) : 0;
                        uint16_t hi = e + 1 < L->K ? rd16(row + 2 * (size_t)(e + 1)) : 0;
                        v = lo | (uint32_t)hi << 16;
                    } else {
                        v = em_f32_to_f16(x[2 * w]) | (uint32_t)em_f32_to_f16(x[2 * w + 1]) << 16;
                    }
                    dst[w] = v;
                }
            }
            continue;
        }
        for (uint32_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * src->bytes;
            uint32_t *dst = qw + em_wpack_word(L, b, r) + (L->type == EM_T_Q4_0 ? (r & 1) * W : 0);
            uint16_t *side = L->has_sc ? sc + em_wpack_scale(L, b, r) * L->has_sc : NULL;
            const uint8_t *words = blk;
            switch (L->type) {
            case EM_T_Q8_0:
            case EM_T_Q4_0:
            case EM_T_IQ4_NL:   /* f16 d first, then the quants */
                side[0] = rd16(blk);
                words = blk + 2;
                break;
            case EM_T_MXFP4:    /* the E8M0 byte, then the quants */
                side[0] = blk[0];
                words = blk + 1;
                break;
            case EM_T_Q4_1:     /* f16 d, m, then the quants */
                side[0] = rd16(blk);
                side[1] = rd16(blk + 2);
                words = blk + 4;
                break;
            case EM_T_Q5_0:     /* f16 d, u32 qh, quants: side d, 0, qh */
            case EM_T_Q5_1:     /* f16 d, m, u32 qh, quants: side d, m, qh */
                side[0] = rd16(blk);
                side[1] = L->type == EM_T_Q5_1 ? rd16(blk + 2) : 0;
                words = blk + (L->type == EM_T_Q5_1 ? 4 : 2);
                side[2] = rd16(words);
                side[3] = rd16(words + 2);
                words += 4;
                break;
            case EM_T_Q6_K:   /* ql qh scales (208 bytes), then f16 d */
                side[0] = rd16(blk + 208);
                break;
            case EM_T_IQ4_XS: /* f16 d, u16 scales_h, u8 scales_l[4], then the quants */
                for (int k = 0; k < 4; k++)
                    side[k] = rd16(blk + 2 * k);
                words = blk + 8;
                break;
            case EM_T_Q2_K:   /* scales qs (80 bytes), then f16 d, dmin */
                side[0] = rd16(blk + 80);
                side[1] = rd16(blk + 82);
                break;
            case EM_T_Q3_K:   /* hmask qs (96 bytes), then the scales unpacked (below), f16 d */
                side[0] = rd16(blk + 108);
                break;
            default:          /* Q4_K, Q5_K: whole words */
                break;
            }
            /* whole words; Q3_K's last four are its scales, unpacked below */
            uint32_t nw = L->type == EM_T_Q3_K ? W - 4 : W;
            for (uint32_t w = 0; w < nw; w++)
                dst[w] = rd32(words + 4 * (size_t)w);
            if (L->type == EM_T_Q4_K || L->type == EM_T_Q5_K)
                k4_scales(blk + 4, dst + 1);
            if (L->type == EM_T_Q3_K)
                em_q3k_scales(blk + 96, (uint8_t *)(dst + 24));
        }
    }
    if (L->type == EM_T_Q4_0)
        pair_q4_0(L, qw);
}
