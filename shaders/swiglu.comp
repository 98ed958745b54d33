// swiglu.comp — h[t][j] = silu(gu[t][j]) * gu[t][F + j] (GELU: gelu(...), the
// tanh form) for the case where gate and up weights have different types
// and cannot share one interleaved matrix (mm.comp's SWIGLU epilogue
// handles the common case).
#version 450

#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const bool GELU = false;

layout(std430, binding = 0) readonly buffer GU { float gu[]; };
layout(std430, binding = 1) writeonly buffer HV { float h[]; };

layout(push_constant) uniform Push {
    uint F, T, gu_stride, h_stride;
} pc;

void main()
{
    uint j = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (j >= pc.F || t >= pc.T)
        return;
    float g = gu[t * pc.gu_stride + j];
    h[t * pc.h_stride + j] = ffn_gate(g, GELU) * gu[t * pc.gu_stride + pc.F + j];
}
