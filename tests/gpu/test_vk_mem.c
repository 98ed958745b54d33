/* test_vk_mem.c — device memory: suballocation (alignment, no overlap,
 * reuse after free, accounting), a dedicated allocation larger than a
 * binding range, the limits (size 0, beyond maxMemoryAllocationSize), and
 * upload/download round trips of awkward sizes and offsets, both through the
 * mapping (unified memory) and through a small staging buffer. */
#include <stdlib.h>
#include <string.h>

#include "core/vk/vk.h"
#include "tests/gpu/gpu_util.h"

#define N_SMALL 600

static unsigned long long rng = 0x9E3779B97F4A7C15ull;

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(test_rand(&rng) >> 24);
}

static int cmp_buf(const void *a, const void *b)
{
    const em_vk_buf *x = a, *y = b;
    if (x->buf != y->buf)
        return x->buf < y->buf ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* block: the suballocation block size vk was opened with (opts.block_bytes) */
static void suballocation(em_vk *vk, VkDeviceSize block)
{
    em_err err = { 0 };
    const em_vk_dev_info *in = em_vk_info(vk);
    static em_vk_buf b[N_SMALL], sorted[N_SMALL];
    em_vk_mem_stats st0, st;
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &st0);

    uint64_t want = 0;
    for (int i = 0; i < N_SMALL; i++) {
        VkDeviceSize size = 1 + test_rand(&rng) % 200000;
        int rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, size, &b[i], &err);
        CHECK_OK(rc, err);
        CHECK(b[i].size == size && b[i].buf);
        CHECKF(b[i].off % in->storage_align == 0 && b[i].off % 16 == 0, "off %llu",
               (unsigned long long)b[i].off);
        want += size;
    }
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &st);
    CHECK(st.used - st0.used == want);
    CHECK(st.n_allocs - st0.n_allocs == N_SMALL);
    CHECK(st.reserved >= st.used);
    uint32_t blocks_full = st.n_blocks;

    /* no two ranges of one buffer overlap */
    memcpy(sorted, b, sizeof b);
    qsort(sorted, N_SMALL, sizeof sorted[0], cmp_buf);
    for (int i = 1; i < N_SMALL; i++)
        if (sorted[i].buf == sorted[i - 1].buf)
            CHECKF(sorted[i - 1].off + sorted[i - 1].size <= sorted[i].off, "overlap at %d", i);

    /* contents stay put: tag each range's first and last bytes */
    for (int i = 0; i < N_SMALL; i += 7) {
        unsigned char tag[2] = { (unsigned char)i, (unsigned char)(i >> 8) };
        CHECK(em_vk_upload(vk, &b[i], 0, tag, 1, NULL, &err) == 0);
        CHECK(em_vk_upload(vk, &b[i], b[i].size - 1, tag + 1, 1, NULL, &err) == 0);
    }
    for (int i = 0; i < N_SMALL; i += 7) {
        unsigned char t0 = 0, t1 = 0;
        CHECK(em_vk_download(vk, &b[i], 0, &t0, 1, NULL, &err) == 0);
        CHECK(em_vk_download(vk, &b[i], b[i].size - 1, &t1, 1, NULL, &err) == 0);
        CHECKF(t0 == (unsigned char)i && t1 == (unsigned char)(i >> 8) &&
               (b[i].size > 1 || t0 == t1), "range %d lost its tags", i);
    }

    /* free every other one and allocate the same sizes again: no new block */
    for (int i = 0; i < N_SMALL; i += 2) {
        VkDeviceSize size = b[i].size;
        em_vk_free(vk, &b[i]);
        CHECK(b[i].buf == VK_NULL_HANDLE);
        b[i].size = size;
    }
    for (int i = 0; i < N_SMALL; i += 2)
        CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, b[i].size, &b[i], &err), err);
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &st);
    CHECKF(st.n_blocks == blocks_full, "%u blocks after reuse, %u before", st.n_blocks,
           blocks_full);

    /* one allocation bigger than a binding range and than a block: a
     * dedicated block of its own size */
    em_vk_buf big = { 0 };
    VkDeviceSize big_size = in->max_storage_range + 3 * 1024 * 1024 + 5;
    if (big_size < 129ull << 20)
        big_size = (129ull << 20) + 5;
    CHECK(big_size > block);
    em_vk_mem_stats before;
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &before);
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, big_size, &big, &err), err);
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &st);
    CHECKF(st.n_blocks == before.n_blocks + 1 && st.reserved - before.reserved >= big_size &&
           st.reserved - before.reserved < big_size + 65536,
           "%u blocks (%u before), %llu bytes reserved for %llu", st.n_blocks, before.n_blocks,
           (unsigned long long)(st.reserved - before.reserved), (unsigned long long)big_size);
    unsigned char probe[3] = { 1, 2, 3 }, back[3] = { 0 };
    CHECK(em_vk_upload(vk, &big, big_size - 3, probe, 3, NULL, &err) == 0);
    CHECK(em_vk_download(vk, &big, big_size - 3, back, 3, NULL, &err) == 0);
    CHECK(memcmp(probe, back, 3) == 0);
    em_vk_free(vk, &big);
    em_vk_free(vk, &big);   /* a zeroed buf: no-op */

    for (int i = 0; i < N_SMALL; i++)
        em_vk_free(vk, &b[i]);
    em_vk_mem_stats_get(vk, EM_VK_MEM_DEVICE, &st);
    CHECK(st.used == st0.used && st.n_allocs == st0.n_allocs);
    CHECKF(st.n_blocks <= st0.n_blocks + 1, "%u blocks left", st.n_blocks);

    /* limits */
    em_vk_buf x;
    CHECK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, 0, &x, &err) == EM_EINVAL);
    int rc = em_vk_alloc(vk, EM_VK_MEM_DEVICE, in->max_alloc + 1, &x, &err);
    CHECKF(rc == EM_ENOMEM && strstr(err.msg, "maxMemoryAllocationSize"), "rc %d %s", rc,
           err.msg);
    CHECK(x.buf == VK_NULL_HANDLE);

    /* views */
    em_vk_buf whole;
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_UPLOAD, 1000, &whole, &err), err);
    CHECK(whole.map != NULL);
    em_vk_buf v = em_vk_buf_view(&whole, 256, 100);
    CHECK(v.off == whole.off + 256 && v.size == 100 && v.map == (char *)whole.map + 256);
    em_vk_free(vk, &v);           /* views are not freed */
    CHECK(whole.buf != VK_NULL_HANDLE);
    em_vk_free(vk, &whole);
}

