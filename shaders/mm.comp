// mm.comp — quantized matrix x activations: y[t][n] = sum_k W[n][k] * in[t][k]
// for every weight type (one SPIR-V module per type via -DTYPE_*), used for
// decode (T = 1), batched decode and prefill (T tokens, TN per pass).
//
// Weights are repacked at upload into the "row-interleaved" layout
// (core/wpack.c): rows are grouped by R (the workgroup's x size); for row
// group g, block b (BS elements), word w and lane r the 32-bit word sits at
//   qw[((g * nb + b) * W + w) * R + r]
// so the R lanes of a workgroup, one row each, read consecutive words. Block
// scales that do not fit the word stream (the f16 `d` of Q4_0, Q8_0, Q6_K)
// sit in sc[] as packed f16 pairs at half index (g * nb + b) * R + r.
// Each lane keeps its own row's accumulators: no cross-lane reduction unless
// the K range is split over S = local_size_y slices.
//
// Fusions (spec constant FLAGS): NORM_IN computes the RMS norm of the input
// rows and multiplies by a norm weight; BIAS adds a bias; ADD_OUT accumulates
// into y (residual connection); SWIGLU treats row pairs (2j, 2j+1) as
// (gate_j, up_j) and writes silu(gate)*up to output column j; GATHER_IN reads
// input row idx[t] (from the step buffer) instead of row t.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "common.glsl"

layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z = 1) in;
layout(constant_id = 0) const uint R = 8;      // rows per workgroup (lanes)
layout(constant_id = 1) const uint S = 1;      // K slices per workgroup
layout(constant_id = 2) const uint TN = 1;     // tokens per pass
layout(constant_id = 3) const uint FLAGS = 0;

const uint F_NORM_IN = 1u, F_BIAS = 2u, F_ADD_OUT = 4u, F_SWIGLU = 8u, F_GATHER_IN = 16u;

layout(std430, binding = 0) readonly buffer QW { uint qw[]; };
layout(std430, binding = 1) readonly buffer SC { uint sc[]; };
layout(std430, binding = 2) readonly buffer XV { vec4 x4[]; };
layout(std430, binding = 3) buffer YV { float y[]; };
layout(std430, binding = 4) readonly buffer VV { float vecs[]; };
layout(std430, binding = 5) readonly buffer PV { int step[]; };

layout(push_constant) uniform Push {
    uint K;          // row length (elements; padded to the block size)
    uint k_real;     // true row length (divisor of the RMS norm)
    uint N;          // rows in this dispatch (weight chunk)
    uint T;          // tokens
    uint x_stride;   // floats between input rows
    uint y_stride;   // floats between output rows
    uint y_off;      // float offset of this chunk's first output in a row
    uint row0;       // index of this chunk's first row in the whole matrix (bias)
    uint norm_off;   // float offset of the norm weight in vecs (NORM_IN)
    uint bias_off;   // float offset of the bias in vecs (BIAS)
    uint gather_off; // int offset of the row index list in step (GATHER_IN)
    float eps;       // RMS norm epsilon (NORM_IN)
} pc;

#include "dequant.glsl"

shared float red[TN * R * S];

uint in_row(uint t)
{
    return (FLAGS & F_GATHER_IN) != 0 ? uint(step[pc.gather_off + t]) : t;
}

// x[t][k4*4 .. k4*4+3] scaled by the norm weight when NORM_IN (the per-token
// RMS factor is applied to the accumulated sum instead).
vec4 xin(uint xbase, uint k4)
{
    vec4 v = x4[xbase + k4];
    if ((FLAGS & F_NORM_IN) != 0) {
        uint k = k4 * 4u + pc.norm_off;
        v *= vec4(vecs[k], vecs[k + 1u], vecs[k + 2u], vecs[k + 3u]);
    }
    return v;
}

float wg_sum(float v, uint li)
{
    v = subgroupAdd(v);
    if (R * S <= gl_SubgroupSize)
        return v;
    barrier();
    if (gl_SubgroupInvocationID == 0u)
        red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++)
        s += red[i];
    barrier();
    return s;
}

