/* boot.h — what `ember serve` does around its boot stages: timing and
 * logging each one into an em_web_boot (web/web.h) for /healthz and
 * /metrics, and placing the shader caches beside the database so that a
 * restart is warm even for a service user without a home. */
#ifndef EM_BOOT_H
#define EM_BOOT_H

#include <stddef.h>

#include "web/web.h"

/* Start timing a stage (the clock starts now). */
void em_boot_begin(void);
/* End the stage begun last: record it in b as name (static) and print
 * "serve: boot: NAME in N ms" in the service log (core/log.h). */
void em_boot_end(em_web_boot *b, const char *name);

/* The shader caches of a server whose database is db_path: the pipeline
 * cache file `ember-pipelines.cache` beside the database (written into
 * path, cap bytes), and, when Mesa would keep no cache of its own (no
 * MESA_SHADER_CACHE_DIR, XDG_CACHE_HOME or writable HOME: a systemd user
 * without a home), MESA_SHADER_CACHE_DIR set to `mesa-shader-cache` beside
 * it. Call before the Vulkan device is created. */
void em_boot_caches(const char *db_path, char *path, size_t cap);

#endif
