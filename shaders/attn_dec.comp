// attn_dec.comp — attention of single query tokens (decode) over their
// sequence's paged KV cache. Lanes walk KV positions: each lane reads its
// position's K and V rows ([blk][hk][p][d], f16) in 16-byte words and keeps
// the query in registers, its own online-softmax state (max m, sum l,
// o[Dv]); the lanes are merged once at the end. The KV range can be split
// over several workgroups (split-K): then each writes a partial (m, l, o)
// that attn_reduce.comp merges. A token's split count depends on its own
// context length only, so its result does not depend on what else is in the
// batch.
// Grid: (H, max splits, n_dec); the step buffer lists the decode tokens as
// (token index, splits) pairs.
// Query head h reads KV head h / (H / Hk): GQA/MQA without copying K/V.
// A sliding-window layer (window > 0) sees the last `window` positions
// only: the splits divide the blocks from the window's first, and the
// positions before it in that block are skipped.
// Head sizes are specialization constants so that the per-dimension loops
// have constant trip counts (llvmpipe unrolls them, and stops any shader
// after 65535 dynamic loop iterations, which the host's split keeps this
// kernel far below).
#version 450

layout(local_size_x_id = 0) in;          // lanes (16 = one block per pass)
layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint DV = 64;
const uint BLK = 16u;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer PV { int step[]; };
layout(std430, binding = 4) writeonly buffer OUT { float att[]; };
layout(std430, binding = 5) writeonly buffer PART { float part[]; };

layout(push_constant) uniform Push {
    uint H, Hk, D_, Dv_;  // (same as the constants; kept for the shared layout)
    uint qkv_stride, out_stride;
    uint pos_off, seq_off, bt_off, bt_stride;
    uint list_off;       // int offset of the (token, splits) list in step
    uint nsplit;         // most splits of any token (grid y; partial stride)
    float scale;
    uint kscale_off, vscale_off;   // KV_Q8: half index of the K / V scales
    uint window;         // a sliding-window layer: the last `window` positions (0: all)
    uint sink_off;       // vecs offset of the heads' sink logits (gpt-oss); 0xFFFFFFFF: none
} pc;

layout(std430, binding = 6) readonly buffer Vecs { float vecs[]; };

#include "kvread.glsl"

shared float red[gl_WorkGroupSize.x * DV];
shared float mred[gl_WorkGroupSize.x];

void main()
{
    const uint WG = gl_WorkGroupSize.x;
    const uint h = gl_WorkGroupID.x, split = gl_WorkGroupID.y, di = gl_WorkGroupID.z;
    const uint lane = gl_LocalInvocationID.x;
    const uint t = uint(step[pc.list_off + 2u * di]);
    const uint my_split = uint(step[pc.list_off + 2u * di + 1u]);
    if (split >= my_split)
        return;
    const uint hk = h / (pc.H / pc.Hk);
    const uint n_kv = uint(step[pc.pos_off + t]) + 1u;
    const uint bt = pc.bt_off + uint(step[pc.seq_off + t]) * pc.bt_stride;
    const uint first = pc.window != 0u && n_kv > pc.window ? n_kv - pc.window : 0u;   // first position seen
    const uint nblk = (n_kv + BLK - 1u) / BLK, bf = first / BLK;
    const uint per = (nblk - bf + my_split - 1u) / my_split;
    const uint b0 = bf + split * per, b1 = min(nblk, b0 + per);

    vec4 q[D / 4u];
    for (uint d4 = 0u; d4 < D / 4u; d4++) {
        const uint a = t * pc.qkv_stride + h * D + 4u * d4;
        q[d4] = vec4(qkv[a], qkv[a + 1u], qkv[a + 2u], qkv[a + 3u]) * pc.scale;
    }
    float m = -1e30, l = 0.0;
    vec4 o[DV / 4u];
    for (uint d4 = 0u; d4 < DV / 4u; d4++)
        o[d4] = vec4(0.0);
    for (uint b = b0; b < b1; b++) {
        const uint blk = uint(step[bt + b]);
        for (uint j = lane; j < BLK; j += WG) {
            if (b * BLK + j >= n_kv)
                break;
            if (b * BLK + j < first)
                continue;
            const uint row = (blk * pc.Hk + hk) * BLK + j;     // this position's K/V row
            float s = 0.0;
            for (uint d8 = 0u; d8 < D / 8u; d8++) {
                vec4 a, b;
                kv_chunk(false, row, D, d8, a, b);
                s += dot(q[2u * d8], a) + dot(q[2u * d8 + 1u], b);
            }
            const float mn = max(m, s);
            const float corr = exp(m - mn), w = exp(s - mn);
            l = l * corr + w;
            for (uint d8 = 0u; d8 < DV / 8u; d8++) {
                vec4 a, b;
                kv_chunk(true, row, DV, d8, a, b);
                o[2u * d8] = o[2u * d8] * corr + w * a;
                o[2u * d8 + 1u] = o[2u * d8 + 1u] * corr + w * b;
            }
            m = mn;
        }
    }

    // merge the lanes: common max, then sum l and o over lanes
    mred[lane] = m;
    barrier();
    float M = -1e30;
    for (uint i = 0u; i < WG; i++)
        M = max(M, mred[i]);
    const float f = exp(m - M);
    barrier();
    mred[lane] = l * f;
    for (uint d4 = 0u; d4 < DV / 4u; d4++) {
        const vec4 v = o[d4] * f;
        red[lane * DV + 4u * d4] = v.x;
        red[lane * DV + 4u * d4 + 1u] = v.y;
        red[lane * DV + 4u * d4 + 2u] = v.z;
        red[lane * DV + 4u * d4 + 3u] = v.w;
    }
    barrier();
    float L = 0.0;
    for (uint i = 0u; i < WG; i++)
        L += mred[i];
    // a sink: one more logit in the softmax, no value (unsplit here; split,
    // attn_reduce.comp adds it): against the common max of both
    float fs = 1.0;
    if (pc.sink_off != 0xFFFFFFFFu && my_split == 1u) {
        const float sk = vecs[pc.sink_off + h], M2 = max(M, sk);
        fs = exp(M - M2);
        L = L * fs + exp(sk - M2);
    }
    for (uint d = lane; d < DV; d += WG) {
        float v = 0.0;
        for (uint i = 0u; i < WG; i++)
            v += red[i * DV + d];
        if (my_split == 1u) {
            att[t * pc.out_stride + h * DV + d] = L > 0.0 ? v * fs / L : 0.0;
        } else {
            part[((di * pc.H + h) * pc.nsplit + split) * (DV + 2u) + 2u + d] = v;
        }
    }
    if (my_split > 1u && lane == 0u) {
        const uint pb = ((di * pc.H + h) * pc.nsplit + split) * (DV + 2u);
        part[pb] = M;
        part[pb + 1u] = L;
    }
}
