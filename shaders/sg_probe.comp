// sg_probe.comp — what one workgroup of the subgroup size the driver reports
// really runs as (core/vk/vk_probe.c): every invocation writes the lanes active
// in its subgroup, its lane index and gl_NumSubgroups. The
// matrix kernels treat a workgroup of that size as one subgroup; a driver
// that splits it (llvmpipe with LP_NATIVE_VECTOR_WIDTH=1024 reports 32 and
// runs two subgroups of 16, and gl_SubgroupSize still says 32 in the shader)
// would make their shuffles read garbage.
#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) writeonly buffer Out { uvec4 o[]; };   // .w unused

void main()
{
    o[gl_LocalInvocationID.x] = uvec4(subgroupAdd(1u), gl_SubgroupInvocationID, gl_NumSubgroups, 0u);
}
