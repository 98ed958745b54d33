/* grow.c — the growable-array step (see grow.h). */
#include "core/grow.h"

#include <stdlib.h>

#include "core/err.h"

int em_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap : (first ? first : 1);
    while (nc <= n) {   /* doubling until element n fits (n may jump ahead) */
        if (nc > ((size_t)-1) / 2 / (elem ? elem : 1))
            return EM_ENOMEM;
        nc *= 2;
    }
    if (nc > ((size_t)-1) / (elem ? elem : 1))
        return EM_ENOMEM;
    void *nv = realloc(*v, nc * elem);
    if (!nv)
        return EM_ENOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}
