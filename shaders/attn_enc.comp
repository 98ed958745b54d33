// attn_enc.comp — an encoder's attention: every token of a sequence over
// every token of it (no causal mask; bert), reading Q, K and V straight
// from the step's QKV rows — the whole sequence is in the step and nothing
// is kept in the KV pool. Work comes in tiles of up to 64 consecutive
// tokens of one sequence (forward.c's tile list); the sequence is the run
// [span[2f], span[2f + 1]) of the tile's first token f. One workgroup per
// (query head, tile), one query per lane: the lanes walk the run's keys
// together (every lane reads the same K and V row: a broadcast, on a CPU
// device a scalar load) with an online softmax, q and the output in
// registers. Grid: (H, tiles).
#version 450

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint DK = 64;   // head dim of q and k
layout(constant_id = 1) const uint DV = 64;   // head dim of v

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer PV { int step[]; };
layout(std430, binding = 2) writeonly buffer AV { float att[]; };

layout(push_constant) uniform Push {
    uint H, Hk;             // query heads, KV heads
    uint qkv_stride, att_stride;
    uint span_off;          // int offset in step of each token's (first, end) run
    uint tile_off;          // int offset in step of the (first token, count) tiles
    uint n_tiles;
    uint pad;
    float scale;
} pc;

void main()
{
    const uint h = gl_WorkGroupID.x, tile = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    if (tile >= pc.n_tiles)
        return;
    const uint first = uint(step[pc.tile_off + 2u * tile]), count = uint(step[pc.tile_off + 2u * tile + 1u]);
    const uint s0 = uint(step[pc.span_off + 2u * first]), s1 = uint(step[pc.span_off + 2u * first + 1u]);
    const uint t = first + min(lane, count - 1u);   // (lanes past the tile repeat its last query, unwritten)
    const uint kh = h / (pc.H / pc.Hk);
    const uint kb = pc.H * DK + kh * DK, vb = pc.H * DK + pc.Hk * DK + kh * DV;
    float q[DK];
    for (uint d = 0u; d < DK; d++)
        q[d] = qkv[t * pc.qkv_stride + h * DK + d] * pc.scale;
    float acc[DV];
    for (uint d = 0u; d < DV; d++)
        acc[d] = 0.0;
    float m = -3.402823466e38, l = 0.0;
    for (uint j = s0; j < s1; j++) {
        const uint r = j * pc.qkv_stride;
        float s = 0.0;
        for (uint d = 0u; d < DK; d++)
            s += q[d] * qkv[r + kb + d];
        const float mn = max(m, s), c = exp(m - mn), p = exp(s - mn);
        l = l * c + p;
        for (uint d = 0u; d < DV; d++)
            acc[d] = acc[d] * c + p * qkv[r + vb + d];
        m = mn;
    }
    if (lane >= count)
        return;
    const float inv = 1.0 / l;
    for (uint d = 0u; d < DV; d++)
        att[t * pc.att_stride + h * DV + d] = acc[d] * inv;
}
