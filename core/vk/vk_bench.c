/* vk_bench.c — measures the device's streaming read bandwidth and FMA peak
 * with the bench_read / bench_fma kernels (see core/vk/vk_bench.h). Each
 * measurement records its dispatches once and re-submits the command
 * buffer, timing every run with timestamps (or the wall clock). */
#include "core/vk/vk_bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/vk/vk_int.h"
#include "shaders/em_kernels.h"

typedef struct {
    uint32_t n, per_group, out_base, pad;
} bench_read_push;
_Static_assert(sizeof(bench_read_push) == EM_K_BENCH_READ_PUSH, "push mirror");
_Static_assert(offsetof(bench_read_push, out_base) == 8, "push mirror");

typedef struct {
    float    a, b;
    uint32_t iters, pad;
} bench_fma_push;
_Static_assert(sizeof(bench_fma_push) == EM_K_BENCH_FMA_PUSH, "push mirror");
_Static_assert(offsetof(bench_fma_push, iters) == 8, "push mirror");

#define WG 256u   /* workgroup size of both kernels */

/* Submit c (already recorded) and return the run's seconds. */
static int timed_run(em_vk_cmd *c, double *sec, em_err *err)
{
    double t0 = em_vk_now();
    int rc = em_vk_cmd_submit_wait(c, err);
    if (rc)
        return rc;
    *sec = em_vk_now() - t0;
    if (em_vk_cmd_has_timestamps(c)) {
        double ns[2];
        rc = em_vk_cmd_timestamps(c, 0, 2, ns, err);
        if (rc)
            return rc;
        if (ns[1] > ns[0])
            *sec = (ns[1] - ns[0]) * 1e-9;
    }
    return 0;
}

int em_vk_bench_read(em_vk *vk, const em_vk_buf *src, int repeats, uint32_t *sum,
                     double *best_s, em_err *err)
{
    int rc;
    em_vk_pipe *pipe = NULL;
    em_vk_cmd *cmd = NULL;
    em_vk_dset **sets = NULL;
    em_vk_buf partial = { 0 };
    uint32_t n_ranges = 0;

    if (src->size == 0 || src->size % 16) {
        rc = em_err_set(err, EM_EINVAL, "bench: read buffer of %llu bytes (want a non-zero "
                        "multiple of 16)", (unsigned long long)src->size);
        goto done;
    }
    const em_vk_dev_info *in = em_vk_info(vk);
    uint32_t spec[1] = { WG };
    rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], spec, 1, 0, &pipe, err);
    if (rc)
        goto done;

    /* ranges of at most maxTexelBufferElements texels (and 2^31, texelFetch
     * takes an int), aligned */
    uint64_t range = (in->max_texel_elems < (1ull << 31) ? in->max_texel_elems : (1ull << 31)) * 16;
    uint64_t align = in->texel_align > 16 ? in->texel_align : 16;
    range = range / align * align;
    n_ranges = (uint32_t)((src->size + range - 1) / range);
    /* 256 KiB per workgroup (64 uvec4 per lane): on llvmpipe a workgroup's
     * subgroups run one after the other, each striding over the group's
     * slice, so the slice must stay in the core's cache (measured with the
     * texel reads on the 2-core machine: 16 KiB 10.7 GB/s, 64 KiB 16.9,
     * 256 KiB 17.8-18.0, 1 MiB 17.9, 4 MiB 17.1; with storage-buffer reads
     * 64 KiB 9.2, 256 KiB 6.7); plenty of groups for a GPU. */
    uint64_t groups_per_range[64], per_group[64];
    uint64_t total_groups = 0;
    if (n_ranges > 64) {
        rc = em_err_set(err, EM_ERANGE, "bench: read buffer of %llu bytes is too large",
                        (unsigned long long)src->size);
        goto done;
    }
    for (uint32_t r = 0; r < n_ranges; r++) {
        uint64_t bytes = r + 1 < n_ranges ? range : src->size - (uint64_t)r * range;
        uint64_t n = bytes / 16, per = 64 * WG;
        while ((n + per - 1) / per > in->max_wg_count[0])
            per *= 2;
        per_group[r] = per;
        groups_per_range[r] = (n + per - 1) / per;
        total_groups += groups_per_range[r];
    }
    rc = em_vk_alloc(vk, EM_VK_MEM_READBACK, total_groups * 4, &partial, err);
    if (rc)
        goto done;
    sets = calloc(n_ranges, sizeof *sets);
    if (!sets) {
        rc = em_err_set(err, EM_ENOMEM, "bench: out of memory");
        goto done;
    }
    rc = em_vk_cmd_create(vk, 2, &cmd, err);
    if (rc || (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_vk_cmd_timestamp(cmd, 0);
    uint64_t base = 0;
    for (uint32_t r = 0; r < n_ranges; r++) {
        uint64_t bytes = r + 1 < n_ranges ? range : src->size - (uint64_t)r * range;
        uint64_t n = bytes / 16, g = groups_per_range[r];
        em_vk_buf b[2] = { em_vk_buf_view(src, (uint64_t)r * range, bytes),
                           em_vk_buf_view(&partial, 0, partial.size) };
        rc = em_vk_dset_create(vk, pipe, b, &sets[r], err);
        if (rc)
            goto done;
        bench_read_push pc = { (uint32_t)n, (uint32_t)per_group[r], (uint32_t)base, 0 };
        em_vk_cmd_dispatch(cmd, pipe, sets[r], &pc, (uint32_t)g, 1, 1);
        base += g;
    }
    em_vk_cmd_timestamp(cmd, 1);
    if ((rc = em_vk_cmd_end(cmd, err)))
        goto done;
    double best = INFINITY;
    for (int i = 0; i < (repeats > 0 ? repeats : 1); i++) {
        double s;
        if ((rc = timed_run(cmd, &s, err)))
            goto done;
        if (s < best)
            best = s;
    }
    if (sum) {
        uint32_t t = 0;
        const uint32_t *p = partial.map;
        for (uint64_t i = 0; i < total_groups; i++)
            t += p[i];
        *sum = t;
    }
    if (best_s)
        *best_s = best;
done:
    em_vk_cmd_destroy(cmd);
    for (uint32_t r = 0; sets && r < n_ranges; r++)
        em_vk_dset_destroy(vk, sets[r]);
    free(sets);
    em_vk_free(vk, &partial);
    em_vk_pipe_destroy(vk, pipe);
    if (rc)
        em_err_prefix(err, rc, "bench_read");
    return rc;
}

int em_vk_measure_read_bw(em_vk *vk, uint64_t bytes, double *gbps, em_err *err)
{
    int rc;
    em_vk_buf buf = { 0 };
    em_vk_cmd *cmd = NULL;
    const em_vk_dev_info *in = em_vk_info(vk);
    *gbps = 0;
    if (!bytes) {
        bytes = 512 * EM_VK_MIB;
        if (in->device_local_bytes && bytes > in->device_local_bytes / 4)
            bytes = in->device_local_bytes / 4;
        if (bytes > in->max_alloc)
            bytes = in->max_alloc;
    }
    bytes = bytes / 256 * 256;
    if ((rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, bytes, &buf, err)))
        goto done;
    if ((rc = em_vk_cmd_create(vk, 0, &cmd, err)) || (rc = em_vk_cmd_begin(cmd, err)))
        goto done;
    em_vk_cmd_fill(cmd, &buf, 0x01020304u);
    if ((rc = em_vk_cmd_end(cmd, err)) || (rc = em_vk_cmd_submit_wait(cmd, err)))
        goto done;
    double s = 0;
    if ((rc = em_vk_bench_read(vk, &buf, 5, NULL, &s, err)))
        goto done;
    *gbps = (double)bytes / s * 1e-9;
done:
    em_vk_cmd_destroy(cmd);
    em_vk_free(vk, &buf);
    return rc;
}

