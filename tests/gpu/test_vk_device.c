/* test_vk_device.c — device enumeration and creation: the info ember reports
 * is sane, the default choice and explicit indices work, bad indices and
 * missing required features are refused with errors that name them, and
 * disabled features make kernels that need them unsupported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/vk/vk.h"
#include "shaders/em_kernels.h"
#include "tests/gpu/gpu_util.h"

static bool pow2(uint32_t v)
{
    return v && !(v & (v - 1));
}

static void check_info(const em_vk_dev_info *d)
{
    CHECK(d->name[0]);
    CHECK(d->vendor && d->vendor[0]);
    CHECK(d->type_name && d->type_name[0]);
    CHECK(d->api_version >= VK_API_VERSION_1_1);
    CHECK(d->n_heaps >= 1);
    CHECK(d->device_local_bytes > 0);
    CHECKF(pow2(d->subgroup_size), "subgroup size %u", d->subgroup_size);
    CHECK(d->subgroup_min <= d->subgroup_size && d->subgroup_size <= d->subgroup_max);
    CHECK(d->max_storage_range >= (1u << 27));   /* the Vulkan spec's minimum */
    CHECK(d->max_alloc >= d->max_storage_range / 2);
    CHECK(pow2((uint32_t)d->storage_align));
    CHECK(d->max_wg_invocations >= 128);
    CHECK(d->max_wg_size[0] >= 128 && d->max_wg_count[0] >= 65535);
    CHECK(d->max_shared >= 16384);
    CHECK(d->max_push >= 128);
    CHECK(d->enabled == 0);
}

