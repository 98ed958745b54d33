/* boot.h — what `ember serve` does around its boot stages: timing and
 * logging each one into an em_web_boot (web/web.h) for /healthz and
 * /metrics, and placing the shader caches beside the database so that a
 * restart is warm even for a service user without a home. */
#ifndef EM_BOOT_H
#define EM_BOOT_H

#include <stddef.h>

#include "core/gpu/forward.h"
#include "core/gpu/selftest.h"
#include "core/vk/vk.h"
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

/* A server's device and forward pass, and how to make them again: what
 * em_boot_rebuild needs after the device failed. vk and fwd point at the
 * caller's variables (which then always hold the current ones); the
 * options are copies (vo.cache_path must outlive the server). */
typedef struct {
    em_vk             **vk;
    em_fwd            **fwd;
    const em_model     *m;
    em_vk_opts          vo;
    em_fwd_opts         fo;
    em_selftest_report  report;   /* the last rebuild's self-test */
    /* a draft model (--draft-model) on the same device, or dm NULL: its
     * forward pass goes with the device and em_boot_rebuild_draft makes
     * it again on the new one */
    em_fwd            **dfwd;
    const em_model     *dm;
    em_fwd_opts         dfo;
} em_boot_device;

/* Watch the model file's mapping: a read of it that faults (SIGBUS: the
 * file was truncated on disk while mapped) ends the process at once with
 * exit status 3 and a line on stderr naming the file and what to do,
 * instead of a crash. A fault elsewhere is the usual crash. Up to 4 models
 * (the target and a draft); m must stay open until exit. Not thread-safe:
 * call while starting, before any thread runs. */
void em_boot_guard_mapping(const em_model *m);

/* The GPU backend's rebuild (em_sched_backend_gpu_recovery; arg is an
 * em_boot_device): destroy the failed forward pass and device, create both
 * again with the same options, run the self-test; 0 with *f the new
 * forward pass, else the error (the self-test's failure named) and *f NULL. */
int em_boot_rebuild(void *arg, em_fwd **f, em_err *err);

/* The draft backend's rebuild, after em_boot_rebuild succeeded (which
 * destroyed the draft's forward pass with the old device): the draft's
 * forward pass on the new device, self-tested; 0 with *f it, else the
 * error and *f NULL. */
int em_boot_rebuild_draft(void *arg, em_fwd **f, em_err *err);

#endif
