// attn_dec_g.comp — decode attention for one KV head and all G query heads
// that read it (GQA/MQA), over the sequence's paged KV cache. Unlike
// attn_dec.comp, whose lanes walk positions, here the lanes split the head
// dimensions: every lane reads its D / L values of each position's K row and
// Dv / L of its V row, the partial q.k sums are added across the lanes, and
// all lanes walk the positions together. Each K/V word is then loaded once
// for all G query heads; on llvmpipe, where every loaded word costs a
// per-lane load, that is what decode attention at long contexts spends its
// time on. The online softmax state (max m, sum l) is the same in every
// lane; each lane keeps its slice of the G outputs. Split-K and the partial
// layout are those of attn_dec.comp (attn_reduce.comp merges the splits).
// Grid: (Hk, max splits, n_dec); the step buffer lists the decode tokens as
// (token index, splits) pairs. Needs G = H / Hk, D and Dv multiples of 8 L.
// A sliding-window layer (window > 0) sees the last `window` positions, as
// in attn_dec.comp.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(local_size_x_id = 0) in;          // L lanes: one subgroup
layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint DV = 64;
layout(constant_id = 3) const uint G = 4; // query heads per KV head
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

void main()
{
    const uint L = gl_WorkGroupSize.x;
    const uint CK = D / (8u * L), CV = DV / (8u * L);   // 8-value chunks per lane
    const uint hk = gl_WorkGroupID.x, split = gl_WorkGroupID.y, di = gl_WorkGroupID.z;
    const uint lane = gl_LocalInvocationID.x;
    const uint t = uint(step[pc.list_off + 2u * di]);
    const uint my_split = uint(step[pc.list_off + 2u * di + 1u]);
    if (split >= my_split)
        return;
    const uint h0 = hk * G;
    const uint n_kv = uint(step[pc.pos_off + t]) + 1u;
    const uint bt = pc.bt_off + uint(step[pc.seq_off + t]) * pc.bt_stride;
    const uint first = pc.window != 0u && n_kv > pc.window ? n_kv - pc.window : 0u;   // first position seen
    const uint nblk = (n_kv + BLK - 1u) / BLK, bf = first / BLK;
    const uint per = (nblk - bf + my_split - 1u) / my_split;
    const uint b0 = bf + split * per, b1 = min(nblk, b0 + per);

    // this lane's chunks: K values 8 * (lane * CK + i) .., V likewise
    vec4 q[G * 2u * CK];
    for (uint g = 0u; g < G; g++)
        for (uint i = 0u; i < 2u * CK; i++) {
            const uint a = t * pc.qkv_stride + (h0 + g) * D + 4u * (2u * lane * CK + i);
            q[g * 2u * CK + i] = vec4(qkv[a], qkv[a + 1u], qkv[a + 2u], qkv[a + 3u]) * pc.scale;
        }
    float m[G], l[G];
    vec4 o[G * 2u * CV];
    for (uint g = 0u; g < G; g++) {
        m[g] = -1e30;
        l[g] = 0.0;
        for (uint i = 0u; i < 2u * CV; i++)
            o[g * 2u * CV + i] = vec4(0.0);
    }
    for (uint b = b0; b < b1; b++) {
        const uint blk = uint(step[bt + b]);
        const uint jn = min(BLK, n_kv - b * BLK), j0 = b * BLK < first ? first - b * BLK : 0u;
        for (uint j = j0; j < jn; j++) {
            const uint row = (blk * pc.Hk + hk) * BLK + j;     // this position's K/V row
            vec4 k[2u * CK];
            for (uint i = 0u; i < CK; i++)
                kv_chunk(false, row, D, lane * CK + i, k[2u * i], k[2u * i + 1u]);
            vec4 v[2u * CV];
            for (uint i = 0u; i < CV; i++)
                kv_chunk(true, row, DV, lane * CV + i, v[2u * i], v[2u * i + 1u]);
            // the G partial scores summed across the lanes four at a time,
            // by log2(L) exchanges with subgroupShuffleXor (on llvmpipe 5-11%
            // faster than subgroupAdd: 4096 positions, GQA 4, 0.79 -> 0.70-0.75 ms)
            float sc[(G + 3u) / 4u * 4u];
            for (uint g = 0u; g < G; g++) {
                float s = 0.0;
                for (uint i = 0u; i < 2u * CK; i++)
                    s += dot(q[g * 2u * CK + i], k[i]);
                sc[g] = s;
            }
            for (uint g = G; g < (G + 3u) / 4u * 4u; g++)
                sc[g] = 0.0;
            for (uint g4 = 0u; g4 < G; g4 += 4u) {
                vec4 t4 = vec4(sc[g4], sc[g4 + 1u], sc[g4 + 2u], sc[g4 + 3u]);
                for (uint mk = 1u; mk < L; mk *= 2u)
                    t4 += subgroupShuffleXor(t4, mk);
                sc[g4] = t4.x; sc[g4 + 1u] = t4.y; sc[g4 + 2u] = t4.z; sc[g4 + 3u] = t4.w;
            }
            for (uint g = 0u; g < G; g++) {
                const float s = sc[g];
                // one exp per position: the smaller of (m, s) is scaled by
                // exp(-|s - m|) against the new max, the larger by 1
                const float e = exp(-abs(s - m[g]));
                const bool up = s > m[g];
                const float corr = up ? e : 1.0, w = up ? 1.0 : e;
                l[g] = l[g] * corr + w;
                m[g] = max(m[g], s);
                for (uint i = 0u; i < 2u * CV; i++)
                    o[g * 2u * CV + i] = o[g * 2u * CV + i] * corr + w * v[i];
            }
        }
    }

    // unsplit: this lane's slice of each head's output; split: its
    // unnormalized slice, and (lane 0) the head's max and sum, for the reduce
    for (uint g = 0u; g < G; g++) {
        const uint h = h0 + g;
        const uint pb = ((di * pc.H + h) * pc.nsplit + split) * (DV + 2u);
        // a sink (unsplit; split: attn_reduce.comp): one more logit, no value
        float lg = l[g], fs = 1.0;
        if (pc.sink_off != 0xFFFFFFFFu && my_split == 1u) {
            const float sk = vecs[pc.sink_off + h], M2 = max(m[g], sk);
            fs = exp(m[g] - M2);
            lg = lg * fs + exp(sk - M2);
        }
        for (uint i = 0u; i < 2u * CV; i++) {
            const uint d = 4u * (2u * lane * CV + i);
            const vec4 r = o[g * 2u * CV + i];
            if (my_split == 1u) {
                const vec4 v = lg > 0.0 ? r * fs / lg : vec4(0.0);
                const uint a = t * pc.out_stride + h * DV + d;
                att[a] = v.x; att[a + 1u] = v.y; att[a + 2u] = v.z; att[a + 3u] = v.w;
            } else {
                const uint a = pb + 2u + d;
                part[a] = r.x; part[a + 1u] = r.y; part[a + 2u] = r.z; part[a + 3u] = r.w;
            }
        }
        if (my_split > 1u && lane == 0u) {
            part[pb] = m[g];
            part[pb + 1u] = l[g];
        }
    }
}
