/* test_vk_cmd.c — command buffers and descriptor sets: a command buffer
 * recorded once and re-submitted sees new host data each time (the decode
 * step's replay), state errors are refused, recording errors surface at
 * em_vk_cmd_end, timestamps run forward, and descriptor ranges beyond
 * maxStorageBufferRange or off the offset alignment are refused. */
#include <string.h>

#include "core/vk/vk.h"
#include "shaders/em_kernels.h"
#include "tests/gpu/gpu_util.h"

typedef struct {
    uint32_t n, per_group, out_base, pad;
} read_push;
_Static_assert(sizeof(read_push) == EM_K_BENCH_READ_PUSH, "push mirror");

static void replay(em_vk *vk)
{
    em_err err = { 0 };
    em_vk_buf src, mid, out;
    em_vk_pipe *pipe = NULL;
    em_vk_dset *set = NULL;
    em_vk_cmd *c = NULL;
    const uint32_t n_words = 4096;   /* 1024 uvec4 */
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_UPLOAD, n_words * 4, &src, &err), err);
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, n_words * 4, &mid, &err), err);
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_READBACK, 64, &out, &err), err);
    uint32_t spec = 64;
    CHECK_OK(em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], &spec, 1, 0, &pipe, &err), err);
    em_vk_buf ranges[2] = { mid, out };
    CHECK_OK(em_vk_dset_create(vk, pipe, ranges, &set, &err), err);
    CHECK_OK(em_vk_cmd_create(vk, 4, &c, &err), err);

    /* submit before recording */
    CHECK(em_vk_cmd_submit(c, &err) == EM_ESTATE);

    /* record once: copy src -> mid, barrier, sum mid in one workgroup */
    CHECK_OK(em_vk_cmd_begin(c, &err), err);
    em_vk_cmd_timestamp(c, 0);
    em_vk_cmd_copy(c, &src, 0, &mid, 0, n_words * 4);
    em_vk_cmd_barrier(c);
    read_push pc = { n_words / 4, n_words / 4, 0, 0 };
    em_vk_cmd_dispatch(c, pipe, set, &pc, 1, 1, 1);
    em_vk_cmd_timestamp(c, 1);
    CHECK_OK(em_vk_cmd_end(c, &err), err);
    CHECK(em_vk_cmd_dispatches(c) == 1 && em_vk_cmd_barriers(c) == 1);

    for (uint32_t round = 0; round < 5; round++) {
        uint32_t *w = src.map, want = 0;
        for (uint32_t i = 0; i < n_words; i++) {
            w[i] = i * 2654435761u + round * 97u;
            want += w[i];
        }
        CHECK_OK(em_vk_cmd_submit(c, &err), err);
        /* a second submit or a re-record while pending is refused */
        CHECK(em_vk_cmd_submit(c, &err) == EM_ESTATE);
        CHECK(em_vk_cmd_begin(c, &err) == EM_ESTATE);
        CHECK_OK(em_vk_cmd_wait(c, &err), err);
        CHECK_OK(em_vk_cmd_wait(c, &err), err);   /* nothing pending: no-op */
        uint32_t got = *(const uint32_t *)out.map;
        CHECKF(got == want, "replay %u: sum %u, want %u", round, got, want);
        if (em_vk_cmd_has_timestamps(c)) {
            double ns[2];
            CHECK_OK(em_vk_cmd_timestamps(c, 0, 2, ns, &err), err);
            CHECKF(ns[1] >= ns[0], "timestamps %f %f", ns[0], ns[1]);
        }
    }

    /* recording errors are sticky and reported by end */
    CHECK_OK(em_vk_cmd_begin(c, &err), err);
    em_vk_cmd_dispatch(c, pipe, set, &pc, em_vk_info(vk)->max_wg_count[0] + 1u, 1, 1);
    em_vk_cmd_barrier(c);
    int rc = em_vk_cmd_end(c, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "maxComputeWorkGroupCount"), "rc %d %s", rc,
           err.msg);
    CHECK(em_vk_cmd_submit(c, &err) == EM_ESTATE);
    CHECK_OK(em_vk_cmd_begin(c, &err), err);
    em_vk_buf odd = em_vk_buf_view(&mid, 0, 6);
    em_vk_cmd_fill(c, &odd, 0);
    rc = em_vk_cmd_end(c, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "fill"), "rc %d %s", rc, err.msg);
    CHECK_OK(em_vk_cmd_begin(c, &err), err);
    em_vk_cmd_dispatch(c, pipe, NULL, &pc, 1, 1, 1);
    rc = em_vk_cmd_end(c, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "descriptor set"), "rc %d %s", rc, err.msg);
    em_vk_cmd_dispatch(c, pipe, set, &pc, 1, 1, 1);   /* outside begin/end: ignored */

    /* a fill + copy command round trip, re-recorded on the same cmd */
    CHECK_OK(em_vk_cmd_begin(c, &err), err);
    em_vk_cmd_fill(c, &mid, 0xA5A5A5A5u);
    em_vk_cmd_barrier(c);
    em_vk_cmd_copy(c, &mid, 8, &out, 0, 64);
    CHECK_OK(em_vk_cmd_end(c, &err), err);
    CHECK_OK(em_vk_cmd_submit_wait(c, &err), err);
    CHECK(((const uint32_t *)out.map)[15] == 0xA5A5A5A5u);

    em_vk_cmd_destroy(c);
    em_vk_dset_destroy(vk, set);
    em_vk_pipe_destroy(vk, pipe);
    em_vk_free(vk, &src);
    em_vk_free(vk, &mid);
    em_vk_free(vk, &out);
}

