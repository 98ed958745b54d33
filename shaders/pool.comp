// pool.comp — pooled rows of a step: out[r] = the sum of the final hidden
// states of the tokens [first, first + count) of span r (an embedding's
// mean, first or last token; the host divides and scales). A decoder's
// rows are first normed by its output norm (RMS, weight at norm_off), as
// the logits see them; an encoder's are its last LayerNorm's output
// (norm_off 0xFFFFFFFF). Each workgroup sums 256 columns of one span, four
// per lane; a decoder's row norm is summed over the whole row by every
// workgroup of the span. Grid: (ceil(E / 256), n spans).
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XV { float x[]; };
layout(std430, binding = 1) readonly buffer Vecs { float vecs[]; };
layout(std430, binding = 2) readonly buffer PV { int step[]; };
layout(std430, binding = 3) writeonly buffer OV { float o[]; };

layout(push_constant) uniform Push {
    uint E, n;              // row length, spans
    uint x_stride, o_stride;
    uint span_off;          // int offset in step of the (first token, count) pairs
    uint norm_off;          // the output norm's weight in vecs; 0xFFFFFFFF: none
    float eps;
} pc;

shared float red[64];

void main()
{
    const uint r = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.x * 256u + lane;
    if (r >= pc.n)
        return;   // (the whole workgroup)
    const uint first = uint(step[pc.span_off + 2u * r]), count = uint(step[pc.span_off + 2u * r + 1u]);
    const bool norm = pc.norm_off != 0xFFFFFFFFu;
    vec4 acc = vec4(0.0);
    for (uint t = first; t < first + count; t++) {
        const uint xr = t * pc.x_stride;
        float sc = 1.0;
        if (norm) {
            float ss = 0.0;
            for (uint i = lane; i < pc.E; i += 64u)
                ss += x[xr + i] * x[xr + i];
            red[lane] = ss;
            barrier();
            for (uint s = 32u; s > 0u; s >>= 1) {
                if (lane < s)
                    red[lane] += red[lane + s];
                barrier();
            }
            sc = rms_scale(red[0] / float(pc.E), pc.eps);
            barrier();
        }
        for (uint i = 0u; i < 4u; i++) {
            const uint c = c0 + 64u * i;
            if (c < pc.E)
                acc[i] += x[xr + c] * sc * (norm ? vecs[pc.norm_off + c] : 1.0);
        }
    }
    for (uint i = 0u; i < 4u; i++) {
        const uint c = c0 + 64u * i;
        if (c < pc.E)
            o[r * pc.o_stride + c] = acc[i];
    }
}
