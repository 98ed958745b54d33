/* vk_probe.c — checks, when a device is created, that the subgroup size the
 * driver reports is the one it runs. The matrix kernels (mm.comp) treat a
 * workgroup of that many invocations as one subgroup and sum across it with
 * shuffles; a driver that splits such a workgroup into smaller subgroups
 * (llvmpipe with LP_NATIVE_VECTOR_WIDTH=1024 or 2048 reports 32 or 64 and
 * runs subgroups of 16) would turn every sum into garbage. The probe runs
 * one workgroup of sg_probe.comp and, where the size it finds differs, makes
 * the device's subgroup size the one found (em_vk_dev_info.subgroup_reported
 * keeps the driver's). */
#include "core/vk/vk_int.h"
#include "shaders/em_kernels.h"

/* One workgroup of size invocations, the pipeline requiring that subgroup
 * size as the matrix kernels do. *found: the lanes invocation 0's subgroup
 * really has; *whole: every invocation saw one subgroup of size lanes with
 * lane index = invocation index. */
static int probe_once(em_vk *vk, uint32_t size, uint32_t *found, bool *whole, em_err *err)
{
    em_vk_pipe *pipe = NULL;
    em_vk_dset *set = NULL;
    em_vk_cmd *cmd = NULL;
    em_vk_buf out = { 0 };
    int rc = em_vk_pipe_create(vk, &em_kernels[EM_K_SG_PROBE], &size, 1, size, &pipe, err);
    if (rc || (rc = em_vk_alloc(vk, EM_VK_MEM_READBACK, (VkDeviceSize)size * 16, &out, err)) ||
        (rc = em_vk_dset_create(vk, pipe, &out, &set, err)) || (rc = em_vk_cmd_create(vk, 0, &cmd, err)) ||
        (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_vk_cmd_dispatch(cmd, pipe, set, NULL, 1, 1, 1);
    if ((rc = em_vk_cmd_end(cmd, err)) || (rc = em_vk_cmd_submit_wait(cmd, err)))
        goto done;
    const uint32_t *o = out.map;   /* per invocation: active lanes, lane, subgroups, 0 */
    *found = o[0];
    *whole = true;
    for (uint32_t i = 0; i < size; i++)
        if (o[4 * i] != size || o[4 * i + 1] != i || o[4 * i + 2] != 1)
            *whole = false;
done:
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(vk, set);
    em_vk_free(vk, &out);
    em_vk_pipe_destroy(vk, pipe);
    return rc;
}

int em_vk_probe_subgroup(em_vk *vk, em_err *err)
{
    em_vk_dev_info *in = &vk->info;
    uint32_t size = in->subgroup_size, found = 0;
    bool whole = false;
    in->subgroup_reported = size;
    int rc = probe_once(vk, size, &found, &whole, err);
    if (rc || whole)
        return rc;
    /* the size found must itself hold up as a whole subgroup (the pipeline
     * check accepts it once the device says it; on failure em_vk_create
     * destroys the device, so the info need not be put back) */
    uint32_t real = found;
    if (real >= 4 && real < size && (real & (real - 1)) == 0) {
        in->subgroup_size = real;
        if (real < in->subgroup_min || real > in->subgroup_max)
            in->subgroup_min = in->subgroup_max = real;
        if ((rc = probe_once(vk, real, &found, &whole, err)) || whole)
            return rc;
    }
    return em_err_set(err, EM_EUNSUPPORTED, "vulkan: device %d (%s) reports subgroups of %u "
                      "lanes, but a workgroup of %u runs as subgroups of %u: ember's kernels "
                      "need the size the device reports", in->index, in->name, size, size, real);
}
