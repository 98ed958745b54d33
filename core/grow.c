/* grow.c — the growable-array step (see grow.h). */
#include "core/grow.h"

#include <stdio.h>
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

int em_grow_vprintf(char **s, size_t *cap, size_t *len, const char *fmt, va_list ap)
{
    if (em_grow((void **)s, cap, *len, 1, 256))   /* room for the NUL at least */
        return EM_ENOMEM;
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
    int rc = 0;
    if (n < 0) {
        rc = EM_EINVAL;
    } else if ((size_t)n >= *cap - *len) {   /* did not fit: grow, format again */
        if (em_grow((void **)s, cap, *len + (size_t)n, 1, 256))
            rc = EM_ENOMEM;
        else
            vsnprintf(*s + *len, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    if (rc)
        (*s)[*len] = 0;   /* what a failed or cut attempt wrote is not text */
    else
        *len += (size_t)n;
    return rc;
}
