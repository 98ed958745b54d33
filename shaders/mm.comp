// mm.comp — quantized matrix x activations: y[t][n] = sum_k W[n][k] * in[t][k]
// for every weight type (one SPIR-V module per type via -DTYPE_*); decode
// (T = 1), batched decode and prefill (T tokens, TN per pass) alike.
//
// Weights are packed in groups of RPW rows (core/gpu/wpack.h; rec0 in main:
// in chunks of C blocks, row by row), and the f16 block scales of Q4_0,
// Q8_0, IQ4_NL, Q3_K and Q6_K (and the other halves of Q4_1, Q5, Q2_K and
// IQ4_XS) in the same chunks, eight rows (one 16-byte texel of
// halves) at a time (s0 in main). A workgroup is one
// subgroup of L lanes and owns one group; the lanes split the rows into
// units (a block, or a part of a K-quant block) and take every L-th one, so
// each lane loads its slice of the input once per pass and reuses it for
// all RPW rows, every load moves 16 bytes, and at each row the lanes read
// adjacent words (the chunks of C blocks: one stream per workgroup). The
// per-row partial sums are added across the lanes once at the end.
// (On llvmpipe a lane is a SIMD lane and every load is per lane: this shape
// keeps the loads few and wide. On GPUs the lanes read consecutive words.)
// Q4_0 rows come in pairs that share their 32 bytes per block (core/gpu/wpack.h)
// and are multiplied as integers against 8-bit activations (pair_dot).
// The tests compare Q4_0 with a reference that quantizes its input the same
// way (tests/gpu/test_kernels.c).
//
// Fusions (FLAGS): NORM_IN applies the RMS norm of the input rows times a
// norm weight; BIAS adds a bias; ADD_OUT accumulates into y (residual);
// SWIGLU treats row pairs (2j, 2j+1) as (gate_j, up_j) and writes
// silu(gate) * up to column j (with GELU: gelu(gate) * up, GELU's tanh
// form; with OAI: gpt-oss's clamped min(gate, 7) * sigmoid(1.702 min(gate, 7))
// * (clamp(up, -7, 7) + 1)); GATHER_IN reads input row idx[t] of the step
// buffer instead of row t.
//
// EXPERT (mixture of experts): the matrix is the experts' matrices of N
// rows each, stacked (each padded to whole row groups); the grid's z is the
// expert (within this chunk of them, from row0 / N on); a workgroup runs
// only the (token, slot) pairs the router sent to its expert, as
// moe_route.comp lists them in the buffer bound in the step buffer's place:
// at gather_off, (count, start) per expert, start an int index into that
// buffer of its pair list, a pair p being token p / MK's (p % MK)-th choice
// (MK experts per token). Output row p; input row p, or with EXPERT_TOK the
// token p / MK. An expert no token chose reads nothing.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "common.glsl"

layout(local_size_x_id = 0) in;                // L lanes: the subgroup size
layout(constant_id = 1) const uint RPW = 8;    // rows per workgroup (multiple of 8)
layout(constant_id = 2) const uint TN = 1;     // tokens per pass
layout(constant_id = 3) const uint FLAGS = 0;
layout(constant_id = 4) const uint MK = 1;     // EXPERT: experts each token uses

const uint F_NORM_IN = 1u, F_BIAS = 2u, F_ADD_OUT = 4u, F_SWIGLU = 8u, F_GATHER_IN = 16u, F_GELU = 32u;
const uint F_EXPERT = 64u, F_EXPERT_TOK = 128u, F_OAI = 256u;

// The packed weights are a uniform texel buffer of uvec4 texels: llvmpipe
// fetches texels through its texture path, about half the cost of its
// lane-by-lane storage-buffer loads (docs/PERFORMANCE.md).
layout(binding = 0) uniform usamplerBuffer qwt;
#define QW(i) texelFetch(qwt, int(i))
// The f16 block scales of Q4_0, Q8_0, IQ4_NL, Q3_K and Q6_K (MXFP4: its
// E8M0 byte): texel (g * nb + b) * RPW / 8 + r / 8 holds rows r..r+7 of
// block b (two per word); Q4_1's, Q5's, Q2_K's and IQ4_XS's SIDE_H halves
// per row fill SIDE_H texels from that texel times SIDE_H. Q4_K and Q5_K do
// not read it; it is still a texel binding (shaders/meson.build) so that
// every variant has the same descriptor set layout.
layout(binding = 1) uniform usamplerBuffer sct;

// The texel of the scales of rows r .. r+7 (r a multiple of 8) of the block
// whose first texel is s0, in a chunk of c blocks (main).
uvec4 scales8(uint s0, uint c, uint r)
{
    return texelFetch(sct, int(s0 + (r / 8u) * c));
}

