/* test_vk_fault.c — device failures travel up the stack as errors: with
 * EMBER_VK_FAULT (core/vk/vk_int.h em_vk_fault) the N-th device memory
 * allocation fails with VK_ERROR_OUT_OF_DEVICE_MEMORY, or the N-th wait for
 * a submission ends with VK_ERROR_DEVICE_LOST. For every N until a run gets
 * through, `ember run` and `ember logits` must exit 1 with one "ember:
 * vulkan: ..." line naming the error (no crash, no sanitizer report, no
 * validation error), and a failed `logits` leaves its OUT as it was. Through
 * the engine API, a loss during an evaluation fails that call and every
 * later one ("lost earlier"), and the engine is still destroyed cleanly; in
 * the scheduler (`bench --users`) the requests fail and the run ends.
 * usage: test_vk_fault MODEL (relative to the shared folder) */
#include <stdlib.h>
#include <string.h>

#include "core/gpu/engine.h"
#include "core/model/model.h"
#include "tests/gpu/gpu_util.h"

enum { MAX_N = 64 };

static const char *bin;

/* Run the binary with args (after it) under EMBER_VK_FAULT=fault; returns
 * the exit status, stderr in *err (malloc'd). */
static int run_fault(const char *fault, char *const args[], char **err)
{
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)bin;
    for (int i = 0; args[i] && k < 23; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    setenv("EMBER_VK_FAULT", fault, 1);
    int st = test_run(argv, NULL, err);
    unsetenv("EMBER_VK_FAULT");
    return st;
}

/* A run that failed as a device failure must: exit 1, one stderr line that
 * starts with head and contains needle (unless NULL). */
static void check_failed(const char *label, const char *fault, int st, const char *err, const char *head,
                         const char *needle)
{
    CHECKF(st == 1 && test_count_lines(err) == 1 && strncmp(err, head, strlen(head)) == 0 &&
               (!needle || strstr(err, needle)),
           "%s %s: status %d, stderr [%s]", label, fault, st, err ? err : "");
}

/* Sweep kind:1, kind:2, ... over one command (args after the binary); returns
 * how many runs failed before one got through. */
static int sweep(const char *label, const char *kind, const char *needle, char *const args[],
                 const char *keep)
{
    int failed = 0, through = 0;
    for (int n = 1; n <= MAX_N && !through; n++) {
        char fault[32];
        snprintf(fault, sizeof fault, "%s:%d", kind, n);
        if (keep)
            test_write_file(keep, "previous", 8);
        char *err = NULL;
        int st = run_fault(fault, args, &err);
        if (st == 0) {
            through = 1;
        } else {
            failed++;
            check_failed(label, fault, st, err, "ember: vulkan: ", needle);
            if (keep) {
                size_t len = 0;
                char *kept = test_read_file(keep, &len);
                CHECKF(kept && len == 8 && memcmp(kept, "previous", 8) == 0, "%s %s: OUT changed (%zu bytes)",
                       label, fault, len);
                free(kept);
            }
        }
        free(err);
    }
    CHECKF(through, "%s %s: no run got through with N up to %d", label, kind, MAX_N);
    CHECKF(failed > 0, "%s %s: no run failed (the fault was never injected)", label, kind);
    printf("%s %s: %d failing runs, then one through\n", label, kind, failed);
    return failed;
}

/* One run of args with EMBER_VK_FAULT=fault: exit 1 and one line starting with head. */
static void expect_fault(const char *label, const char *fault, const char *head, char *const args[])
{
    char *err = NULL;
    int st = run_fault(fault, args, &err);
    check_failed(label, fault, st, err, head, NULL);
    free(err);
}

