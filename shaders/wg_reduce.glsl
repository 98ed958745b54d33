// wg_reduce.glsl — workgroup-wide sums: subgroupAdd inside each subgroup,
// then the subgroup totals through shared memory. Needs
// GL_KHR_shader_subgroup_arithmetic (ember requires it on every device).
// Every invocation of the workgroup must call it (it has a barrier); the
// result is valid in subgroup 0 (so in local invocation 0).
#ifndef EM_WG_REDUCE_GLSL
#define EM_WG_REDUCE_GLSL

// one slot per subgroup; subgroups are at least 4 wide on every device
shared uint em_red_u[(gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z + 3u) / 4u];

uint em_wg_sum_u(uint v)
{
    v = subgroupAdd(v);
    if (subgroupElect())
        em_red_u[gl_SubgroupID] = v;
    barrier();
    uint t = 0u;
    if (gl_SubgroupID == 0u) {
        for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize)
            t += em_red_u[i];
        t = subgroupAdd(t);
    }
    return t;
}

#endif