// The word of scales8(s0, c, r & ~7) that holds rows r & ~1 and r | 1, chosen
// by selects rather than a dynamically indexed component.
uint scale_pair(uvec4 sw, uint r)
{
    return (r & 4u) != 0u ? ((r & 2u) != 0u ? sw.w : sw.z) : ((r & 2u) != 0u ? sw.y : sw.x);
}

// Half k of the word w of scales: the f16 scale, or MXFP4's E8M0 byte's.
float side_scale(uint w, uint k)
{
#if defined(TYPE_MXFP4)
    return e8m0_half((w >> (16u * k)) & 0xFFu);
#else
    return unpackHalf2x16(w)[k];
#endif
}

// Component i (0..3) of v, by selects.
uint comp4(uvec4 v, uint i)
{
    return i == 0u ? v.x : i == 1u ? v.y : i == 2u ? v.z : v.w;
}

layout(binding = 2) uniform usamplerBuffer xt;
layout(std430, binding = 3) buffer YOut { float y[]; };
layout(std430, binding = 4) readonly buffer Vecs { vec4 vecs4[]; };
layout(std430, binding = 5) readonly buffer Step { int step[]; };

layout(push_constant) uniform Push {
    uint K;          // row length (elements; padded to the block size)
    uint k_real;     // true row length (divisor of the RMS norm)
    uint N;          // rows in this dispatch (weight chunk)
    uint T;          // tokens
    uint x_stride;   // floats between input rows
    uint y_stride;   // floats between output rows
    uint y_off;      // float offset of this chunk's first output in a row
    uint row0;       // index of this chunk's first row in the whole matrix (bias)
    uint norm_off;   // float offset of the norm weight in vecs (NORM_IN; multiple of 4)
    uint bias_off;   // float offset of the bias in vecs (BIAS)
    uint gather_off; // int offset of the row index list in step (GATHER_IN)
    float eps;       // RMS norm epsilon (NORM_IN)
} pc;

// EU: elements per unit; UPB: units per block; W4: 16-byte words per block
#if defined(TYPE_F32)
const uint EU = 32u, UPB = 1u, W4 = 8u;
#elif defined(TYPE_F16)
const uint EU = 32u, UPB = 1u, W4 = 4u;
#elif defined(TYPE_Q8_0)
const uint EU = 32u, UPB = 1u, W4 = 2u;
#elif defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
const uint EU = 32u, UPB = 1u, W4 = 1u;
#elif defined(TYPE_Q4_1)
const uint EU = 32u, UPB = 1u, W4 = 1u;
#define SIDE_H 2   // halves per row and block in sct: d, m
#elif defined(TYPE_Q5_0) || defined(TYPE_Q5_1)
const uint EU = 32u, UPB = 1u, W4 = 1u;
#define SIDE_H 4   // d, m (Q5_1) or 0, then the 32 fifth bits
#elif defined(TYPE_IQ4_XS)
const uint EU = 64u, UPB = 4u, W4 = 8u;
#define SIDE_H 4   // d, scales_h, scales_l (4 bytes)
#elif defined(TYPE_Q2_K)
const uint EU = 64u, UPB = 4u, W4 = 5u;
#define SIDE_H 2   // d, dmin
#elif defined(TYPE_Q3_K)
const uint EU = 64u, UPB = 4u, W4 = 7u;
#elif defined(TYPE_Q4_K)
const uint EU = 64u, UPB = 4u, W4 = 9u;
#elif defined(TYPE_Q5_K)
const uint EU = 64u, UPB = 4u, W4 = 11u;
#elif defined(TYPE_Q6_K)
const uint EU = 64u, UPB = 4u, W4 = 13u;
#else
#error "define one TYPE_*"
#endif
const uint XV = EU / 4u;   // vec4 of input per unit and token
// blocks per chunk of the packed layout: those of the lanes' consecutive units
const uint C = gl_WorkGroupSize.x > UPB ? gl_WorkGroupSize.x / UPB : 1u;
#if defined(TYPE_Q4_0)
const uint UPR = 2u;   // rows per record: Q4_0 rows come in pairs
#else
const uint UPR = 1u;
#endif

// The input slice of one unit for TN tokens, and its sums per part (the
// K-quant formulas subtract min * sum(x) per sub-block).
vec4 xv[TN * XV];

// sum of x over vec4 range [a, a+n) of token t
float xsum(uint t, uint a, uint n)
{
    vec4 s = vec4(0.0);
    for (uint i = 0u; i < n; i++)
        s += xv[t * XV + a + i];
    return s.x + s.y + s.z + s.w;
}