/* Round trips of awkward sizes at awkward offsets, for every kind. */
static void round_trips(em_vk *vk, const char *label, size_t staging)
{
    em_err err = { 0 };
    const size_t sizes[] = { 1, 3, 4097, (1u << 20) + 13, 3 * staging + 4095, 5 * staging + 7 };
    const size_t off = 5;
    for (int kind = 0; kind < EM_VK_MEM_KINDS; kind++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            unsigned char *src = malloc(n), *dst = malloc(n);
            em_vk_buf b = { 0 };
            CHECK(src && dst);
            fill_random(src, n);
            memset(dst, 0xEE, n);
            int rc = em_vk_alloc(vk, (em_vk_mem_kind)kind, n + off + 3, &b, &err);
            CHECK_OK(rc, err);
            em_vk_progress prog;
            em_vk_progress_begin(&prog, "test upload", n);
            rc = em_vk_upload(vk, &b, off, src, n, &prog, &err);
            CHECK_OK(rc, err);
            CHECK(prog.done == n);
            em_vk_progress_end(&prog);
            rc = em_vk_download(vk, &b, off, dst, n, NULL, &err);
            CHECK_OK(rc, err);
            CHECKF(memcmp(src, dst, n) == 0, "%s: %s round trip of %zu bytes differs", label,
                   em_vk_mem_kind_name((em_vk_mem_kind)kind), n);
            /* outside the buffer */
            rc = em_vk_upload(vk, &b, off + 4, src, n, NULL, &err);
            CHECKF(rc == EM_ERANGE, "rc %d", rc);
            em_vk_free(vk, &b);
            free(src);
            free(dst);
        }
    }
}

int main(void)
{
    em_vk_opts o = EM_VK_OPTS_INIT;
    o.block_bytes = 64u << 20;
    em_vk *vk = gpu_open("test_vk_mem", &o);
    const em_vk_dev_info *in = em_vk_info(vk);
    printf("unified memory: %s\n", in->unified ? "yes" : "no");
    suballocation(vk, o.block_bytes);
    round_trips(vk, "default", 1u << 20);
    gpu_close(vk);

    /* the discrete-GPU path: device memory never mapped, a 1 MiB staging buffer */
    o = (em_vk_opts)EM_VK_OPTS_INIT;
    o.as_gpu = 1;
    o.staging_bytes = 1u << 20;
    o.block_bytes = 8u << 20;
    vk = gpu_open("test_vk_mem", &o);
    em_err err = { 0 };
    em_vk_buf b;
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, 64, &b, &err), err);
    CHECK(b.map == NULL);
    em_vk_free(vk, &b);
    round_trips(vk, "staged", 1u << 20);
    suballocation(vk, o.block_bytes);
    em_vk_mem_stats st;
    em_vk_mem_stats_get(vk, EM_VK_MEM_UPLOAD, &st);
    CHECK(st.n_allocs == 1);   /* the staging buffer */
    gpu_close(vk);
    return test_summary("test_vk_mem");
}
