// attn_pre.comp — causal attention for tiles of consecutive prompt tokens of
// one sequence (prefill). Lanes are the tile's query tokens; the loop walks
// KV positions in blocks of 16, so every K/V load (16-byte words of the
// position's row) is the same address for all lanes, and q and o live in
// each lane's registers. Per
// block: 16 scores per lane, one rescale of o, 16 accumulations (online
// softmax; the score matrix never reaches memory). Earlier context (a cached
// prefix, earlier chunks) is read through the same block table.
// Grid: (H / G, n_tiles); the step buffer lists tiles as (first token, count).
// Head sizes are specialization constants: the per-dimension loops have
// constant trip counts (see attn_dec.comp on llvmpipe's loop limit).
// With -DSHUF (CPU devices): llvmpipe loads a word lane by lane even when
// all lanes want the same address, so there each lane of a subgroup loads
// only its share of a K/V row (8-value chunks c = lane, lane + LD, ...) and
// the lanes take the whole row from each other with subgroupShuffle: the
// row is read once per subgroup instead of once per query token; and one
// workgroup does all G query heads of a KV head (grid (H / G, n_tiles)), so
// each shared row serves G heads (llvmpipe: the shuffles are most of the
// time; 155M model, 512-token prompt, G = 4: 138 -> 89 ms of attention).
#version 450
#extension GL_EXT_control_flow_attributes : require
#if defined(SHUF)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

layout(local_size_x = 16) in;
layout(constant_id = 0) const uint D = 64;
layout(constant_id = 1) const uint DV = 64;
const uint BLK = 16u;
#if !defined(SHUF)
const uint G = 1u;
#endif
#if defined(SHUF)
layout(constant_id = 2) const uint SG = 8;        // the device's subgroup size
layout(constant_id = 3) const uint G = 1;         // query heads per workgroup (share one KV head)
const uint LD = SG < 16u ? SG : 16u;              // this workgroup's lanes in one subgroup
const uint CK = (D / 8u + LD - 1u) / LD, CV = (DV / 8u + LD - 1u) / LD;   // chunks per lane
#endif

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer PV { int step[]; };
layout(std430, binding = 4) writeonly buffer OUT { float att[]; };

layout(push_constant) uniform Push {
    uint H, Hk, D_, Dv_;
    uint qkv_stride, out_stride;
    uint pos_off, seq_off, bt_off, bt_stride;
    uint list_off;       // int offset of the tile list (pairs) in step
    float scale;
    uint kscale_off, vscale_off;   // KV_Q8: half index of the K / V scales
    uint window;         // a sliding-window layer: each query sees its last `window` positions (0: all)
    uint sink_off;       // vecs offset of the heads' sink logits (gpt-oss); 0xFFFFFFFF: none
} pc;

layout(std430, binding = 5) readonly buffer Vecs { float vecs[]; };

#include "kvread.glsl"