#if defined(TYPE_Q4_0)
// Q4_0 multiplies 8-bit activations, as the reference does: per unit (one
// block of 32) and token, xd = amax / 127 rounded to f16 and the values
// rounded to integers xa = round(x * 127 / amax) (the reference's Q8_0
// quantization of the input rows), with their sum xsa for the -8 offset.
int xa[TN * 32u];
float xd[TN];
int xsa[TN];
void unit_sums()
{
    for (uint t = 0u; t < TN; t++) {
        vec4 mx = vec4(0.0);
        for (uint i = 0u; i < 8u; i++)
            mx = max(mx, abs(xv[t * XV + i]));
        const float d = max(max(mx.x, mx.y), max(mx.z, mx.w)) / 127.0;
        const float id = d > 0.0 ? 1.0 / d : 0.0;
        // (past the f16 range the f32 scale is kept rather than infinity)
        xd[t] = d <= 65504.0 ? unpackHalf2x16(packHalf2x16(vec2(d, 0.0))).x : d;
        ivec4 sum = ivec4(0);
        for (uint i = 0u; i < 8u; i++) {
            const vec4 v = xv[t * XV + i] * id;
            const ivec4 q = ivec4(sign(v) * floor(abs(v) + 0.5));   // half away from zero
            xa[t * 32u + 4u * i] = q.x;
            xa[t * 32u + 4u * i + 1u] = q.y;
            xa[t * 32u + 4u * i + 2u] = q.z;
            xa[t * 32u + 4u * i + 3u] = q.w;
            sum += q;
        }
        xsa[t] = sum.x + sum.y + sum.z + sum.w;
    }
}

// The products of unit u (one block) of the row pair whose 32 bytes start at
// word q0, with block scales d (core/gpu/wpack.h): (word >> 4i) & 0x000F000F is
// element 4w+i of both rows in two 16-bit halves, one integer multiply per
// element gives both rows' products, and 16 of them fit each half
// (|sum| <= 16 * 15 * 127 < 2^15) before they are taken apart.
void pair_dot(uint q0, vec2 d, inout float acc0[TN], inout float acc1[TN])
{
    const uvec4 A = QW(q0), B = QW(q0 + 1u);
    int wq[32];
    for (uint w = 0u; w < 4u; w++)
        for (uint i = 0u; i < 4u; i++) {
            wq[4u * w + i] = int((A[w] >> (4u * i)) & 0x000F000Fu);
            wq[16u + 4u * w + i] = int((B[w] >> (4u * i)) & 0x000F000Fu);
        }
    for (uint t = 0u; t < TN; t++) {
        int s0 = 0, s1 = 0;
        for (uint k = 0u; k < 16u; k++) {
            s0 += wq[k] * xa[t * 32u + k];
            s1 += wq[16u + k] * xa[t * 32u + 16u + k];
        }
        const int l0 = (s0 << 16) >> 16, l1 = (s1 << 16) >> 16;   // the low halves, signed
        const int off = 8 * xsa[t];
        acc0[t] += d.x * xd[t] * float(l0 + l1 - off);
        acc1[t] += d.y * xd[t] * float(((s0 - l0) >> 16) + ((s1 - l1) >> 16) - off);
    }
}
#else
// The sums a unit's formula subtracts (offset or min times the sum of x per
// part), per token: the same for every row, so made once per unit.
vec4 xs[TN];
void unit_sums()
{
    for (uint t = 0u; t < TN; t++) {
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
        xs[t] = vec4(xsum(t, 0u, 8u), xsum(t, 8u, 8u), 0.0, 0.0);
#elif defined(SIDE_H) && !defined(TYPE_IQ4_XS) && !defined(TYPE_Q2_K)
        xs[t] = vec4(xsum(t, 0u, 8u), 0.0, 0.0, 0.0);
#elif defined(TYPE_Q6_K) || defined(TYPE_Q2_K) || defined(TYPE_Q3_K)
        xs[t] = vec4(xsum(t, 0u, 4u), xsum(t, 4u, 4u), xsum(t, 8u, 4u), xsum(t, 12u, 4u));
#else
        xs[t] = vec4(0.0);
#endif
    }
}
#endif


