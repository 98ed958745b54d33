// attn_reduce.comp — merge the partial softmax states (m, l, o[Dv]) that
// attn_dec.comp wrote for each split decode token and head into the
// attention output: M = max m_s, out = sum o_s e^(m_s - M) / sum l_s e^(m_s - M).
// Tokens with one split were finished by attn_dec.comp. Grid: (H, n_dec).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer PV { int step[]; };
layout(std430, binding = 1) readonly buffer PART { float part[]; };
layout(std430, binding = 2) writeonly buffer OUT { float att[]; };

layout(push_constant) uniform Push {
    uint H, Dv, nsplit, out_stride, list_off;   // nsplit: the partials' stride
    uint sink_off;      // vecs offset of the heads' sink logits (gpt-oss); 0xFFFFFFFF: none
} pc;

layout(std430, binding = 3) readonly buffer Vecs { float vecs[]; };

void main()
{
    const uint h = gl_WorkGroupID.x, di = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    const uint t = uint(step[pc.list_off + 2u * di]);
    const uint ns = uint(step[pc.list_off + 2u * di + 1u]);
    if (ns < 2u)
        return;
    const uint base = (di * pc.H + h) * pc.nsplit * (pc.Dv + 2u);
    float M = -1e30;
    for (uint s = 0u; s < ns; s++)
        M = max(M, part[base + s * (pc.Dv + 2u)]);
    const bool sink = pc.sink_off != 0xFFFFFFFFu;
    if (sink)   // one more logit in the softmax, no value
        M = max(M, vecs[pc.sink_off + h]);
    float L = sink ? exp(vecs[pc.sink_off + h] - M) : 0.0;
    for (uint s = 0u; s < ns; s++)
        L += part[base + s * (pc.Dv + 2u) + 1u] * exp(part[base + s * (pc.Dv + 2u)] - M);
    for (uint d = lane; d < pc.Dv; d += 64u) {
        float v = 0.0;
        for (uint s = 0u; s < ns; s++)
            v += part[base + s * (pc.Dv + 2u) + 2u + d] * exp(part[base + s * (pc.Dv + 2u)] - M);
        att[t * pc.out_stride + h * pc.Dv + d] = L > 0.0 ? v / L : 0.0;
    }
}