void main()
{
    const uint hw = gl_WorkGroupID.x, tile = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    const uint t0 = uint(step[pc.list_off + 2u * tile]);
    const uint cnt = uint(step[pc.list_off + 2u * tile + 1u]);
    const bool live = lane < cnt;
    const uint t = t0 + min(lane, cnt - 1u);
    const uint h0 = hw * G;                    // this workgroup's heads h0 .. h0 + G - 1
    const uint hk = h0 / (pc.H / pc.Hk);
    const uint my_pos = uint(step[pc.pos_off + t]);
    const uint last_pos = uint(step[pc.pos_off + t0 + cnt - 1u]);
    const uint bt = pc.bt_off + uint(step[pc.seq_off + t0]) * pc.bt_stride;

    vec4 q[G * (D / 4u)], o[G * (DV / 4u)];
    float m[G], l[G];
    for (uint g = 0u; g < G; g++) {
        for (uint d4 = 0u; d4 < D / 4u; d4++) {
            const uint a = t * pc.qkv_stride + (h0 + g) * D + 4u * d4;
            q[g * (D / 4u) + d4] = vec4(qkv[a], qkv[a + 1u], qkv[a + 2u], qkv[a + 3u]) * pc.scale;
        }
        for (uint d4 = 0u; d4 < DV / 4u; d4++)
            o[g * (DV / 4u) + d4] = vec4(0.0);
        m[g] = -1e30;
        l[g] = 0.0;
    }
    // a windowed layer: query p sees positions p + 1 - window .. p; the
    // blocks before the tile's first query's window are not read
    const uint first_pos = uint(step[pc.pos_off + t0]);
    const uint my_first = pc.window != 0u && my_pos + 1u > pc.window ? my_pos + 1u - pc.window : 0u;
    const uint b_first = pc.window != 0u && first_pos + 1u > pc.window ? (first_pos + 1u - pc.window) / BLK : 0u;
    const uint nblk = last_pos / BLK + 1u;
    for (uint b = b_first; b < nblk; b++) {
        const uint blk = uint(step[bt + b]);
        const uint row0 = (blk * pc.Hk + hk) * BLK;
        // positions past the tile's last one were never written: they are
        // skipped, never multiplied by zero (the memory may hold NaNs)
        const uint nj = min(BLK, last_pos + 1u - b * BLK);
        float s[G * BLK];
        float bm[G];
        for (uint g = 0u; g < G; g++)
            bm[g] = m[g];
        for (uint j = 0u; j < BLK; j++) {
            for (uint g = 0u; g < G; g++)
                s[g * BLK + j] = -1e30;
            if (j >= nj)
                break;
            float acc[G];
            for (uint g = 0u; g < G; g++)
                acc[g] = 0.0;
#if defined(SHUF)
            // this lane's chunks c = i * LD + lane of the row (zero past it)
            vec4 ka[CK], kb[CK];
            [[unroll]] for (uint i = 0u; i < CK; i++) {
                ka[i] = vec4(0.0);
                kb[i] = vec4(0.0);
                if (i * LD + gl_SubgroupInvocationID < D / 8u)
                    kv_chunk(false, row0 + j, D, i * LD + gl_SubgroupInvocationID, ka[i], kb[i]);
            }
            [[unroll]] for (uint d8 = 0u; d8 < D / 8u; d8++) {
                const vec4 a = subgroupShuffle(ka[d8 / LD], d8 % LD), b = subgroupShuffle(kb[d8 / LD], d8 % LD);
                for (uint g = 0u; g < G; g++)
                    acc[g] += dot(q[g * (D / 4u) + 2u * d8], a) + dot(q[g * (D / 4u) + 2u * d8 + 1u], b);
            }
#else
            for (uint d8 = 0u; d8 < D / 8u; d8++) {
                vec4 a, b;
                kv_chunk(false, row0 + j, D, d8, a, b);
                for (uint g = 0u; g < G; g++)
                    acc[g] += dot(q[g * (D / 4u) + 2u * d8], a) + dot(q[g * (D / 4u) + 2u * d8 + 1u], b);
            }
#endif
            for (uint g = 0u; g < G; g++) {
                s[g * BLK + j] = b * BLK + j <= my_pos && b * BLK + j >= my_first ? acc[g] : -1e30;
                bm[g] = max(bm[g], s[g * BLK + j]);
            }
        }
        for (uint g = 0u; g < G; g++) {
            const float corr = exp(m[g] - bm[g]);
            l[g] *= corr;
            for (uint d4 = 0u; d4 < DV / 4u; d4++)
                o[g * (DV / 4u) + d4] *= corr;
        }
        for (uint j = 0u; j < nj; j++) {
            float w[G];
            for (uint g = 0u; g < G; g++) {
                w[g] = s[g * BLK + j] > -1e29 ? exp(s[g * BLK + j] - bm[g]) : 0.0;
                l[g] += w[g];
            }
#if defined(SHUF)
            vec4 va[CV], vb[CV];
            [[unroll]] for (uint i = 0u; i < CV; i++) {
                va[i] = vec4(0.0);
                vb[i] = vec4(0.0);
                if (i * LD + gl_SubgroupInvocationID < DV / 8u)
                    kv_chunk(true, row0 + j, DV, i * LD + gl_SubgroupInvocationID, va[i], vb[i]);
            }
            [[unroll]] for (uint d8 = 0u; d8 < DV / 8u; d8++) {
                const vec4 a = subgroupShuffle(va[d8 / LD], d8 % LD), b = subgroupShuffle(vb[d8 / LD], d8 % LD);
                for (uint g = 0u; g < G; g++) {
                    o[g * (DV / 4u) + 2u * d8] += w[g] * a;
                    o[g * (DV / 4u) + 2u * d8 + 1u] += w[g] * b;
                }
            }
#else
            for (uint d8 = 0u; d8 < DV / 8u; d8++) {
                vec4 a, b;
                kv_chunk(true, row0 + j, DV, d8, a, b);
                for (uint g = 0u; g < G; g++) {
                    o[g * (DV / 4u) + 2u * d8] += w[g] * a;
                    o[g * (DV / 4u) + 2u * d8 + 1u] += w[g] * b;
                }
            }
#endif
        }
        for (uint g = 0u; g < G; g++)
            m[g] = bm[g];
    }
    if (live) {
        for (uint g = 0u; g < G; g++) {
            // a sink: one more logit in the softmax, no value
            float lg = l[g], fs = 1.0;
            if (pc.sink_off != 0xFFFFFFFFu) {
                const float sk = vecs[pc.sink_off + h0 + g], M2 = max(m[g], sk);
                fs = exp(m[g] - M2);
                lg = lg * fs + exp(sk - M2);
            }
            for (uint d4 = 0u; d4 < DV / 4u; d4++) {
                const uint a = t * pc.out_stride + (h0 + g) * DV + 4u * d4;
                const vec4 r = o[g * (DV / 4u) + d4] * fs / lg;
                att[a] = r.x;
                att[a + 1u] = r.y;
                att[a + 2u] = r.z;
                att[a + 3u] = r.w;
            }
        }
    }
}