#if defined(SIDE_H)
// Add the dot products of unit u of the row whose block starts at word q0,
// with its side words sw (core/gpu/wpack.h: d|m, qh; IQ4_XS d|scales_h,
// scales_l), to acc[0..TN): Q4_1 x = d*q + m, Q5_0 x = d*(q5 - 16),
// Q5_1 x = d*q5 + m (a unit is the block), IQ4_XS x = d*(ls - 32)*NIB[q]
// (a unit is sub-blocks 2i and 2i + 1, 16 bytes each), Q2_K below.
void unit_dot_side(uint q0, uint u, uvec2 sw, inout float acc[TN])
{
#if defined(TYPE_Q2_K)
    // unit i = half n's shifts 2j0 and 2j0 + 2 (j0 = 2 (i % 2)): its four
    // sub-blocks k = 2 jj + h of 16 take qs bytes 32n + 16h + l at shift
    // 2 (j0 + jj) and scale byte 4i + k (low 4 bits scale, high 4 min)
    const uint i = u % UPB, n = i / 2u, j0 = 2u * (i % 2u);
    const uint scw = comp4(QW(q0), i);
    const uvec4 A = QW(q0 + 1u + 2u * n), B = QW(q0 + 2u + 2u * n);
    const vec2 dm = unpackHalf2x16(sw.x);
    vec4 v[16];
    for (uint jj = 0u; jj < 2u; jj++)
        for (uint w = 0u; w < 4u; w++) {
            const uint sh = 2u * (j0 + jj);
            v[8u * jj + w] = u8x4((A[w] >> sh) & 0x03030303u);
            v[8u * jj + 4u + w] = u8x4((B[w] >> sh) & 0x03030303u);
        }
    const vec4 sc = vec4(float(scw & 15u), float((scw >> 8) & 15u), float((scw >> 16) & 15u), float((scw >> 24) & 15u));
    const vec4 mn = vec4(float((scw >> 4) & 15u), float((scw >> 12) & 15u), float((scw >> 20) & 15u), float(scw >> 28));
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        vec4 s4 = vec4(0.0);
        for (uint w = 0u; w < 4u; w++)
            s4 += vec4(dot(v[w], xv[o + w]), dot(v[4u + w], xv[o + 4u + w]), dot(v[8u + w], xv[o + 8u + w]),
                       dot(v[12u + w], xv[o + 12u + w]));
        acc[t] += dm.x * dot(sc, s4) - dm.y * dot(mn, xs[t]);
    }
#elif defined(TYPE_IQ4_XS)
    const uint i = u % UPB;
    const uvec4 qa = QW(q0 + 2u * i), qb = QW(q0 + 2u * i + 1u);
    const float d = unpackHalf2x16(sw.x).x;
    const uint sh = sw.x >> 16, sl = sw.y;
    const float fa = d * float(int(((sl >> (8u * i)) & 15u) | (((sh >> (4u * i)) & 3u) << 4)) - 32);
    const float fb = d * float(int(((sl >> (8u * i + 4u)) & 15u) | (((sh >> (4u * i + 2u)) & 3u) << 4)) - 32);
    vec4 v[16];   // the unit's elements 4k .. 4k + 3
    for (uint w = 0u; w < 4u; w++) {
        v[w] = nib4(qa[w]);
        v[4u + w] = nib4(qa[w] >> 4);
        v[8u + w] = nib4(qb[w]);
        v[12u + w] = nib4(qb[w] >> 4);
    }
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        float sa = 0.0, sb = 0.0;
        for (uint k = 0u; k < 8u; k++) {
            sa += dot(v[k], xv[o + k]);
            sb += dot(v[8u + k], xv[o + 8u + k]);
        }
        acc[t] += fa * sa + fb * sb;
    }
#else
    // the nibbles (and fifth bits) through the f16 converter: the halves
    // 0x6400 | v are 1024 + v, exact, two elements per conversion, elements
    // (4w, 4w + 2) from bits 0 and 16 of a word and (4w + 1, 4w + 3) from
    // bits 8 and 24
    const uvec4 q = QW(q0);
    const vec2 dm = unpackHalf2x16(sw.x);
    vec2 e[16];   // [4w + 2h + o]: half h (low/high nibbles), odd o, of word w
    for (uint w = 0u; w < 4u; w++) {
        uint a = q[w], b = q[w] >> 8, c = q[w] >> 4, d = q[w] >> 12;
#if defined(TYPE_Q4_1)
        const uint M = 0x000F000Fu;
#else
        const uint M = 0x001F001Fu;
        const uint hl = sw.y >> (4u * w), hh = sw.y >> (16u + 4u * w);   // bit k: element 4w + k
        a = (a & 0x000F000Fu) | ((hl & 1u) << 4) | ((hl & 4u) << 18);
        b = (b & 0x000F000Fu) | ((hl & 2u) << 3) | ((hl & 8u) << 17);
        c = (c & 0x000F000Fu) | ((hh & 1u) << 4) | ((hh & 4u) << 18);
        d = (d & 0x000F000Fu) | ((hh & 2u) << 3) | ((hh & 8u) << 17);
#endif
        e[4u * w] = unpackHalf2x16((a & M) | 0x64006400u) - 1024.0;
        e[4u * w + 1u] = unpackHalf2x16((b & M) | 0x64006400u) - 1024.0;
        e[4u * w + 2u] = unpackHalf2x16((c & M) | 0x64006400u) - 1024.0;
        e[4u * w + 3u] = unpackHalf2x16((d & M) | 0x64006400u) - 1024.0;
    }
#if defined(TYPE_Q5_0)
    const float m = -16.0 * dm.x;
