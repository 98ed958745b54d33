// attn_enc.comp — an encoder's attention: every token of a sequence over
// every token of it (no causal mask; bert), reading Q, K and V straight
// from the step's QKV rows — the whole sequence is in the step and nothing
// is kept in the KV pool. Each token's sequence is the run of tokens
// [span[2t], span[2t + 1]) of the batch (forward.c writes the spans). One
// workgroup per (query head, token): pass 1 the scores' maximum, pass 2 the
// weights exp(s - max) of 64 keys at a time through shared memory, each
// lane summing its output columns (Dv <= 256: four per lane). The scores
// are computed twice rather than kept: a sequence's length has no bound
// here but the context's. Grid: (H, T).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer PV { int step[]; };
layout(std430, binding = 2) writeonly buffer AV { float att[]; };

layout(push_constant) uniform Push {
    uint H, Hk, D, Dv;      // query heads, KV heads, head dims
    uint qkv_stride, att_stride;
    uint span_off;          // int offset in step of the (first, end) token pairs
    uint T;
    float scale;
} pc;

shared float q_s[256];
shared float pw[64];
shared float red[64];

float score(uint j, uint kb)
{
    const uint r = j * pc.qkv_stride + kb;
    float s = 0.0;
    for (uint d = 0u; d < pc.D; d++)
        s += q_s[d] * qkv[r + d];
    return s * pc.scale;
}

void main()
{
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    if (t >= pc.T)
        return;   // (the whole workgroup)
    const uint s0 = uint(step[pc.span_off + 2u * t]), s1 = uint(step[pc.span_off + 2u * t + 1u]);
    const uint kh = h / (pc.H / pc.Hk);
    const uint kb = pc.H * pc.D + kh * pc.D, vb = pc.H * pc.D + pc.Hk * pc.D + kh * pc.Dv;
    for (uint d = lane; d < pc.D; d += 64u)
        q_s[d] = qkv[t * pc.qkv_stride + h * pc.D + d];
    barrier();

    float m = -3.402823466e38;
    for (uint j = s0 + lane; j < s1; j += 64u)
        m = max(m, score(j, kb));
    red[lane] = m;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lane < s)
            red[lane] = max(red[lane], red[lane + s]);
        barrier();
    }
    const float mx = red[0];
    barrier();

    float l = 0.0;
    vec4 acc = vec4(0.0);
    for (uint c = s0; c < s1; c += 64u) {
        const uint j = c + lane;
        const float p = j < s1 ? exp(score(j, kb) - mx) : 0.0;
        pw[lane] = p;
        l += p;
        barrier();
        const uint n = min(64u, s1 - c);
        for (uint k = 0u; k < n; k++) {
            const float pk = pw[k];
            const uint r = (c + k) * pc.qkv_stride + vb;
            for (uint i = 0u; i < 4u; i++) {
                const uint d = lane + 64u * i;
                if (d < pc.Dv)
                    acc[i] += pk * qkv[r + d];
            }
        }
        barrier();
    }
    red[lane] = l;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier();
    }
    const float inv = 1.0 / red[0];
    for (uint i = 0u; i < 4u; i++) {
        const uint d = lane + 64u * i;
        if (d < pc.Dv)
            att[t * pc.att_stride + h * pc.Dv + d] = acc[i] * inv;
    }
}
