/* fuzz_multipart.c — POST /v1/files bodies: the first line of the input
 * is the Content-Type header, the rest the body. The boundary is taken
 * from the header, the body split into parts (names, filenames, headers,
 * data); every part must lie inside the body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz.h"
#include "web/web_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *nl = memchr(s, '\n', size);
    if (!nl || nl - s >= 512)
        return 0;
    char ctype[512];
    memcpy(ctype, s, (size_t)(nl - s));
    ctype[nl - s] = 0;
    const char *body = nl + 1;
    size_t n = size - (size_t)(nl - s) - 1;
    char boundary[128];
    if (web_multipart_boundary(ctype, boundary, sizeof boundary))
        return 0;
    web_part parts[8];
    size_t n_parts = 0;
    char why[256] = "";
    if (web_multipart_parse(body, n, boundary, parts, 8, &n_parts, why, sizeof why)) {
        FUZZ_ASSERT(why[0]);
        return 0;
    }
    FUZZ_ASSERT(n_parts <= 8);
    for (size_t i = 0; i < n_parts; i++)
        FUZZ_ASSERT(parts[i].data >= body && parts[i].data + parts[i].len <= body + n);
    return 0;
}
