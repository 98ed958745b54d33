/* gpu_util.h — what every test of suite `gpu` shares: opening the Vulkan
 * device (exit 77 = SKIP with the reason when there is none, failure when
 * validation was asked for but its layer is missing) and closing it with a
 * check that the validation layer reported no errors. */
#ifndef EM_GPU_UTIL_H
#define EM_GPU_UTIL_H

#include "core/vk/vk.h"
#include "tests/common/testutil.h"

/* Open a device with opts (NULL: defaults). On no device: prints the reason
 * and exits 77. On any other failure: prints it and exits 1. */
em_vk *gpu_open(const char *test, const em_vk_opts *opts);

/* Destroy vk, then CHECK that its validation layer reported no errors
 * (teardown included). */
void gpu_close(em_vk *vk);

/* Check helper: the call returns 0, else print err (the call runs once). */
#define CHECK_OK(call, err)                                                         \
    do {                                                                            \
        int check_rc_ = (call);                                                     \
        CHECKF(check_rc_ == 0, "rc %d: %s", check_rc_, (err).msg);                  \
    } while (0)

#endif
