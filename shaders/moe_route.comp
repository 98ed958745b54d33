// moe_route.comp — the router's choice for every token of a step, and the
// lists the expert matrix products run from (mm.comp EXPERT). One
// workgroup: each token's K largest router logits (the lower expert first
// on a tie), weighted by the softmax of the chosen logits (= the router's
// softmax renormalised over them: qwen3moe and gpt-oss alike); then, per
// expert, how many (token, slot) pairs chose it and where its list starts;
// then the lists, pair p = t * K + j. Within an expert's list the order
// follows atomics (it varies between runs), but every pair's product is
// computed on its own, so nothing depends on it.
// Writes into moe (ints): [2e] count, [2e + 1] start (an index into moe) of
// expert e, at 0; the lists at list_off; the chosen experts at sel_off, the
// weights (float bits) at w_off, both [T * K].
#version 450

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer RL { float rl[]; };
layout(std430, binding = 1) buffer MOE { int moe[]; };

layout(push_constant) uniform Push {
    uint T, NE, K;          // tokens, experts (<= 256), experts per token (<= 16)
    uint rl_stride;         // floats between tokens' router logits
    uint list_off, sel_off, w_off;
} pc;

shared uint cnt[256];
shared uint fill[256];
shared uint start[256];

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    for (uint e = lid; e < pc.NE; e += 256u) {
        cnt[e] = 0u;
        fill[e] = 0u;
    }
    barrier();
    for (uint t = lid; t < pc.T; t += 256u) {
        const uint base = t * pc.rl_stride;
        uint picked[16];
        float lg[16];
        for (uint j = 0u; j < pc.K; j++) {
            uint best = 0xFFFFFFFFu;
            float bv = 0.0;
            for (uint e = 0u; e < pc.NE; e++) {
                bool taken = false;
                for (uint i = 0u; i < j; i++)
                    taken = taken || picked[i] == e;
                const float v = rl[base + e];
                if (!taken && (best == 0xFFFFFFFFu || v > bv)) {
                    best = e;
                    bv = v;
                }
            }
            picked[j] = best;
            lg[j] = bv;
        }
        float s = 0.0;
        for (uint j = 0u; j < pc.K; j++)   // lg[0] is the largest
            s += exp(lg[j] - lg[0]);
        for (uint j = 0u; j < pc.K; j++) {
            moe[pc.sel_off + t * pc.K + j] = int(picked[j]);
            moe[pc.w_off + t * pc.K + j] = floatBitsToInt(exp(lg[j] - lg[0]) / s);
            atomicAdd(cnt[picked[j]], 1u);
        }
    }
    barrier();
    if (lid == 0u) {
        uint at = pc.list_off;
        for (uint e = 0u; e < pc.NE; e++) {
            start[e] = at;
            moe[2u * e] = int(cnt[e]);
            moe[2u * e + 1u] = int(at);
            at += cnt[e];
        }
    }
    barrier();
    for (uint t = lid; t < pc.T; t += 256u)
        for (uint j = 0u; j < pc.K; j++) {
            const uint e = uint(moe[pc.sel_off + t * pc.K + j]);   // (this invocation's own write)
            moe[start[e] + atomicAdd(fill[e], 1u)] = int(t * pc.K + j);
        }
}
