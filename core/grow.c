/* grow.c — the growable-array step (see grow.h). */
#include "core/grow.h"

#include <stdlib.h>

#include "core/err.h"

int em_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : first;
    void *nv = realloc(*v, nc * elem);
    if (!nv)
        return EM_ENOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}
