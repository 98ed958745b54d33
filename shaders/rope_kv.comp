// rope_kv.comp — after the QKV projection: (qwen3) RMS-norm each q/k head,
// rotate q and k by their position (NORM: pairs (2i, 2i+1); NEOX: pairs
// (i, i + n_rot/2)), leave q in place for attention, and write k and v into
// the sequence's KV cache blocks (f16) through its block table.
// Grid: (H + Hk, T); one workgroup per (head, token).
//
// KV cache layout per layer (block = BLK positions):
//   K[blk][hk][p][d], V[blk][hk][p][d]   (a position's row is contiguous: the
//   attention kernels read it in 16-byte words)
#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint NEOX = 0;
layout(constant_id = 1) const uint QK_NORM = 0;
const uint BLK = 16u;

layout(std430, binding = 0) buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer VV { float vecs[]; };
layout(std430, binding = 2) readonly buffer PV { int step[]; };
layout(std430, binding = 3) writeonly buffer KC { float16_t kc[]; };
layout(std430, binding = 4) writeonly buffer VC { float16_t vc[]; };

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
} pc;

shared float red[64];

float wg_sum(float v)
{
    v = subgroupAdd(v);
    if (gl_WorkGroupSize.x <= gl_SubgroupSize)
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
    const uint head = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
    const bool is_q = head < pc.H;
    const uint hk = head - pc.H;
    const uint base = t * pc.qkv_stride + (is_q ? head * pc.D : pc.H * pc.D + hk * pc.D);
    const uint pos = uint(step[pc.pos_off + t]);

    // optional per-head RMS norm (qwen3)
    float scale = 1.0;
    if (QK_NORM != 0u) {
        float ss = 0.0;
        for (uint d = lid; d < pc.D; d += 64u)
            ss += qkv[base + d] * qkv[base + d];
        scale = inversesqrt(wg_sum(ss) / float(pc.D) + pc.eps);
        barrier();   // every lane has read the head before anyone writes it (wg_sum may not barrier)
        uint noff = is_q ? pc.qn_off : pc.kn_off;
        for (uint d = lid; d < pc.D; d += 64u)
            qkv[base + d] *= scale * vecs[noff + d];
        memoryBarrierBuffer();
        barrier();
    }

    // rotate pairs in place
    const uint half_rot = pc.n_rot / 2u;
    for (uint i = lid; i < half_rot; i += 64u) {
        uint i0 = NEOX != 0u ? i : 2u * i;
        uint i1 = NEOX != 0u ? i + half_rot : 2u * i + 1u;
        vec2 c = cs(float(pos) * vecs[pc.freq_off + i]);
        float x0 = qkv[base + i0], x1 = qkv[base + i1];
        qkv[base + i0] = x0 * c.x - x1 * c.y;
        qkv[base + i1] = x0 * c.y + x1 * c.x;
    }
    if (is_q)
        return;

    // k and v into the cache
    memoryBarrierBuffer();
    barrier();
    const uint seq = uint(step[pc.seq_off + t]);
    const uint blk = uint(step[pc.bt_off + seq * pc.bt_stride + pos / BLK]);
    const uint p = pos % BLK;
    for (uint d = lid; d < pc.D; d += 64u)
        kc[((blk * pc.Hk + hk) * BLK + p) * pc.D + d] = float16_t(qkv[base + d]);
    const uint vbase = t * pc.qkv_stride + pc.H * pc.D + pc.Hk * pc.D + hk * pc.Dv;
    for (uint d = lid; d < pc.Dv; d += 64u)
        vc[((blk * pc.Hk + hk) * BLK + p) * pc.Dv + d] = float16_t(qkv[vbase + d]);
}
