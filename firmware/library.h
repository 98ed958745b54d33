/* library.h — the model library: a folder of GGUF files (./models by
 * default; [models] dir, --models-dir), each one a model named by its file
 * without ".gguf" (firmware/library.c). `ember models` lists, shows, adds
 * and removes them; `ember serve --model NAME` finds one by name. */
#ifndef EM_LIBRARY_H
#define EM_LIBRARY_H

#include <stddef.h>

#include "core/err.h"

#define EM_LIBRARY_NAME_MAX 128

/* Whether s is a library name: 1 to EM_LIBRARY_NAME_MAX letters, digits,
 * '.', '_' and '-', not starting with '.' or '-'. */
int em_library_name_ok(const char *s);

/* The names of dir's models (files and links ending in ".gguf"), sorted:
 * *names is malloc'd, each name too (em_library_names_free). A missing
 * folder is an empty library (0 names); another failure EM_EIO. */
int  em_library_names(const char *dir, char ***names, size_t *n, em_err *err);
void em_library_names_free(char **names, size_t n);

/* What --model's value means: an existing file is itself; a library name
 * whose dir/NAME.gguf exists is that file. Into out[cap]. EM_ENOENT with
 * the library's names in err otherwise. */
int em_library_resolve(const char *dir, const char *name_or_path, char *out, size_t cap, em_err *err);

#endif
