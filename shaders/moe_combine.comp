// moe_combine.comp — a mixture of experts' output added to the residual
// stream: x[t][i] += sum over token t's K pairs p of w[p] * (ye[p][i] +
// the down bias of p's expert, where the model has one). ye holds each
// pair's expert output (mm.comp EXPERT), w and the chosen experts
// moe_route.comp's. Grid: (ceil(E / 64), T).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer YE { float ye[]; };
layout(std430, binding = 1) readonly buffer MOE { int moe[]; };
layout(std430, binding = 2) readonly buffer Vecs { float vecs[]; };
layout(std430, binding = 3) buffer XOut { float x[]; };

layout(push_constant) uniform Push {
    uint E, T, K;
    uint ye_stride, x_stride;
    uint sel_off, w_off;
    uint bias_off;          // vecs offset of the down biases [NE][E]; 0xFFFFFFFF: none
} pc;

void main()
{
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i >= pc.E || t >= pc.T)
        return;
    float acc = 0.0;
    for (uint j = 0u; j < pc.K; j++) {
        const uint p = t * pc.K + j;
        float v = ye[p * pc.ye_stride + i];
        if (pc.bias_off != 0xFFFFFFFFu)
            v += vecs[pc.bias_off + uint(moe[pc.sel_off + p]) * pc.E + i];
        acc += intBitsToFloat(moe[pc.w_off + p]) * v;
    }
    x[t * pc.x_stride + i] += acc;
}