int main(void)
{
    em_err err = { 0 };
    em_vk_dev_info *devs = NULL;
    int n = 0, pick = -1;
    int rc = em_vk_enumerate(&devs, &n, &pick, &err);
    if (rc == EM_ENODEV) {
        printf("test_vk_device: SKIP: %s\n", err.msg);
        return 77;
    }
    CHECK_OK(rc, err);
    CHECK(n >= 1 && pick >= -1 && pick < n);
    for (int i = 0; i < n; i++) {
        CHECK(devs[i].index == i);
        if (!devs[i].unusable[0])
            check_info(&devs[i]);
        printf("device %d: %s [%s] vendor %s, subgroup %u (%u..%u)%s%s\n", i, devs[i].name,
               devs[i].type_name, devs[i].vendor, devs[i].subgroup_size, devs[i].subgroup_min,
               devs[i].subgroup_max, devs[i].unusable[0] ? ", unusable: " : "",
               devs[i].unusable);
    }

    /* the default choice */
    em_vk *vk = gpu_open("test_vk_device", NULL);
    const em_vk_dev_info *in = em_vk_info(vk);
    CHECK(in->index == pick);
    CHECK((in->enabled & EM_VK_F_REQUIRED) == EM_VK_F_REQUIRED);
    CHECK((in->enabled & ~in->features) == 0);
    char list[512];
    em_vk_feature_list(in->enabled, list, sizeof list);
    printf("enabled: %s\n", list);

    /* the subgroup check at creation: the driver's size is kept in
     * subgroup_reported; the size used is a power of two no larger. With
     * EMBER_TEST_SUBGROUP_RUNS=N (meson: llvmpipe at LP_NATIVE_VECTOR_WIDTH
     * 1024, which reports 32 and runs 16) a CPU device must have been found
     * running N; otherwise nothing may have changed. */
    const char *runs = getenv("EMBER_TEST_SUBGROUP_RUNS");
    printf("subgroup: reported %u, runs %u\n", in->subgroup_reported, in->subgroup_size);
    CHECK(in->subgroup_reported == devs[pick].subgroup_size);
    CHECK(pow2(in->subgroup_size) && in->subgroup_size <= in->subgroup_reported);
    CHECK(in->subgroup_min <= in->subgroup_size && in->subgroup_size <= in->subgroup_max);
    if (runs && in->type == VK_PHYSICAL_DEVICE_TYPE_CPU)
        CHECKF(in->subgroup_size == (uint32_t)atoi(runs) && in->subgroup_reported > in->subgroup_size,
               "runs %u, want %s", in->subgroup_size, runs);
    else if (!runs)
        CHECK(in->subgroup_size == in->subgroup_reported);

    /* pipelines: every embedded kernel the device supports builds */
    for (int k = 0; k < EM_K_COUNT; k++) {
        em_vk_pipe *p = NULL;
        if (!em_vk_kernel_supported(vk, &em_kernels[k]))
            continue;
        rc = em_vk_pipe_create(vk, &em_kernels[k], NULL, 0, 0, &p, &err);
        CHECKF(rc == 0 && p, "kernel %s: %s", em_kernels[k].name, err.msg);
        em_vk_pipe_destroy(vk, p);
    }
    /* required subgroup size: the device's own works, 3 never does */
    em_vk_pipe *p = NULL;
    uint32_t spec = 64;
    rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], &spec, 1, in->subgroup_size, &p,
                           &err);
    CHECK_OK(rc, err);
    em_vk_pipe_destroy(vk, p);
    rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], &spec, 1, 3, &p, &err);
    CHECKF(rc == EM_EUNSUPPORTED && strstr(err.msg, "subgroup size 3"), "rc %d %s", rc, err.msg);
    /* more specialization constants than the module declares */
    uint32_t spec2[4] = { 64, 1, 2, 3 };
    rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_READ], spec2, 4, 0, &p, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "specialization"), "rc %d %s", rc, err.msg);
    gpu_close(vk);

    /* explicit index, and EMBER_DEVICE */
    em_vk_opts o = EM_VK_OPTS_INIT;
    o.device = n - 1;
    vk = NULL;
    rc = em_vk_create(&o, &vk, &err);
    CHECK(rc == 0 || devs[n - 1].unusable[0]);
    if (vk)
        CHECK(em_vk_info(vk)->index == n - 1);
    em_vk_destroy(vk);
    o.device = n + 5;
    rc = em_vk_create(&o, &vk, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "no such device"), "rc %d %s", rc, err.msg);
    setenv("EMBER_DEVICE", "banana", 1);
    rc = em_vk_create(NULL, &vk, &err);
    CHECKF(rc == EM_EINVAL && strstr(err.msg, "EMBER_DEVICE=banana"), "rc %d %s", rc, err.msg);
    int pick2 = 0;
    em_vk_dev_info *d2 = NULL;
    rc = em_vk_enumerate(&d2, &n, &pick2, &err);
    CHECK(rc == EM_EINVAL);
    free(d2);
    unsetenv("EMBER_DEVICE");

    /* a required feature the device lacks is named */
    uint32_t lacking = 0;
    for (uint32_t b = 1; b < (1u << EM_VK_F_COUNT_); b <<= 1)
        if (!(devs[pick].features & b)) {
            lacking = b;
            break;
        }
    if (lacking) {
        o = (em_vk_opts)EM_VK_OPTS_INIT;
        o.device = pick;
        o.require = lacking;
        rc = em_vk_create(&o, &vk, &err);
        CHECKF(rc == EM_EUNSUPPORTED && strstr(err.msg, em_vk_feature_name(lacking)),
               "rc %d %s", rc, err.msg);
    }

    /* disabled optional features: kernels needing them are refused */
    uint32_t optional = devs[pick].features & ~(uint32_t)EM_VK_F_REQUIRED & ~EM_VK_F_TIMESTAMPS;
    if (optional & EM_VK_F_FLOAT16) {
        o = (em_vk_opts)EM_VK_OPTS_INIT;
        o.disable = EM_VK_F_FLOAT16 | EM_VK_F_SG_ARITH; /* a required one stays on */
        vk = gpu_open("test_vk_device", &o);
        in = em_vk_info(vk);
        CHECK(!(in->enabled & EM_VK_F_FLOAT16));
        CHECK(in->enabled & EM_VK_F_SG_ARITH);
        em_vk_kernel k = em_kernels[EM_K_BENCH_FMA];
        k.needs |= EM_VK_F_FLOAT16;
        CHECK(!em_vk_kernel_supported(vk, &k));
        rc = em_vk_pipe_create(vk, &k, NULL, 0, 0, &p, &err);
        CHECKF(rc == EM_EUNSUPPORTED && strstr(err.msg, "shaderFloat16") &&
               strstr(err.msg, "disabled"), "rc %d %s", rc, err.msg);
        gpu_close(vk);
    }

    /* the pipeline cache file: written at destroy, read back next time */
    char *tmp = test_tmpdir();
    char cache[512];
    snprintf(cache, sizeof cache, "%s/pipelines.bin", tmp);
    size_t written = 0;
    for (int round = 0; round < 2; round++) {
        o = (em_vk_opts)EM_VK_OPTS_INIT;
        o.cache_path = cache;
        vk = gpu_open("test_vk_device", &o);
        /* round 0 finds no file; round 1 reads all of round 0's */
        CHECKF(em_vk_pipe_cache_loaded(vk) == written, "round %d: %zu bytes loaded, %zu written",
               round, em_vk_pipe_cache_loaded(vk), written);
        rc = em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_FMA], NULL, 0, 0, &p, &err);
        CHECK_OK(rc, err);
        gpu_close(vk);
        char *data = test_read_file(cache, &written);
        CHECKF(data && written >= 32, "round %d: cache file of %zu bytes", round, written);
        free(data);
    }
    test_write_file(cache, "garbage that is not a pipeline cache at all....", 48);
    o = (em_vk_opts)EM_VK_OPTS_INIT;
    o.cache_path = cache;
    vk = gpu_open("test_vk_device", &o);   /* a bad file is ignored */
    CHECK(em_vk_pipe_cache_loaded(vk) == 0);
    CHECK_OK(em_vk_pipe_create(vk, &em_kernels[EM_K_BENCH_FMA], NULL, 0, 0, &p, &err), err);
    gpu_close(vk);
    test_rmtree(tmp);
    free(tmp);

    /* feature keys */
    uint32_t mask = 0;
    CHECK(em_vk_feature_parse("float16, int8,dot", &mask, &err) == 0);
    CHECK(mask == (EM_VK_F_FLOAT16 | EM_VK_F_INT8 | EM_VK_F_DOT));
    CHECK(em_vk_feature_parse("float16,bogus", &mask, &err) == EM_EINVAL);
    CHECK(strstr(err.msg, "bogus") != NULL);
    for (uint32_t b = 1; b < (1u << EM_VK_F_COUNT_); b <<= 1)
        CHECK(em_vk_feature_parse(em_vk_feature_key(b), &mask, &err) == 0 && mask == b);

    free(devs);
    return test_summary("test_vk_device");
}