int em_vk_measure_fma(em_vk *vk, double *gflops, em_err *err)
{
    int rc;
    em_vk_pipe *pipe = NULL;
    em_vk_dset *set = NULL;
    em_vk_cmd *cmd = NULL;
    em_vk_buf out = { 0 };
    const uint32_t groups = 1024, chains = 4;   /* CHAINS=4 in shaders/meson.build */
    *gflops = 0;
    uint32_t spec[1] = { WG };
    if ((rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_FMA], spec, 1, 0, &pipe, err)))
        goto done;
    if ((rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, (VkDeviceSize)groups * WG * 4, &out, err)))
        goto done;
    if ((rc = em_vk_dset_create(vk, pipe, &out, &set, err)))
        goto done;
    if ((rc = em_vk_cmd_create(vk, 2, &cmd, err)))
        goto done;
    /* grow the loop until one run takes >= 50 ms, then keep the best of 5 */
    bench_fma_push pc = { 0.999f, 0.001f, 16, 0 };
    double best = INFINITY;
    for (int runs = 0; runs < 5;) {
        if ((rc = em_vk_cmd_begin(cmd, err)))
            goto done;
        em_vk_cmd_timestamp(cmd, 0);
        em_vk_cmd_dispatch(cmd, pipe, set, &pc, groups, 1, 1);
        em_vk_cmd_timestamp(cmd, 1);
        if ((rc = em_vk_cmd_end(cmd, err)))
            goto done;
        double s;
        if ((rc = timed_run(cmd, &s, err)))
            goto done;
        if (s < 0.05 && pc.iters < (1u << 24)) {
            double grow = s > 0 ? 0.06 / s : 16;
            grow = grow > 16 ? 16 : (grow < 2 ? 2 : grow);
            pc.iters = (uint32_t)(pc.iters * grow + 3) / 4 * 4;
            continue;
        }
        for (; runs < 5; runs++) {
            if (runs && (rc = timed_run(cmd, &s, err)))
                goto done;
            if (s < best)
                best = s;
        }
    }
    *gflops = (double)groups * WG * pc.iters * chains * 8.0 / best * 1e-9;
done:
    em_vk_cmd_destroy(cmd);
    em_vk_dset_destroy(vk, set);
    em_vk_free(vk, &out);
    em_vk_pipe_destroy(vk, pipe);
    if (rc)
        em_err_prefix(err, rc, "bench_fma");
    return rc;
}