#else
    const float m = dm.y;
#endif
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        float s = 0.0;
        for (uint w = 0u; w < 4u; w++) {
            const vec4 xl = xv[o + w], xh = xv[o + 4u + w];
            s += dot(e[4u * w], xl.xz) + dot(e[4u * w + 1u], xl.yw) + dot(e[4u * w + 2u], xh.xz) +
                 dot(e[4u * w + 3u], xh.yw);
        }
        acc[t] += dm.x * s + m * xs[t].x;
    }
#endif
}

#endif


// Add the dot products of unit u of the row whose block starts at word q0
// (block scale d where the type has one) to acc[0..TN).
void unit_dot(uint q0, uint u, float d, inout float acc[TN])
{
#if defined(TYPE_F32)
    for (uint w = 0u; w < 8u; w++) {
        const vec4 wv = uintBitsToFloat(QW(q0 + w));
        for (uint t = 0u; t < TN; t++)
            acc[t] += dot(wv, xv[t * XV + w]);
    }
#elif defined(TYPE_F16)
    for (uint w = 0u; w < 4u; w++) {
        const uvec4 q = QW(q0 + w);
        const vec4 a = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
        const vec4 b = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
        for (uint t = 0u; t < TN; t++)
            acc[t] += dot(a, xv[t * XV + 2u * w]) + dot(b, xv[t * XV + 2u * w + 1u]);
    }
#elif defined(TYPE_Q8_0)
    const uvec4 a = QW(q0), b = QW(q0 + 1u);
    const vec4 w0 = i8x4(a.x), w1 = i8x4(a.y), w2 = i8x4(a.z), w3 = i8x4(a.w);
    const vec4 w4 = i8x4(b.x), w5 = i8x4(b.y), w6 = i8x4(b.z), w7 = i8x4(b.w);
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        acc[t] += d * (dot(w0, xv[o]) + dot(w1, xv[o + 1u]) + dot(w2, xv[o + 2u]) + dot(w3, xv[o + 3u]) +
                       dot(w4, xv[o + 4u]) + dot(w5, xv[o + 5u]) + dot(w6, xv[o + 6u]) + dot(w7, xv[o + 7u]));
    }
#elif defined(TYPE_Q3_K)
    // unit i as Q2_K's: qs bytes 32n + 16h + l at shift 2j, the third bit
    // bit 4n + j of hmask byte 16h + l, x = d * (scale - 32) * (q3 - 4);
    // the scales unpacked to bytes (core/gpu/wpack.c), 4i + k in word i
    const uint i = u % UPB, n = i / 2u, j0 = 2u * (i % 2u);
    const uvec4 HA = QW(q0), HB = QW(q0 + 1u), A = QW(q0 + 2u + 2u * n), B = QW(q0 + 3u + 2u * n);
    const uint scw = comp4(QW(q0 + 6u), i);
    vec4 v[16];
    for (uint jj = 0u; jj < 2u; jj++)
        for (uint w = 0u; w < 4u; w++) {
            const uint sh = 2u * (j0 + jj), hb = 4u * n + j0 + jj;
            v[8u * jj + w] = u8x4(((A[w] >> sh) & 0x03030303u) | (((HA[w] >> hb) & 0x01010101u) << 2));
            v[8u * jj + 4u + w] = u8x4(((B[w] >> sh) & 0x03030303u) | (((HB[w] >> hb) & 0x01010101u) << 2));
        }
    const vec4 sc = u8x4(scw) - 32.0;
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        vec4 s4 = vec4(0.0);
        for (uint w = 0u; w < 4u; w++)
            s4 += vec4(dot(v[w], xv[o + w]), dot(v[4u + w], xv[o + 4u + w]), dot(v[8u + w], xv[o + 8u + w]),
                       dot(v[12u + w], xv[o + 12u + w]));
        acc[t] += d * dot(sc, s4 - 4.0 * xs[t]);
    }
#elif defined(TYPE_IQ4_NL) || defined(TYPE_MXFP4)
    const uvec4 q = QW(q0);
    vec4 lo[4], hi[4];
    for (uint w = 0u; w < 4u; w++) {
        lo[w] = nib4(q[w]);
        hi[w] = nib4(q[w] >> 4);
    }
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        float s = 0.0;
        for (uint w = 0u; w < 4u; w++)
            s += dot(lo[w], xv[o + w]) + dot(hi[w], xv[o + 4u + w]);
        acc[t] += d * s;
    }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
    // unit = sub-block pair i (64 elements): low nibbles are sub-block 2i,
    // high nibbles 2i+1; x = d*sc*q - dmin*m per sub-block
    const uint i = u % UPB;
    const uvec4 h = QW(q0);                                  // d|dmin, scales[12]
    const vec2 dm = unpackHalf2x16(h.x);
    const vec4 smv = k4_scale_min(2u * i, h.y, h.z, h.w);   // (sc, m) of 2i and 2i+1
