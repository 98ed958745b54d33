/* golden_engine.h — opening a shared model and an engine for the in-process
 * golden tests (test_teacher, test_decode), and reading their id lists.
 * Header-only: each test is one file. */
#ifndef EMBER_TESTS_GOLDEN_ENGINE_H
#define EMBER_TESTS_GOLDEN_ENGINE_H

#include <stdint.h>

#include "core/gpu/engine.h"
#include "core/model/model.h"
#include "tests/common/testutil.h"

/* Open the model at path (absolute) and an engine on backend_name with a
 * context of n_ctx. Returns 0 with *m and *e set (the caller closes both:
 * em_engine_destroy, em_model_close), 77 when the machine has no Vulkan
 * device (EM_ENODEV, printed as SKIP), 1 on any other failure (printed),
 * a lost device or validation errors included. */
static inline int golden_engine_open(const char *path, const char *backend_name, uint32_t n_ctx,
                                     em_model **m, em_engine **e)
{
    em_backend backend;
    em_err err = { 0 };
    *m = NULL;
    *e = NULL;
    if (em_backend_parse(backend_name, &backend, &err) || em_model_open(path, m, &err) ||
        em_engine_create(*m, backend, n_ctx, NULL, e, &err)) {
        em_model_close(*m);
        *m = NULL;
        if (err.code == EM_ENODEV) {
            printf("SKIP: no Vulkan device: %s\n", err.msg);
            return 77;
        }
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

/* Up to max whitespace-separated ids from text, after the first tag in it
 * (from the start where tag is NULL). Returns how many, -1 without the tag. */
static inline int golden_read_ids(const char *text, const char *tag, int32_t *ids, int max)
{
    const char *p = tag ? strstr(text, tag) : text;
    if (!p)
        return -1;
    p += tag ? strlen(tag) : 0;
    int n = 0;
    char *end;
    while (n < max) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

/* The common start of main: argc must be want (else usage, 2); without the
 * shared folder SKIP (77). Returns -1 to go on. */
static inline int golden_start(int argc, int want, const char *usage)
{
    if (argc != want) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    if (!test_shared_dir()) {
        printf("SKIP: shared folder absent\n");
        return 77;
    }
    return -1;
}

#endif