void main()
{
    const uint lane = gl_LocalInvocationID.x;
    const uint slice = gl_LocalInvocationID.y;
    const uint li = slice * R + lane;
    const uint g = gl_WorkGroupID.x;
    const uint n = g * R + lane;                 // this lane's row within the chunk
    const uint nb = pc.K / BS;
    const uint xs4 = pc.x_stride / 4u;

    for (uint t0 = gl_WorkGroupID.y * TN; t0 < pc.T; t0 += TN * gl_NumWorkGroups.y) {
        float acc[TN];
        uint xb[TN];
        for (uint t = 0u; t < TN; t++) {
            acc[t] = 0.0;
            xb[t] = in_row(min(t0 + t, pc.T - 1u)) * xs4;
        }

        for (uint b = slice; b < nb; b += S) {
            const uint blk = g * nb + b;             // block index in the group-major order
            const uint q0 = blk * W * R + lane;      // first word of this lane's block
            const uint k4 = b * (BS / 4u);           // vec4 index of the block's first element
#if defined(TYPE_F32)
            for (uint w = 0u; w < 8u; w++) {
                vec4 wv = vec4(uintBitsToFloat(qw[q0 + (4u * w) * R]), uintBitsToFloat(qw[q0 + (4u * w + 1u) * R]),
                               uintBitsToFloat(qw[q0 + (4u * w + 2u) * R]), uintBitsToFloat(qw[q0 + (4u * w + 3u) * R]));
                for (uint t = 0u; t < TN; t++)
                    acc[t] += dot(wv, xin(xb[t], k4 + w));
            }
#elif defined(TYPE_F16)
            for (uint w = 0u; w < 8u; w++) {
                vec4 wv = vec4(unpackHalf2x16(qw[q0 + (2u * w) * R]), unpackHalf2x16(qw[q0 + (2u * w + 1u) * R]));
                for (uint t = 0u; t < TN; t++)
                    acc[t] += dot(wv, xin(xb[t], k4 + w));
            }
#elif defined(TYPE_Q8_0)
            const float d = half_at(blk * R + lane);
            float s[TN];
            for (uint t = 0u; t < TN; t++)
                s[t] = 0.0;
            for (uint w = 0u; w < 8u; w++) {
                vec4 wv = i8x4(qw[q0 + w * R]);
                for (uint t = 0u; t < TN; t++)
                    s[t] += dot(wv, xin(xb[t], k4 + w));
            }
            for (uint t = 0u; t < TN; t++)
                acc[t] += d * s[t];
#elif defined(TYPE_Q4_0)
            const float d = half_at(blk * R + lane);
            float s[TN];
            for (uint t = 0u; t < TN; t++)
                s[t] = 0.0;
            for (uint w = 0u; w < 4u; w++) {
                const uint q = qw[q0 + w * R];
                vec4 lo = u4x4(q) - 8.0, hi = u4x4(q >> 4) - 8.0;
                for (uint t = 0u; t < TN; t++)
                    s[t] += dot(lo, xin(xb[t], k4 + w)) + dot(hi, xin(xb[t], k4 + 4u + w));
            }
            for (uint t = 0u; t < TN; t++)
                acc[t] += d * s[t];
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
            const vec2 dm = unpackHalf2x16(qw[q0]);
            const uint s0 = qw[q0 + R], s1 = qw[q0 + 2u * R], s2 = qw[q0 + 3u * R];
            for (uint i = 0u; i < 4u; i++) {             // sub-block pairs (2i, 2i+1) of 32
                const vec4 smA = k4_scale_min(2u * i, s0, s1, s2);    // (sc, m) of 2i, (sc, m) of 2i+1
                float qa[TN], qb[TN], sa[TN], sb[TN];
                for (uint t = 0u; t < TN; t++) {
                    qa[t] = 0.0; qb[t] = 0.0; sa[t] = 0.0; sb[t] = 0.0;
                }
                for (uint w = 0u; w < 8u; w++) {
#if defined(TYPE_Q4_K)
                    const uint q = qw[q0 + (4u + 8u * i + w) * R];
                    vec4 lo = u4x4(q), hi = u4x4(q >> 4);
#else
                    const uint q = qw[q0 + (12u + 8u * i + w) * R];
                    const uint h = qw[q0 + (4u + w) * R];
                    vec4 lo = u8x4((q & 0x0F0F0F0Fu) | (((h >> (2u * i)) & 0x01010101u) << 4));
                    vec4 hi = u8x4(((q >> 4) & 0x0F0F0F0Fu) | (((h >> (2u * i + 1u)) & 0x01010101u) << 4));
#endif
                    for (uint t = 0u; t < TN; t++) {
                        vec4 xa4 = xin(xb[t], k4 + 16u * i + w), xb4 = xin(xb[t], k4 + 16u * i + 8u + w);
                        qa[t] += dot(lo, xa4);
                        qb[t] += dot(hi, xb4);
                        sa[t] += dot(xa4, vec4(1.0));
                        sb[t] += dot(xb4, vec4(1.0));
                    }
                }
                for (uint t = 0u; t < TN; t++)
                    acc[t] += dm.x * (smA.x * qa[t] + smA.z * qb[t]) - dm.y * (smA.y * sa[t] + smA.w * sb[t]);
            }
#elif defined(TYPE_Q6_K)
            const float d = half_at(blk * R + lane);
            for (uint h = 0u; h < 2u; h++) {               // halves of 128 elements
                const uint scw0 = qw[q0 + (48u + 2u * h) * R], scw1 = qw[q0 + (49u + 2u * h) * R];
                for (uint w = 0u; w < 8u; w++) {
                    const uint qa = qw[q0 + (16u * h + w) * R];
                    const uint qb = qw[q0 + (16u * h + 8u + w) * R];
                    const uint qh = qw[q0 + (32u + 8u * h + w) * R];
                    const vec4 v1 = u8x4((qa & 0x0F0F0F0Fu) | ((qh & 0x03030303u) << 4)) - 32.0;
                    const vec4 v2 = u8x4((qb & 0x0F0F0F0Fu) | (((qh >> 2) & 0x03030303u) << 4)) - 32.0;
                    const vec4 v3 = u8x4(((qa >> 4) & 0x0F0F0F0Fu) | (((qh >> 4) & 0x03030303u) << 4)) - 32.0;
                    const vec4 v4 = u8x4(((qb >> 4) & 0x0F0F0F0Fu) | (((qh >> 6) & 0x03030303u) << 4)) - 32.0;
                    const uint is = w >> 2;                // scale index within the 8 of this half
                    const float c1 = i8_at(scw0, scw1, is), c2 = i8_at(scw0, scw1, is + 2u);
                    const float c3 = i8_at(scw0, scw1, is + 4u), c4 = i8_at(scw0, scw1, is + 6u);
                    const uint kb = k4 + 32u * h + w;      // vec4 index of element 128h + 4w
                    for (uint t = 0u; t < TN; t++)
                        acc[t] += d * (c1 * dot(v1, xin(xb[t], kb)) + c2 * dot(v2, xin(xb[t], kb + 8u)) +
                                       c3 * dot(v3, xin(xb[t], kb + 16u)) + c4 * dot(v4, xin(xb[t], kb + 24u)));
                }
            }
#endif
        }

        // combine the K slices
        if (S > 1u) {
            for (uint t = 0u; t < TN; t++)
                red[(t * S + slice) * R + lane] = acc[t];
            barrier();
            if (slice == 0u) {
                for (uint t = 0u; t < TN; t++) {
                    float v = 0.0;
                    for (uint s = 0u; s < S; s++)
                        v += red[(t * S + s) * R + lane];
                    acc[t] = v;
                }
            }
            barrier();
        }

        // per-token RMS factor of the input rows (all invocations take part)
        if ((FLAGS & F_NORM_IN) != 0) {
            for (uint t = 0u; t < TN; t++) {
                float ss = 0.0;
                for (uint k4i = li; k4i < pc.K / 4u; k4i += R * S) {
                    vec4 v = x4[xb[t] + k4i];
                    ss += dot(v, v);
                }
                ss = wg_sum(ss, li);
                acc[t] *= inversesqrt(ss / float(pc.k_real) + pc.eps);
            }
        }

        for (uint t = 0u; t < TN; t++) {
            float v = acc[t];
            if ((FLAGS & F_BIAS) != 0 && n < pc.N)
                v += vecs[pc.bias_off + pc.row0 + n];
            if ((FLAGS & F_SWIGLU) != 0) {
                float up = subgroupShuffleXor(v, 1u);
                v = v / (1.0 + exp(-v)) * up;
            }
            const uint tt = t0 + t;
            if (slice != 0u || n >= pc.N || tt >= pc.T)
                continue;
            if ((FLAGS & F_SWIGLU) != 0) {
                if ((lane & 1u) == 0u)
                    y[tt * pc.y_stride + pc.y_off + n / 2u] = v;
            } else if ((FLAGS & F_ADD_OUT) != 0) {
                y[tt * pc.y_stride + pc.y_off + n] += v;
            } else {
                y[tt * pc.y_stride + pc.y_off + n] = v;
            }
        }
    }
}