#if defined(TYPE_Q4_K)
    const uvec4 qa = QW(q0 + 1u + 2u * i), qb = QW(q0 + 2u + 2u * i);
#else
    const uvec4 qa = QW(q0 + 3u + 2u * i), qb = QW(q0 + 4u + 2u * i);
    const uvec4 ha = QW(q0 + 1u), hb = QW(q0 + 2u);          // qh: bit 2i / 2i+1 of byte l
#endif
    vec4 lo[8], hi[8];
    for (uint w = 0u; w < 8u; w++) {
        const uint q = w < 4u ? qa[w] : qb[w - 4u];
#if defined(TYPE_Q4_K)
        lo[w] = u4x4(q);
        hi[w] = u4x4(q >> 4);
#else
        const uint qh = w < 4u ? ha[w] : hb[w - 4u];
        lo[w] = u8x4((q & 0x0F0F0F0Fu) | (((qh >> (2u * i)) & 0x01010101u) << 4));
        hi[w] = u8x4(((q >> 4) & 0x0F0F0F0Fu) | (((qh >> (2u * i + 1u)) & 0x01010101u) << 4));
#endif
    }
    // the four factors once per row, not per token (512-token Q4_K product
    // 70.5-70.8 -> 68.2-68.7 ms)
    const vec4 f = vec4(dm.x * smv.x, dm.x * smv.z, -dm.y * smv.y, -dm.y * smv.w);
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        float sa = 0.0, sb = 0.0;
        for (uint w = 0u; w < 8u; w++) {
            sa += dot(lo[w], xv[o + w]);
            sb += dot(hi[w], xv[o + 8u + w]);
        }
        acc[t] += dot(f, vec4(sa, sb, xs[t].x, xs[t].y));
    }
#elif defined(TYPE_Q6_K)
    // unit = (half hf, l-range s of 16): elements 128*hf + 16*s + l + 32*p,
    // l < 16, p < 4; value d * scale[8*hf + s + 2p] * (q6 - 32)
    const uint hf = (u % UPB) / 2u, s = u % 2u;
    const uvec4 A = QW(q0 + 4u * hf + s), B = QW(q0 + 4u * hf + 2u + s);
    const uvec4 H = QW(q0 + 8u + 2u * hf + s), C = QW(q0 + 12u);
    const uint cw0 = hf == 0u ? C.x : C.z, cw1 = hf == 0u ? C.y : C.w;   // the half's 8 scales
    const float c0 = i8_at(cw0, cw1, s), c1 = i8_at(cw0, cw1, s + 2u);
    const float c2 = i8_at(cw0, cw1, s + 4u), c3 = i8_at(cw0, cw1, s + 6u);
    vec4 v0[4], v1[4], v2[4], v3[4];
    for (uint w = 0u; w < 4u; w++) {
        const uint qa = A[w], qb = B[w], qh = H[w];
        v0[w] = u8x4((qa & 0x0F0F0F0Fu) | ((qh & 0x03030303u) << 4));
        v1[w] = u8x4((qb & 0x0F0F0F0Fu) | (((qh >> 2) & 0x03030303u) << 4));
        v2[w] = u8x4(((qa >> 4) & 0x0F0F0F0Fu) | (((qh >> 4) & 0x03030303u) << 4));
        v3[w] = u8x4(((qb >> 4) & 0x0F0F0F0Fu) | (((qh >> 6) & 0x03030303u) << 4));
    }
    for (uint t = 0u; t < TN; t++) {
        const uint o = t * XV;
        float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (uint w = 0u; w < 4u; w++) {
            s0 += dot(v0[w], xv[o + w]);
            s1 += dot(v1[w], xv[o + 4u + w]);
            s2 += dot(v2[w], xv[o + 8u + w]);
            s3 += dot(v3[w], xv[o + 12u + w]);
        }
        acc[t] += d * (c0 * (s0 - 32.0 * xs[t].x) + c1 * (s1 - 32.0 * xs[t].y) +
                       c2 * (s2 - 32.0 * xs[t].z) + c3 * (s3 - 32.0 * xs[t].w));
    }
#endif
}

// vec4 index (within an input row) of the i-th vec4 of unit u
uint unit_x4(uint u, uint i)
{
#if defined(TYPE_Q6_K)
    // parts p of 16 elements at 128*hf + 32p + 16s
    const uint sb = u / UPB, hf = (u % UPB) / 2u, s = u % 2u;
    return sb * 64u + hf * 32u + (i / 4u) * 8u + s * 4u + i % 4u;
#else
    return u * XV + i;
#endif
}