/* A loss during an evaluation: that call fails, and so does every later one. */
static void engine_lost(const em_model *m)
{
    int done = 0;
    for (int n = 1; n <= MAX_N && !done; n++) {
        char fault[32];
        snprintf(fault, sizeof fault, "lost:%d", n);
        setenv("EMBER_VK_FAULT", fault, 1);
        em_err err = { 0 };
        em_engine *e = NULL;
        int rc = em_engine_create(m, EM_BACKEND_VULKAN, 32, NULL, &e, &err);
        unsetenv("EMBER_VK_FAULT");
        if (rc) {   /* lost while uploading the weights */
            CHECKF(rc == EM_EDEVICE && strstr(err.msg, "VK_ERROR_DEVICE_LOST"), "create, %s: rc %d: %s", fault,
                   rc, err.msg);
            continue;
        }
        done = 1;
        int32_t toks[4] = { 1, 2, 3, 4 };
        rc = em_engine_eval(e, toks, 4, 0, NULL, 0, &err);
        CHECKF(rc == EM_EDEVICE && strstr(err.msg, "VK_ERROR_DEVICE_LOST"), "first eval, %s: rc %d: %s", fault,
               rc, err.msg);
        memset(&err, 0, sizeof err);
        rc = em_engine_eval(e, toks, 1, 0, NULL, 0, &err);
        CHECKF(rc == EM_EDEVICE && strstr(err.msg, "lost earlier"), "eval after the loss: rc %d: %s", rc, err.msg);
        em_engine_destroy(e);
    }
    CHECKF(done, "engine: creation never got through with lost:N up to %d", MAX_N);
}

int main(int argc, char **argv)
{
    if (argc != 2 || !test_shared_dir()) {
        printf("SKIP: shared folder absent\n");
        return 77;
    }
    bin = getenv("EMBER_BIN");
    if (!bin) {
        fprintf(stderr, "EMBER_BIN is not set\n");
        return 1;
    }
    em_vk *vk = gpu_open("vk_fault", NULL);   /* SKIP without a device */
    gpu_close(vk);

    char *model = (char *)test_shared(argv[1]);
    char *dir = test_tmpdir();
    char toks[600], out[600];
    snprintf(toks, sizeof toks, "%s/toks.txt", dir);
    snprintf(out, sizeof out, "%s/out.f32", dir);
    test_write_file(toks, "1 2 3 4 5", 9);
    char *run_args[] = { "run", "--model", model, "-n", "3", "--temp", "0", "--backend", "vulkan", NULL };
    char *logits_args[] = { "logits", "--model", model, "--tokens-file", toks, "--output", out,
                            "--backend", "vulkan", NULL };
    sweep("run", "alloc", "VK_ERROR_OUT_OF_DEVICE_MEMORY", run_args, NULL);
    sweep("run", "lost", "VK_ERROR_DEVICE_LOST", run_args, NULL);
    sweep("logits", "alloc", "VK_ERROR_OUT_OF_DEVICE_MEMORY", logits_args, out);
    sweep("logits", "lost", "VK_ERROR_DEVICE_LOST", logits_args, out);

    /* the scheduler (bench with users): a loss fails the requests, and the
     * run ends with one line instead of hanging on them */
    char *users_args[] = { "bench", "--model", model, "--users", "2", "--requests-per-user", "2", NULL };
    expect_fault("bench --users", "lost:10", "ember: bench: a request failed: vulkan: waiting for the device: "
                 "VK_ERROR_DEVICE_LOST", users_args);
    expect_fault("bench --users", "lost:30", "ember: bench: a request failed: vulkan: waiting for the device: "
                 "VK_ERROR_DEVICE_LOST", users_args);

    em_model *m = NULL;
    em_err err = { 0 };
    CHECK_OK(em_model_open(model, &m, &err), err);
    if (m)
        engine_lost(m);
    em_model_close(m);

    /* a list: each fault on the device it names (a run makes one device,
     * so @2 never fires and @1 does) */
    expect_fault("run", "lost:1000,alloc:1@1", "ember: vulkan: ", run_args);
    char *lerr = NULL;
    int lst = run_fault("alloc:1@2,lost:1@3", run_args, &lerr);
    CHECKF(lst == 0, "alloc:1@2,lost:1@3 on one device: status %d, stderr [%s]", lst, lerr ? lerr : "");
    free(lerr);

    /* a malformed EMBER_VK_FAULT is refused up front */
    static const char *const bad[] = { "lost:0", "lost:3,lost:4", "alloc:1@0", "alloc:1@", "lost:3,", "lost:3;alloc:1",
                                       "alloc" };
    char *argv2[] = { (char *)bin, "run", "--model", model, "-n", "1", "--backend", "vulkan", NULL };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char label[64], want[96];
        snprintf(label, sizeof label, "EMBER_VK_FAULT=%s", bad[i]);
        snprintf(want, sizeof want, "EMBER_VK_FAULT=%s: expected alloc:N or lost:N", bad[i]);
        setenv("EMBER_VK_FAULT", bad[i], 1);
        test_expect_cli_error(label, argv2, want);
        unsetenv("EMBER_VK_FAULT");
    }

    test_rmtree(dir);
    free(dir);
    return test_summary("vk_fault");
}
