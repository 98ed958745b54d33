/* boot.c — `ember serve`'s boot record and shader-cache placement (boot.h). */
#include "firmware/boot.h"

#include <signal.h>
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
    /* the weights are uploaded again from the mapped file: not if it changed */
    int rc = em_gguf_unchanged(em_model_gguf(d->m), err);
    if (!rc && d->dm)
        rc = em_gguf_unchanged(em_model_gguf(d->dm), err);
    if (rc) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return em_err_set(err, EM_EDEVICE, "the device cannot be rebuilt: %s; restart ember serve to load it again",
                          why);
    }
    rc = em_vk_create(&d->vo, d->vk, err);
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

static struct {
    const char *base;
    size_t      size;
    char        msg[1200];
    size_t      msg_len;
} guarded[4];
static int n_guarded;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    const char *a = si ? (const char *)si->si_addr : NULL;
    for (int i = 0; i < n_guarded; i++)
        if (a >= guarded[i].base && a < guarded[i].base + guarded[i].size) {
            (void)!write(2, guarded[i].msg, guarded[i].msg_len);
            _exit(3);
        }
    signal(sig, SIG_DFL);   /* not the model: the ordinary crash, once the handler returns */
    raise(sig);
}

void em_boot_guard_mapping(const em_model *m)
{
    const em_gguf *g = em_model_gguf(m);
    if (n_guarded == (int)(sizeof guarded / sizeof guarded[0]) || !em_gguf_size(g))
        return;
    guarded[n_guarded].base = em_gguf_base(g);
    guarded[n_guarded].size = em_gguf_size(g);
    int n = snprintf(guarded[n_guarded].msg, sizeof guarded[n_guarded].msg,
                     "ember: %s: the model file was truncated or replaced on disk while ember serve had it "
                     "loaded (SIGBUS reading it); stopping. Put the file back (replace a model by writing a new "
                     "file and renaming it over the old one, never in place), then start again.\n",
                     em_gguf_path(g));
    guarded[n_guarded].msg_len = n < 0 ? 0 : (size_t)n >= sizeof guarded[0].msg ? sizeof guarded[0].msg - 1 : (size_t)n;
    n_guarded++;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
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
