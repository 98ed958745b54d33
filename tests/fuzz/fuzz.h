/* fuzz.h — the shape of an ember fuzz target (tests/fuzz/fuzz_*.c): one
 * libFuzzer entry point that takes any bytes and must neither crash, hang,
 * leak nor trip a sanitizer, and an optional initializer. Built two ways
 * (tests/fuzz/meson.build): with libFuzzer (-Dfuzz=true, clang) to search,
 * and with replay.c in every build to run the committed seeds and the
 * inputs of every crash found, as regression tests of the normal suite. */
#ifndef EM_FUZZ_H
#define EM_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: called once before the first input (argc/argv are libFuzzer's). */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* A property of the code under test was broken (not a crash by itself):
 * say so and abort, so that libFuzzer keeps the input and replay fails. */
#define FUZZ_ASSERT(cond)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

#endif
