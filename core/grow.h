/* grow.h — the growable-array step shared by every layer. */
#ifndef EM_GROW_H
#define EM_GROW_H

#include <stddef.h>

/* Make room for element n of the array *v of elem-byte elements whose
 * capacity is *cap: when n reaches *cap, double it (from first elements when
 * the array is empty) until n fits, with one realloc. 0, or EM_ENOMEM with *v
 * and *cap unchanged (also when the size would overflow); either way the
 * caller keeps owning *v (free() it). */
int em_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first);

#endif
