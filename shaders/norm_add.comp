// norm_add.comp — a normed residual: x[t][i] += rmsnorm(y[t])[i] * w[i], for
// models that norm a block's output before adding it to the residual stream
// (Gemma 3's post-attention and post-FFN norms; the matrix kernel writes y,
// and its workgroups each hold a few columns, so the row's norm needs a
// pass of its own). One workgroup per token: the row's sum of squares
// through shared memory, then every invocation adds its columns.
// Grid: (1, T).
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer YIn { float y[]; };
layout(std430, binding = 1) readonly buffer Vecs { float vecs[]; };
layout(std430, binding = 2) buffer XOut { float x[]; };

layout(push_constant) uniform Push {
    uint E, T;        // row length, tokens
    uint y_stride, x_stride;
    uint norm_off;    // float offset of the norm weight in vecs
    float eps;
} pc;

shared float red[64];

void main()
{
    const uint t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
    if (t >= pc.T)
        return;   // (the whole workgroup: the barriers below stay uniform)
    float ss = 0.0;
    for (uint i = lane; i < pc.E; i += 64u) {
        const float v = y[t * pc.y_stride + i];
        ss += v * v;
    }
    red[lane] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier();
    }
    const float sc = rms_scale(red[0] / float(pc.E), pc.eps);
    for (uint i = lane; i < pc.E; i += 64u)
        x[t * pc.x_stride + i] += y[t * pc.y_stride + i] * sc * vecs[pc.norm_off + i];
}
