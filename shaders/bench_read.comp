// bench_read.comp — streaming read bandwidth: sums a buffer of uvec4 words
// (wrapping uint adds) and writes one partial sum per workgroup. The buffer
// is read as a uniform texel buffer, like the matrix kernel's weights: on
// llvmpipe texel fetches cost about half its lane-by-lane storage-buffer
// loads (this kernel: 18 GB/s instead of 9.7 on the 2-core machine), so the
// ceiling is the faster path (docs/PERFORMANCE.md).
// Workgroup g reads the contiguous slice [g*per_group, (g+1)*per_group) of
// src; within it, lane i reads vec4 i, i+L, i+2L... (L = workgroup size), so
// the lanes of a subgroup always read consecutive 16-byte words: coalesced
// on GPUs. Four independent accumulators keep four loads in flight per
// lane. On llvmpipe a workgroup runs on one CPU thread, its subgroups one
// after another, each striding over the slice: slices must be small enough
// to stay in that core's cache, so core/vk/vk_bench.c gives each group 256 KiB.
// sum(partial[out_base .. out_base + groups)) == sum of the words of src.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256, local_size_x_id = 0) in;   // L: spec constant 0

layout(set = 0, binding = 0) uniform usamplerBuffer srct;   // R32G32B32A32_UINT
#define src_at(i) texelFetch(srct, int(i))
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint partial[]; };

layout(push_constant) uniform Push {
    uint n;          // uvec4 words in src
    uint per_group;  // uvec4 words per workgroup (a multiple of L)
    uint out_base;   // first partial[] slot of this dispatch
    uint pad;
} pc;

#include "wg_reduce.glsl"

void main()
{
    const uint L = gl_WorkGroupSize.x;
    uint begin = gl_WorkGroupID.x * pc.per_group;
    uint end = min(begin + pc.per_group, pc.n);
    uvec4 a0 = uvec4(0u), a1 = uvec4(0u), a2 = uvec4(0u), a3 = uvec4(0u);
    uint i = begin + gl_LocalInvocationID.x;
    for (; i + 3u * L < end; i += 4u * L) {
        a0 += src_at(i);
        a1 += src_at(i + L);
        a2 += src_at(i + 2u * L);
        a3 += src_at(i + 3u * L);
    }
    for (; i < end; i += L)
        a0 += src_at(i);
    uvec4 s = (a0 + a1) + (a2 + a3);
    uint t = em_wg_sum_u((s.x + s.y) + (s.z + s.w));
    if (gl_LocalInvocationID.x == 0u)
        partial[pc.out_base + gl_WorkGroupID.x] = t;
}