void main()
{
    const uint L = gl_WorkGroupSize.x;
    const uint lane = gl_SubgroupInvocationID;   // = the local index: one subgroup (required size)
    const bool expert = (FLAGS & F_EXPERT) != 0u;
    // the weights' row group (an expert's groups follow the previous one's),
    // and this workgroup's rows within its matrix
    const uint z = expert ? gl_WorkGroupID.z : 0u;
    const uint g = gl_WorkGroupID.x + z * (pc.N / RPW);
    const uint r0 = gl_WorkGroupID.x * RPW;
    const uint nb = pc.K / (EU * UPB);
    const uint n_units = pc.K / EU;
    const uint xs4 = pc.x_stride / 4u;
    const uint ex = pc.row0 / max(pc.N, 1u) + z;   // EXPERT: the expert, in the whole stack
    const uint T = expert ? uint(step[pc.gather_off + 2u * ex]) : pc.T;
    const uint lstart = expert ? uint(step[pc.gather_off + 2u * ex + 1u]) : 0u;

    for (uint t0 = gl_WorkGroupID.y * TN; t0 < T; t0 += TN * gl_NumWorkGroups.y) {
        float acc[RPW][TN];
        float ss[TN];
        uint xrow[TN], orow[TN];   // input and output rows
        for (uint t = 0u; t < TN; t++) {
            ss[t] = 0.0;
            const uint tt = min(t0 + t, T - 1u);
            const uint p = expert ? uint(step[lstart + tt]) : tt;
            orow[t] = p;
            xrow[t] = ((FLAGS & F_GATHER_IN) != 0u ? uint(step[pc.gather_off + tt])
                       : (FLAGS & F_EXPERT_TOK) != 0u ? p / MK : p) * xs4;
            for (uint r = 0u; r < RPW; r++)
                acc[r][t] = 0.0;
        }
        for (uint u = lane; u < n_units; u += L) {
            for (uint t = 0u; t < TN; t++) {
                for (uint i = 0u; i < XV; i++) {
                    const uint k4 = unit_x4(u, i);
                    vec4 v = uintBitsToFloat(texelFetch(xt, int(xrow[t] + k4)));
                    if ((FLAGS & F_NORM_IN) != 0u) {
                        ss[t] += dot(v, v);
                        v *= vecs4[pc.norm_off / 4u + k4];
                    }
                    xv[t * XV + i] = v;
                }
            }
            unit_sums();
            // block b is in the chunk of c blocks from b0 (core/gpu/wpack.h): row
            // r's copy of it starts at 16-byte word rec0 + r * rstep (for
            // Q4_0, r even, the row pair's two words), the scales of rows
            // r .. r+7 are texel s0 + (r / 8) * c
            const uint b = u / UPB, b0 = b - b % C, c = min(C, nb - b0);
            const uint rec0 = (g * nb + b0) * RPW * W4 + (b - b0) * UPR * W4, rstep = c * W4;
            const uint s0 = (g * nb + b0) * RPW / 8u + (b - b0);
#if defined(TYPE_Q4_0)
            // row pairs; the scales of eight rows come in one texel (as below)
            if (TN == 1u) {
                for (uint r = 0u; r < RPW; r += 8u) {
                    const uvec4 sw = scales8(s0, c, r);
                    for (uint j = 0u; j < 4u; j++)
                        pair_dot(rec0 + (r + 2u * j) * rstep, unpackHalf2x16(sw[j]), acc[r + 2u * j],
                                 acc[r + 2u * j + 1u]);
                }
            } else {
                uvec4 sw = uvec4(0u);
                for (uint r = 0u; r < RPW; r += 2u) {
                    if (r % 8u == 0u)
                        sw = scales8(s0, c, r);
                    pair_dot(rec0 + r * rstep, unpackHalf2x16(scale_pair(sw, r)), acc[r], acc[r + 1u]);
                }
            }
#elif defined(SIDE_H)
            // row r's side words: in texel (s0 + (r / 8) * c) * SIDE_H +
            // (r % 8) * SIDE_H / 8 (core/gpu/wpack.h)
            for (uint r = 0u; r < RPW; r++) {
                const uint j = r % 8u;
                const uvec4 v = texelFetch(sct, int((s0 + (r / 8u) * c) * uint(SIDE_H) + j * uint(SIDE_H) / 8u));
#if SIDE_H == 2
                const uvec2 sw = uvec2(comp4(v, j % 4u), 0u);
#else
                const uvec2 sw = (j & 1u) != 0u ? v.zw : v.xy;
#endif
                unit_dot_side(rec0 + r * rstep, u, sw, acc[r]);
            }
#elif defined(TYPE_Q8_0) || defined(TYPE_Q6_K) || defined(TYPE_IQ4_NL) || defined(TYPE_Q3_K) || defined(TYPE_MXFP4)
            // the scales of eight rows come in one texel: fetched once per
            // eight rows (decode: the eight rows unrolled; with more tokens
            // per pass that body would be too large and the fetch is made on
            // every eighth row of the loop)
            if (TN == 1u) {
                for (uint r = 0u; r < RPW; r += 8u) {
                    const uvec4 sw = scales8(s0, c, r);
                    for (uint j = 0u; j < 8u; j++)
                        unit_dot(rec0 + (r + j) * rstep, u, side_scale(sw[j / 2u], j % 2u), acc[r + j]);
                }
            } else {
                uvec4 sw = uvec4(0u);
                for (uint r = 0u; r < RPW; r++) {
                    if (r % 8u == 0u)
                        sw = scales8(s0, c, r);
                    unit_dot(rec0 + r * rstep, u, side_scale(scale_pair(sw, r), r % 2u), acc[r]);
                }
            }
#else
            for (uint r = 0u; r < RPW; r++)
                unit_dot(rec0 + r * rstep, u, 0.0, acc[r]);
#endif
        }

        // The sums across the lanes, transposed: the (column, token) pairs,
        // L at a time, are summed so that pair k*L + l ends in lane l (each
        // step halves the values a lane keeps and swaps the other half with
        // the lane m apart: L - 1 shuffles for L sums), then every lane writes
        // its output. (Was: one subgroupAdd per row and token and one lane
        // writing per row, a third of a 1024-wide product's time on llvmpipe.)
        const bool swiglu = (FLAGS & F_SWIGLU) != 0u;   // rows (2c, 2c+1) are (gate, up) of column c
        const uint cols = swiglu ? RPW / 2u : RPW;
        float scale[TN];
        for (uint t = 0u; t < TN; t++)
            scale[t] = (FLAGS & F_NORM_IN) != 0u
                ? rms_scale(subgroupAdd(ss[t]) / float(pc.k_real), pc.eps) : 1.0;
        for (uint k = 0u; k < (cols * TN + L - 1u) / L; k++) {
            float v[gl_WorkGroupSize.x], w[gl_WorkGroupSize.x];   // gate or plain, up
            for (uint i = 0u; i < L; i++) {
                const uint p = k * L + i, r = (swiglu ? 2u : 1u) * min(p / TN, cols - 1u);
                v[i] = p < cols * TN ? acc[r][p % TN] : 0.0;
                w[i] = swiglu && p < cols * TN ? acc[r + 1u][p % TN] : 0.0;
            }
#define LANE_STEP(M)                                                                         \
            if (L > M) {                                                                     \
                const bool hi = (lane & M) != 0u;                                            \
                for (uint i = 0u; i < M; i++) {                                              \
                    v[i] = (hi ? v[i + M] : v[i]) + subgroupShuffleXor(hi ? v[i] : v[i + M], M); \
                    if (swiglu)                                                              \
                        w[i] = (hi ? w[i + M] : w[i]) + subgroupShuffleXor(hi ? w[i] : w[i + M], M); \
                }                                                                            \
            }
            LANE_STEP(64u) LANE_STEP(32u) LANE_STEP(16u) LANE_STEP(8u) LANE_STEP(4u) LANE_STEP(2u) LANE_STEP(1u)
#undef LANE_STEP
            const uint p = k * L + lane, t = p % TN, n = r0 + (swiglu ? 2u : 1u) * (p / TN), tt = t0 + t;
            if (p >= cols * TN || n >= pc.N || tt >= T)
                continue;
            float sc = 1.0;
            uint orow_t = 0u;
            for (uint i = 0u; i < TN; i++) {
                sc = i == t ? scale[i] : sc;
                orow_t = i == t ? orow[i] : orow_t;
            }
            float val = v[0] * sc, up = w[0] * sc;
            if ((FLAGS & F_BIAS) != 0u) {
                const uint b0 = pc.bias_off + pc.row0 + z * pc.N;   // (an expert's rows after the previous one's)
                const uint bi = b0 + n, bu = b0 + min(n + 1u, pc.N - 1u);
                val += vecs4[bi / 4u][bi % 4u];
                up += vecs4[bu / 4u][bu % 4u];
            }
            const uint yi = orow_t * pc.y_stride + pc.y_off + (swiglu ? n / 2u : n);
            if (swiglu && (FLAGS & F_OAI) != 0u) {
                const float gc = min(val, 7.0);
                y[yi] = gc / (1.0 + exp(-1.702 * gc)) * (clamp(up, -7.0, 7.0) + 1.0);
            } else if (swiglu)
                y[yi] = ffn_gate(val, (FLAGS & F_GELU) != 0u) * up;
            else if ((FLAGS & F_ADD_OUT) != 0u)
                y[yi] += val;
            else
                y[yi] = val;
        }
    }
}
