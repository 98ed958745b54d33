/* boot.c — `ember serve`'s boot record and shader-cache placement (boot.h). */
#include "firmware/boot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "firmware/cli.h"

static double stage_start;

void em_boot_begin(void)
{
    stage_start = em_cli_now();
}

void em_boot_end(em_web_boot *b, const char *name)
{
    double ms = (em_cli_now() - stage_start) * 1e3;
    if (b->n < EM_WEB_BOOT_MAX) {
        b->stage[b->n].name = name;
        b->stage[b->n].ms = ms;
        b->n++;
    }
    em_log(EM_LOG_INFO, NULL, "serve: boot: %s in %.0f ms", name, ms);
    stage_start = em_cli_now();
}

int em_boot_rebuild(void *arg, em_fwd **f, em_err *err)
{
    em_boot_device *d = arg;
    if (d->dfwd) {   /* the draft's forward pass lives on the device about to go */
        em_fwd_destroy(*d->dfwd);
        *d->dfwd = NULL;
    }
    em_fwd_destroy(*d->fwd);
    em_vk_destroy(*d->vk);
    *d->fwd = NULL;
    *d->vk = NULL;
    *f = NULL;
    int rc = em_vk_create(&d->vo, d->vk, err);
    if (!rc)
        rc = em_fwd_create(*d->vk, d->m, &d->fo, d->fwd, err);
    if (!rc)
        rc = em_selftest_run(*d->fwd, d->m, &d->report, err);
    if (!rc && !d->report.ok)
        rc = em_err_set(err, EM_EDEVICE, "the rebuilt device fails its self-test: %s", d->report.failure);
    if (rc) {
        em_fwd_destroy(*d->fwd);
        em_vk_destroy(*d->vk);
        *d->fwd = NULL;
        *d->vk = NULL;
        return rc;
    }
    *f = *d->fwd;
    return 0;
}

int em_boot_rebuild_draft(void *arg, em_fwd **f, em_err *err)
{
    em_boot_device *d = arg;
    *f = NULL;
    if (!d->dfwd || !*d->vk)
        return em_err_set(err, EM_EDEVICE, "no device for the draft model");
    em_fwd_destroy(*d->dfwd);
    *d->dfwd = NULL;
    em_selftest_report rep;
    int rc = em_fwd_create(*d->vk, d->dm, &d->dfo, d->dfwd, err);
    if (!rc)
        rc = em_selftest_run(*d->dfwd, d->dm, &rep, err);
    if (!rc && !rep.ok)
        rc = em_err_set(err, EM_EDEVICE, "the draft model fails its self-test: %s", rep.failure);
    if (rc) {
        em_fwd_destroy(*d->dfwd);
        *d->dfwd = NULL;
        return rc;
    }
    *f = *d->dfwd;
    return 0;
}

void em_boot_caches(const char *db_path, char *path, size_t cap)
{
    char dir[4096];
    const char *slash = strrchr(db_path, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - db_path == 0 ? 1 : slash - db_path), db_path);
    else
        snprintf(dir, sizeof dir, ".");
    snprintf(path, cap, "%s/ember-pipelines.cache", dir);
    const char *home = getenv("HOME");
    if (getenv("MESA_SHADER_CACHE_DIR") || getenv("XDG_CACHE_HOME") || (home && *home && access(home, W_OK) == 0))
        return;
    char mesa[4200];
    snprintf(mesa, sizeof mesa, "%s/mesa-shader-cache", dir);
    setenv("MESA_SHADER_CACHE_DIR", mesa, 0);
}
