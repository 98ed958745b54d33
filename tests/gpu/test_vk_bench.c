/* test_vk_bench.c — the bench kernels: bench_read's sum equals the CPU sum
 * for known buffers (an odd number of uvec4 words; and one larger than
 * maxStorageBufferRange, bound in parts), and the bandwidth / FMA
 * measurements run and report plausible figures. */
#include <stdlib.h>
#include <string.h>

#include "core/vk/vk.h"
#include "core/vk/vk_bench.h"
#include "tests/gpu/gpu_util.h"

static void sum_check(em_vk *vk, uint64_t bytes)
{
    em_err err = { 0 };
    em_vk_buf b;
    uint32_t *w = malloc(bytes);
    CHECK(w != NULL);
    if (!w)
        return;
    unsigned long long s = 12345;
    uint32_t want = 0;
    for (uint64_t i = 0; i < bytes / 4; i++) {
        w[i] = (uint32_t)(test_rand(&s) >> 16);
        want += w[i];
    }
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, bytes, &b, &err), err);
    CHECK_OK(em_vk_upload(vk, &b, 0, w, bytes, NULL, &err), err);
    uint32_t got = 0;
    double sec = 0;
    int rc = em_vk_bench_read(vk, &b, 2, &got, &sec, &err);
    CHECK_OK(rc, err);
    CHECKF(got == want, "%llu bytes: GPU sum %u, CPU sum %u", (unsigned long long)bytes, got,
           want);
    CHECK(sec > 0);
    printf("bench_read of %llu bytes: sum ok, %.2f GB/s\n", (unsigned long long)bytes,
           (double)bytes / sec * 1e-9);
    em_vk_free(vk, &b);
    free(w);
}

int main(void)
{
    em_err err = { 0 };
    em_vk *vk = gpu_open("test_vk_bench", NULL);
    const em_vk_dev_info *in = em_vk_info(vk);

    sum_check(vk, 16);
    sum_check(vk, (3u << 20) + 48);        /* 196611 uvec4: not a multiple of anything */
    sum_check(vk, in->max_storage_range + 4096 + 16);   /* two ranges */

    em_vk_buf odd;
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, 20, &odd, &err), err);
    CHECK(em_vk_bench_read(vk, &odd, 1, NULL, NULL, &err) == EM_EINVAL);
    em_vk_free(vk, &odd);

    double gbps = 0, gflops = 0;
    CHECK_OK(em_vk_measure_read_bw(vk, 64u << 20, &gbps, &err), err);
    CHECK(gbps > 0.01);
    CHECK_OK(em_vk_measure_fma(vk, &gflops, &err), err);
    CHECK(gflops > 0.01);
    printf("read bandwidth %.2f GB/s, FMA peak %.2f GFLOP/s (%s)\n", gbps, gflops, in->name);
    gpu_close(vk);
    return test_summary("test_vk_bench");
}
