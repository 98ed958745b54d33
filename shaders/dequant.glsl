// dequant.glsl — element access to packed weights (see core/gpu/wpack.h):
// dq4(g, nb, b, lane, j4) returns elements 4*j4 .. 4*j4+3 of block b of row
// `lane` of group g (nb blocks per row). Needs qw[] and sc[] bound, R (rows
// per group), C (blocks per chunk) and one TYPE_* define. Used where single
// elements are wanted (embedding lookup); mm.comp fuses dequantization into
// its dot products instead.

#if defined(TYPE_F32)
const uint BS = 32, W = 32;
#elif defined(TYPE_F16)
const uint BS = 32, W = 16;
#elif defined(TYPE_Q8_0)
const uint BS = 32, W = 8;
#elif defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
const uint BS = 32, W = 4, SH = 1;
#elif defined(TYPE_Q4_1)
const uint BS = 32, W = 4, SH = 2;
#elif defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
const uint BS = 32, W = 4, SH = 4;
#elif defined(TYPE_Q4_K)
const uint BS = 256, W = 36;
#elif defined(TYPE_Q5_K)
const uint BS = 256, W = 44;
#elif defined(TYPE_Q6_K)
const uint BS = 256, W = 52;
#elif defined(TYPE_IQ4_XS)
const uint BS = 256, W = 32, SH = 4;
#elif defined(TYPE_Q2_K)
const uint BS = 256, W = 20, SH = 2;
#elif defined(TYPE_Q3_K)
const uint BS = 256, W = 28;
#else
#error "define one TYPE_*"
#endif

uint qword(uint rw, uint w)
{
    return qw[rw + w];
}