static void ranges(em_vk *vk)
{
    em_err err = { 0 };
    const em_vk_dev_info *in = em_vk_info(vk);
    em_vk_buf big, out;
    em_vk_pipe *pipe = NULL;
    em_vk_dset *set = NULL;
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, in->max_storage_range + 256, &big, &err), err);
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, 256, &out, &err), err);
    CHECK_OK(em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], NULL, 0, 0, &pipe, &err), err);

    /* binding 1 (the partial sums) is bench_read's storage buffer; binding 0
     * a texel buffer (texel_ranges below) */
    em_vk_buf r[2] = { out, big };
    int rc = em_vk_dset_create(vk, pipe, r, &set, &err);
    CHECKF(rc == EM_ERANGE && !set && strstr(err.msg, "maxStorageBufferRange") &&
           strstr(err.msg, "binding 1"), "rc %d %s", rc, err.msg);
    /* exactly the limit is fine, in two parts too */
    r[1] = em_vk_buf_view(&big, 0, in->max_storage_range);
    CHECK_OK(em_vk_dset_create(vk, pipe, r, &set, &err), err);
    r[1] = em_vk_buf_view(&big, in->max_storage_range, 256);
    CHECK_OK(em_vk_dset_update(vk, set, r, &err), err);
    r[1] = big;
    rc = em_vk_dset_update(vk, set, r, &err);
    CHECK(rc == EM_ERANGE);
    em_vk_dset_destroy(vk, set);
    set = NULL;
    if (in->storage_align > 4) {
        r[1] = em_vk_buf_view(&big, 4, 1024);
        rc = em_vk_dset_create(vk, pipe, r, &set, &err);
        CHECKF(rc == EM_EINVAL && strstr(err.msg, "minStorageBufferOffsetAlignment"),
               "rc %d %s", rc, err.msg);
    }
    r[1] = em_vk_buf_view(&big, 0, 0);
    CHECK(em_vk_dset_create(vk, pipe, r, &set, &err) == EM_EINVAL);

    /* many sets: the descriptor pools grow; left for em_vk_destroy to free */
    r[0] = out;
    r[1] = em_vk_buf_view(&big, 0, 4096);
    for (int i = 0; i < 700; i++) {
        em_vk_dset *d = NULL;
        rc = em_vk_dset_create(vk, pipe, r, &d, &err);
        if (rc) {
            CHECK_OK(rc, err);
            break;
        }
    }
    em_vk_free(vk, &big);
    em_vk_free(vk, &out);
}

/* A kernel whose binding 0 is a texel buffer (mm.comp's weights): ranges of
 * whole 16-byte texels within maxTexelBufferElements at aligned offsets;
 * views are made per set and replaced by an update; many sets left for
 * em_vk_destroy (their views too). */
static void texel_ranges(em_vk *vk)
{
    em_err err = { 0 };
    const em_vk_dev_info *in = em_vk_info(vk);
    const em_vk_kernel *k = &em_kernels[EM_K_MM_Q4_0];
    CHECK(k->texel & 1u);   /* weights (and the input rows) */
    em_vk_pipe *pipe = NULL;
    uint32_t spec[4] = { in->subgroup_size, 8, 1, 0 };
    CHECK_OK(em_vk_pipe_create(vk, k, spec, 4, 0, &pipe, &err), err);
    em_vk_buf b;
    CHECK_OK(em_vk_alloc(vk, EM_VK_MEM_DEVICE, 1 << 20, &b, &err), err);
    em_vk_buf r[6];
    for (int i = 0; i < 6; i++)
        r[i] = em_vk_buf_view(&b, 0, 4096);
    em_vk_dset *set = NULL;
    CHECK_OK(em_vk_dset_create(vk, pipe, r, &set, &err), err);
    r[0] = em_vk_buf_view(&b, 4096, 8192);
    CHECK_OK(em_vk_dset_update(vk, set, r, &err), err);
    r[0] = em_vk_buf_view(&b, 0, 4100);                    /* not whole texels */
    int rc = em_vk_dset_update(vk, set, r, &err);
    CHECKF(rc == EM_ERANGE && strstr(err.msg, "maxTexelBufferElements"), "rc %d %s", rc, err.msg);
    if (in->texel_align > 4) {
        r[0] = em_vk_buf_view(&b, 4, 4096);
        rc = em_vk_dset_update(vk, set, r, &err);
        CHECKF(rc == EM_EINVAL && strstr(err.msg, "minTexelBufferOffsetAlignment"), "rc %d %s", rc,
               err.msg);
    }
    if (in->max_texel_elems * 16 < (1u << 20)) {
        r[0] = em_vk_buf_view(&b, 0, 1 << 20);
        CHECK(em_vk_dset_update(vk, set, r, &err) == EM_ERANGE);
    }
    em_vk_dset_destroy(vk, set);
    r[0] = em_vk_buf_view(&b, 0, 4096);
    for (int i = 0; i < 300; i++) {
        em_vk_dset *d = NULL;
        if ((rc = em_vk_dset_create(vk, pipe, r, &d, &err))) {
            CHECK_OK(rc, err);
            break;
        }
    }
    em_vk_free(vk, &b);
}

int main(void)
{
    em_vk *vk = gpu_open("test_vk_cmd", NULL);
    replay(vk);
    ranges(vk);
    texel_ranges(vk);
    gpu_close(vk);
    return test_summary("test_vk_cmd");
}
