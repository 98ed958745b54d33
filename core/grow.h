/* grow.h — the growable-array step shared by every layer. */
#ifndef EM_GROW_H
#define EM_GROW_H

#include <stdarg.h>
#include <stddef.h>

/* Make room for element n of the array *v of elem-byte elements whose
 * capacity is *cap: when n reaches *cap, double it (from first elements when
 * the array is empty) until n fits, with one realloc. 0, or EM_ENOMEM with *v
 * and *cap unchanged (also when the size would overflow); either way the
 * caller keeps owning *v (free() it). */
int em_grow(void **v, size_t *cap, size_t n, size_t elem, size_t first);

/* Append printf-style text to the NUL-terminated text *s of *len bytes in
 * *cap (grown with em_grow, 256 first): formatted once into the room there
 * is, again only when it did not fit. 0; EM_EINVAL for a format vsnprintf
 * refuses, EM_ENOMEM, either way with *len and the text unchanged. */
int em_grow_vprintf(char **s, size_t *cap, size_t *len, const char *fmt, va_list ap);

#endif
