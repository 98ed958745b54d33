/* gpu_util.c — device open/close for the gpu test suite (see gpu_util.h). */
#include "tests/gpu/gpu_util.h"

#include <stdio.h>
#include <stdlib.h>

static uint32_t final_errors;

em_vk *gpu_open(const char *test, const em_vk_opts *opts)
{
    em_err err = { 0 };
    em_vk *vk = NULL;
    em_vk_opts o = EM_VK_OPTS_INIT;
    if (opts)
        o = *opts;
    o.final_errors = &final_errors;
    const char *want = getenv("EMBER_VK_VALIDATE");
    if (want && *want && *want != '0' && !em_vk_validation_available()) {
        fprintf(stderr, "%s: EMBER_VK_VALIDATE is set but VK_LAYER_KHRONOS_validation is "
                "not installed (Debian: vulkan-validationlayers)\n", test);
        exit(1);
    }
    int rc = em_vk_create(&o, &vk, &err);
    if (rc == EM_ENODEV) {
        printf("%s: SKIP: no usable Vulkan device: %s\n", test, err.msg);
        exit(77);
    }
    if (rc) {
        fprintf(stderr, "%s: cannot open the device: %s\n", test, err.msg);
        exit(1);
    }
    const em_vk_dev_info *in = em_vk_info(vk);
    printf("%s: device %d: %s (%s, %s)%s\n", test, in->index, in->name, in->type_name,
           in->driver_info[0] ? in->driver_info : in->driver_version_str,
           em_vk_validation_enabled(vk) ? ", validation on" : "");
    return vk;
}

void gpu_close(em_vk *vk)
{
    if (!vk)
        return;
    final_errors = 0;
    em_vk_destroy(vk);
    CHECKF(final_errors == 0, "the validation layer reported %u error(s) (printed above)",
           final_errors);
}
