// rope_kv.comp — after the QKV projection: (qwen3) RMS-norm each q/k head,
// rotate q and k by their position (NORM: pairs (2i, 2i+1); NEOX: pairs
// (i, i + n_rot/2)), leave q in place for attention, and write k and v into
// the sequence's KV cache blocks through its block table: f16, or with
// -DKV_Q8 int8 with one f16 scale per 32 values (Q8_0, the scale rounds the
// largest magnitude to 127).
// Grid: (1, T); one workgroup per token does all its heads.
//
// KV cache layout per layer (block = BLK positions), row r = (blk*Hk+hk)*BLK+p:
//   f16: K[r][d], V[r][d]   (a position's row is contiguous: the attention
//        kernels read it in 16-byte words)
//   Q8:  int8 rows K[r][d] from byte 0, then the scales at half index
//        scale_off + r * D/32 (likewise V)
#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "common.glsl"

layout(local_size_x = 32) in;
layout(constant_id = 0) const uint NEOX = 0;
layout(constant_id = 1) const uint QK_NORM = 0;
const uint BLK = 16u;

layout(std430, binding = 0) coherent buffer QKV { float qkv[]; };   // rewritten, then read by other lanes
layout(std430, binding = 1) readonly buffer VV { float vecs[]; };
layout(std430, binding = 2) readonly buffer PV { int step[]; };
#if defined(KV_Q8)
layout(std430, binding = 3) writeonly buffer KC { uint kw[]; };
layout(std430, binding = 4) writeonly buffer VC { uint vw[]; };
layout(std430, binding = 3) writeonly buffer KCH { float16_t kh[]; };
layout(std430, binding = 4) writeonly buffer VCH { float16_t vh[]; };
#else
layout(std430, binding = 3) writeonly buffer KC { float16_t kc[]; };
layout(std430, binding = 4) writeonly buffer VC { float16_t vc[]; };
#endif

layout(push_constant) uniform Push {
    uint H, Hk, D, Dv, n_rot;
    uint qkv_stride;      // floats between token rows of qkv
    uint pos_off;         // int offsets in step: positions, sequence slots, block tables
    uint seq_off;
    uint bt_off;
    uint bt_stride;       // ints per block table
    uint freq_off;        // float offset in vecs of the n_rot/2 inverse frequencies
    uint qn_off, kn_off;  // float offsets of the q/k norm weights (QK_NORM)
    float eps;
    uint kscale_off;      // KV_Q8: half index of the K scales
    uint vscale_off;      // KV_Q8: half index of the V scales
} pc;

shared float red[64];
#if defined(KV_Q8)
shared float rowbuf[256];
shared float dsc[8];

// Quantize the row in shared memory (n values) to int8 + f16 scale per 32
// and write it; qbase is the row's first byte / 4, sbase its first scale.
void put_q8(uint n, bool is_v, uint qbase, uint sbase)
{
    const uint lid = gl_LocalInvocationID.x;
    if (lid < n / 32u) {
        float amax = 0.0;
        for (uint i = 0u; i < 32u; i++)
            amax = max(amax, abs(rowbuf[32u * lid + i]));
        const float d = amax / 127.0;
        dsc[lid] = d;
        if (is_v) vh[sbase + lid] = float16_t(d); else kh[sbase + lid] = float16_t(d);
    }
    barrier();
    for (uint g = lid; g < n / 4u; g += gl_WorkGroupSize.x) {
        const float d = dsc[(4u * g) / 32u];
        const float id = d > 0.0 ? 1.0 / d : 0.0;
        uint w = 0u;
        for (uint k = 0u; k < 4u; k++) {
            const int q = clamp(int(round(rowbuf[4u * g + k] * id)), -127, 127);
            w |= (uint(q) & 0xFFu) << (8u * k);
        }
        if (is_v) vw[qbase + g] = w; else kw[qbase + g] = w;
    }
    barrier();
}
#endif