vec4 dq4(uint g, uint nb, uint b, uint lane, uint j4)
{
    // block b is in the chunk of c blocks from b0 (core/gpu/wpack.h): rw is word
    // 0 of row `lane`'s copy of it (Q4_0: of its row pair), si the half of
    // its scale, S = min(R, 8) rows (one 16-byte word of halves) at a time
    const uint b0 = b - b % C, c = min(C, nb - b0), S = min(R, 8u);
#if defined(TYPE_Q4_0)
    const uint rw = ((g * nb + b0) * R + 2u * ((lane / 2u) * c + (b - b0))) * W;
#else
    const uint rw = ((g * nb + b0) * R + lane * c + (b - b0)) * W;
#endif
    const uint si = (g * nb + b0) * R + ((lane / S) * c + (b - b0)) * S + lane % S;
#if defined(TYPE_F32)
    return vec4(uintBitsToFloat(qword(rw, 4u * j4)), uintBitsToFloat(qword(rw, 4u * j4 + 1u)),
                uintBitsToFloat(qword(rw, 4u * j4 + 2u)), uintBitsToFloat(qword(rw, 4u * j4 + 3u)));
#elif defined(TYPE_F16)
    return vec4(unpackHalf2x16(qword(rw, 2u * j4)), unpackHalf2x16(qword(rw, 2u * j4 + 1u)));
#elif defined(TYPE_Q8_0)
    return half_at(si) * i8x4(qword(rw, j4));
#elif defined(TYPE_Q4_0)
    // rows in pairs (core/gpu/wpack.h): word j4 of the pair, this row's half
    uint q = qword(rw, j4) >> (16u * (lane & 1u));
    return half_at(si) * (vec4(q & 15u, (q >> 4) & 15u, (q >> 8) & 15u, (q >> 12) & 15u) - 8.0);
#elif defined(TYPE_MXFP4)
    // GGUF nibbles as IQ4_NL's; the E8M0 byte in row `lane`'s half slot
    const uint q = (qword(rw, j4 % 4u) >> (j4 < 4u ? 0u : 4u)) & 0x0F0F0F0Fu;
    return e8m0_half((sc[si >> 1] >> (16u * (si & 1u))) & 0xFFu) * nib4(q);
#elif defined(TYPE_IQ4_NL) || defined(TYPE_Q4_1) || defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
    // GGUF nibbles: word j4 % 4, the low nibbles for j4 < 4, else the high;
    // the side halves of the block at si * SH (core/gpu/wpack.h)
    const uint sh = j4 < 4u ? 0u : 4u, q = (qword(rw, j4 % 4u) >> sh) & 0x0F0F0F0Fu;
    const float d = half_at(si * SH);
#if defined(TYPE_IQ4_NL)
    return d * nib4(q);
#elif defined(TYPE_Q4_1)
    return d * u8x4(q) + half_at(si * SH + 1u);
#else
    // the fifth bits of elements 4 * j4 .. + 3 (bit k of qh: element k)
    const uint qh = sc[(si * SH) / 2u + 1u], hb = (qh >> (4u * j4)) & 15u;
    const vec4 v = u8x4(q | (((hb & 1u) | ((hb & 2u) << 7) | ((hb & 4u) << 14) | ((hb & 8u) << 21)) << 4));
#if defined(TYPE_Q5_0)
    return d * (v - 16.0);
#else
    return d * v + half_at(si * SH + 1u);
#endif
#endif
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
    vec2 dm = unpackHalf2x16(qword(rw, 0u));
    uint sub = j4 / 8u;                       // sub-block of 32 (0..7)
    uint i = sub / 2u, w = j4 & 7u;
    vec4 smv = k4_scale_min(sub & ~1u, qword(rw, 1u), qword(rw, 2u), qword(rw, 3u));
    vec2 sm = (sub & 1u) == 0u ? smv.xy : smv.zw;
#if defined(TYPE_Q4_K)
    uint q = qword(rw, 4u + 8u * i + w);
    vec4 v = (sub & 1u) == 0u ? u4x4(q) : u4x4(q >> 4);
#else
    uint q = qword(rw, 12u + 8u * i + w);
    uint h = qword(rw, 4u + w);
    vec4 v = (sub & 1u) == 0u ? u8x4((q & 0x0F0F0F0Fu) | (((h >> (2u * i)) & 0x01010101u) << 4))
                              : u8x4(((q >> 4) & 0x0F0F0F0Fu) | (((h >> (2u * i + 1u)) & 0x01010101u) << 4));
#endif
    return dm.x * sm.x * v - dm.y * sm.y;
#elif defined(TYPE_Q2_K) || defined(TYPE_Q3_K)
    // element 4 j4 is l0 .. l0 + 3 of sub-block (half n, shift 2j, h): qs
    // bytes 32n + 16h + l, scale is = 8n + 2j + h (core/gpu/wpack.h)
    const uint n = j4 / 32u, r = j4 % 32u, j = r / 8u, h = (r / 4u) % 2u, l4 = r % 4u, is = 8u * n + 2u * j + h;
#if defined(TYPE_Q2_K)
    const uint q = (qword(rw, 4u + 8u * n + 4u * h + l4) >> (2u * j)) & 0x03030303u;
    const uint sb = (qword(rw, is / 4u) >> (8u * (is % 4u))) & 0xFFu;
    return half_at(si * SH) * float(sb & 15u) * u8x4(q) - half_at(si * SH + 1u) * float(sb >> 4);
#else
    const uint q = ((qword(rw, 8u + 8u * n + 4u * h + l4) >> (2u * j)) & 0x03030303u) |
                   (((qword(rw, 4u * h + l4) >> (4u * n + j)) & 0x01010101u) << 2);
    const float s6 = float(int((qword(rw, 24u + is / 4u) >> (8u * (is % 4u))) & 0xFFu) - 32);
    return half_at(si) * s6 * (u8x4(q) - 4.0);
#endif
#elif defined(TYPE_IQ4_XS)
    // sub-block ib of 32: its 16 bytes are words 4 ib ..; side d|scales_h, scales_l
    const uint ib = j4 / 8u, k = j4 % 8u;
    const uint q = (qword(rw, 4u * ib + k % 4u) >> (k < 4u ? 0u : 4u)) & 0x0F0F0F0Fu;
    const uint s0 = sc[(si * SH) / 2u], s1 = sc[(si * SH) / 2u + 1u];
    const float ls = float(int(((s1 >> (4u * ib)) & 15u) | (((s0 >> (16u + 2u * ib)) & 3u) << 4)) - 32);
    return unpackHalf2x16(s0).x * ls * nib4(q);
#elif defined(TYPE_Q6_K)
    float d = half_at(si);
    uint h = j4 / 32u;                        // half of 128
    uint r = j4 & 31u;                        // vec4 within the half
    uint part = r / 8u, w = r & 7u;           // which of the 4 quarter streams, word
    uint qa = qword(rw, 16u * h + w), qb = qword(rw, 16u * h + 8u + w);
    uint qh = qword(rw, 32u + 8u * h + w);
    uint lo = (part & 1u) == 0u ? qa : qb;
    uint nib = part < 2u ? (lo & 0x0F0F0F0Fu) : ((lo >> 4) & 0x0F0F0F0Fu);
    vec4 v = u8x4(nib | (((qh >> (2u * part)) & 0x03030303u) << 4)) - 32.0;
    float sc6 = i8_at(qword(rw, 48u + 2u * h), qword(rw, 49u + 2u * h), (w >> 2) + 2u * part);
    return d * sc6 * v;
#endif
}
