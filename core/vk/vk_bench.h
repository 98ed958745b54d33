/* vk_bench.h — the device's own ceilings, measured by ember on the spot for
 * `ember bench`: streaming read bandwidth (shaders/bench_read.comp: read and
 * reduce a large buffer) and arithmetic peak (shaders/bench_fma.comp: an FMA
 * loop with independent chains). Both time several submissions of one
 * recorded command buffer (timestamps when the queue has them, else the
 * wall clock) and report the best. */
#ifndef EM_VK_BENCH_H
#define EM_VK_BENCH_H

#include "core/vk/vk.h"

/* Run bench_read over src (size a multiple of 16; any size: ranges larger
 * than maxStorageBufferRange are bound in parts) `repeats` times. *sum: the
 * 32-bit wrapping sum of src's uint32 words (for tests); *best_s: the fastest
 * run in seconds. Either output may be NULL. */
int em_vk_bench_read(em_vk *vk, const em_vk_buf *src, int repeats, uint32_t *sum,
                     double *best_s, em_err *err);

/* Allocate `bytes` of device memory (0: 512 MiB, limited to a quarter of the
 * device-local heap), fill it, and measure the read bandwidth in GB/s
 * (1e9 bytes/s), best of several runs. */
int em_vk_measure_read_bw(em_vk *vk, uint64_t bytes, double *gbps, em_err *err);

/* Measure the FMA peak in GFLOP/s (an FMA counts 2 flops), best of several
 * runs of ~50 ms each. */
int em_vk_measure_fma(em_vk *vk, double *gflops, em_err *err);

#endif