float wg_sum(float v)
{
    v = subgroupAdd(v);
    // not gl_SubgroupSize: without a required size a device may report 32
    // and run the workgroup as several narrower subgroups (Intel)
    if (gl_NumSubgroups == 1u)
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

// cos/sin of theta after reducing it to [-pi, pi] (GPU sin/cos are only
// accurate there)
vec2 cs(float theta)
{
    const float TWO_PI_HI = 6.28318548202514648, TWO_PI_LO = -1.7484555314695172e-7;
    float k = round(theta * 0.159154943091895336);
    float r = (theta - k * TWO_PI_HI) - k * TWO_PI_LO;
    return vec2(cos(r), sin(r));
}

void main()
{
    const uint t = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint row = t * pc.qkv_stride;   // q heads at row + h*D (h < H), then k heads, then v
    const uint nqk = pc.H + pc.Hk;
    const uint pos = uint(step[pc.pos_off + t]);

    // optional per-head RMS norm (qwen3); each lane scales the elements it summed
    if (QK_NORM != 0u) {
        for (uint h = 0u; h < nqk; h++) {
            const uint base = row + h * pc.D;
            float ss = 0.0;
            for (uint d = lid; d < pc.D; d += WG)
                ss += qkv[base + d] * qkv[base + d];
            const float scale = rms_scale(wg_sum(ss) / float(pc.D), pc.eps);
            const uint noff = h < pc.H ? pc.qn_off : pc.kn_off;
            for (uint d = lid; d < pc.D; d += WG)
                qkv[base + d] *= scale * vecs[noff + d];
        }
        memoryBarrierBuffer();
        barrier();
    }

    // rotate pairs in place: the angle depends on the pair, not the head, so
    // it is made once per pair for all q and k heads of the token
    const uint half_rot = pc.n_rot / 2u;
    for (uint i = lid; i < half_rot; i += WG) {
        const uint i0 = NEOX != 0u ? i : 2u * i;
        const uint i1 = NEOX != 0u ? i + half_rot : 2u * i + 1u;
        const vec2 c = cs(float(pos) * vecs[pc.freq_off + i]);
        for (uint h = 0u; h < nqk; h++) {
            const uint base = row + h * pc.D;
            const float x0 = qkv[base + i0], x1 = qkv[base + i1];
            qkv[base + i0] = x0 * c.x - x1 * c.y;
            qkv[base + i1] = x0 * c.y + x1 * c.x;
        }
    }

    // k and v into the cache
    memoryBarrierBuffer();
    barrier();
    const uint seq = uint(step[pc.seq_off + t]);
    const uint blk = uint(step[pc.bt_off + seq * pc.bt_stride + pos / BLK]);
    const uint p = pos % BLK;
    for (uint hk = 0u; hk < pc.Hk; hk++) {
        const uint r = (blk * pc.Hk + hk) * BLK + p;
        const uint kbase = row + (pc.H + hk) * pc.D;
        const uint vbase = row + nqk * pc.D + hk * pc.Dv;
#if defined(KV_Q8)
        for (uint d = lid; d < pc.D; d += WG)
            rowbuf[d] = qkv[kbase + d];
        barrier();
        put_q8(pc.D, false, r * pc.D / 4u, pc.kscale_off + r * (pc.D / 32u));
        for (uint d = lid; d < pc.Dv; d += WG)
            rowbuf[d] = qkv[vbase + d];
        barrier();
        put_q8(pc.Dv, true, r * pc.Dv / 4u, pc.vscale_off + r * (pc.Dv / 32u));
#else
        for (uint d = lid; d < pc.D; d += WG)
            kc[r * pc.D + d] = float16_t(qkv[kbase + d]);
        for (uint d = lid; d < pc.Dv; d += WG)
            vc[r * pc.Dv + d] = float16_t(qkv[vbase + d]);
#endif
    }
}
