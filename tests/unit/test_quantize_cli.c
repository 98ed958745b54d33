/* test_quantize_cli.c — `ember quantize` as a command: a completed run
 * replaces OUT and leaves nothing else behind; a run stopped mid-write by
 * SIGTERM removes its temporary file and leaves an existing OUT untouched,
 * and one killed outright (SIGKILL) still never leaves a broken OUT; bad
 * inputs fail with one line on stderr and exit status 2. The model is built
 * here (16 matrices of 1024 x 1024, F32) so that the conversion takes long
 * enough to be interrupted. */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/model/gguf.h"
#include "tests/common/testutil.h"

extern char **environ;

static const char *bin;

static int build_model(const char *path)
{
    em_gguf_writer *w = NULL;
    FILE *f = fopen(path, "wb");
    if (!f || em_gguf_writer_create(32, &w, NULL))
        return -1;
    em_gguf_w_str(w, "general.architecture", "llama");
    em_gguf_w_u32(w, "llama.block_count", 4);
    uint64_t ne[2] = { 1024, 1024 };
    static const char *mats[] = { "attn_q", "attn_k", "attn_v", "ffn_down" };
    for (int l = 0; l < 4; l++) {
        for (int k = 0; k < 4; k++) {
            char n[64];
            snprintf(n, sizeof n, "blk.%d.%s.weight", l, mats[k]);
            em_gguf_w_tensor(w, n, 0 /* F32 */, 2, ne, NULL);
        }
    }
    int rc = em_gguf_w_header(w, f, NULL);
    float *x = malloc(1024 * 1024 * sizeof *x);
    unsigned long long s = 99;
    for (int t = 0; t < 16 && !rc; t++) {
        for (int i = 0; i < 1024 * 1024; i++)
            x[i] = (float)((int)(test_rand(&s) % 2001) - 1000) * 1e-5f;
        rc = em_gguf_w_data(w, f, x, 1024ull * 1024 * 4, NULL);
    }
    free(x);
    if (!rc)
        rc = em_gguf_w_finish(w, NULL);
    em_gguf_writer_destroy(w);
    return fclose(f) || rc ? -1 : 0;
}

/* Start `ember quantize in out type --threads 1` with output to log. */
static pid_t start(const char *in, const char *out, const char *log)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *argv[] = { (char *)bin, "quantize", (char *)in, (char *)out, "Q4_K_M", "--threads", "1", NULL };
    pid_t pid = -1;
    if (posix_spawn(&pid, bin, &fa, NULL, argv, environ) != 0)
        pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* Wait until path exists with at least one byte of data (up to ~20 s). */
static int wait_for_data(const char *path, pid_t pid)
{
    struct timespec ts = { 0, 1000000 };
    for (int i = 0; i < 20000; i++) {
        struct stat st;
        if (stat(path, &st) == 0 && st.st_size > 0)
            return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return -1;       /* finished (or failed) before we could interrupt it */
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int file_is(const char *path, const char *content)
{
    size_t len = 0;
    char *d = test_read_file(path, &len);
    int ok = d && len == strlen(content) && memcmp(d, content, len) == 0;
    free(d);
    return ok;
}

static int n_entries(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1)
        n = -1;
    if (p)
        pclose(p);
    return n;
}

static void test_interrupt(const char *dir, const char *in)
{
    char out[1200], tmp[1300], log[1200];
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    snprintf(log, sizeof log, "%s/../quantize-log.txt", dir);

    /* SIGTERM: stops, removes its temporary file, OUT untouched */
    test_write_file(out, "old", 3);
    pid_t pid = start(in, out, log);
    CHECK(pid > 0);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)pid);
    int mid = wait_for_data(tmp, pid) == 0;
    CHECKF(mid, "could not catch ember quantize mid-write");
    if (mid) {
        kill(pid, SIGTERM);
        int st = 0;
        waitpid(pid, &st, 0);
        char *e = test_read_file(log, NULL);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
        CHECKF(e && strstr(e, "interrupted") && strstr(e, "was not written"), "stderr: %s", e ? e : "");
        free(e);
        CHECK(file_is(out, "old"));
        CHECKF(access(tmp, F_OK) != 0, "%s left behind", tmp);
        CHECK(n_entries(dir) == 2);                /* in.gguf, out.gguf */
    }

    /* SIGKILL: nothing can clean up, but OUT is still the old one */
    pid = start(in, out, log);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)pid);
    mid = wait_for_data(tmp, pid) == 0;
    CHECKF(mid, "could not catch ember quantize mid-write");
    if (mid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK(file_is(out, "old"));
        unlink(tmp);
    }

    /* completed: OUT replaced by a valid GGUF, no temporary file left */
    char *argv[] = { (char *)bin, "quantize", (char *)in, out, "q6_k", NULL };
    char *so = NULL;
    CHECK(test_run(argv, &so, NULL) == 0);
    CHECK(so && strstr(so, "Q6_K 16"));
    free(so);
    em_gguf *g = NULL;
    CHECK(em_gguf_open(out, &g, NULL) == 0 && em_gguf_n_tensors(g) == 16 &&
          em_gguf_tensor_at(g, 0)->type == 14 /* Q6_K */);
    em_gguf_close(g);
    CHECK(n_entries(dir) == 2);
    unlink(log);
}

static void test_errors(const char *dir, const char *in)
{
    char junk[1200], out[1200];
    snprintf(junk, sizeof junk, "%s/junk.gguf", dir);
    snprintf(out, sizeof out, "%s/e.gguf", dir);
    test_write_file(junk, "this is not a gguf file at all", 30);
    char *a1[] = { (char *)bin, "quantize", NULL };
    test_expect_cli_error("no arguments", a1, NULL);
    char *a2[] = { (char *)bin, "quantize", (char *)in, out, "Q3_K_M", NULL };
    test_expect_cli_error("unknown type", a2, NULL);
    char *a3[] = { (char *)bin, "quantize", "/nonexistent/in.gguf", out, "Q8_0", NULL };
    test_expect_cli_error("missing input", a3, NULL);
    char *a4[] = { (char *)bin, "quantize", junk, out, "Q8_0", NULL };
    test_expect_cli_error("not a GGUF", a4, NULL);
    char *a5[] = { (char *)bin, "quantize", (char *)in, "/nonexistent/dir/out.gguf", "Q8_0", NULL };
    test_expect_cli_error("missing output folder", a5, "no such directory");
    char *a6[] = { (char *)bin, "quantize", (char *)in, (char *)in, "Q8_0", NULL };
    test_expect_cli_error("output = input", a6, NULL);
    char *a7[] = { (char *)bin, "quantize", (char *)in, out, "Q8_0", "--threads", "0", NULL };
    test_expect_cli_error("--threads 0", a7, NULL);
    char *a8[] = { (char *)bin, "quantize", (char *)in, (char *)dir, "Q8_0", NULL };
    test_expect_cli_error("output is a folder", a8, "is a directory");
    char *a9[] = { (char *)bin, "quantize", (char *)in, "", "Q8_0", NULL };   /* refused before the work */
    test_expect_cli_error("empty output path", a9, "OUT: the path is empty");
    CHECK(access(out, F_OK) != 0);
    unlink(junk);
}

int main(void)
{
    bin = getenv("EMBER_BIN");
    if (!bin) {
        printf("SKIP: EMBER_BIN not set\n");
        return 77;
    }
    char *root = test_tmpdir(), dir[1200], in[1300];
    snprintf(dir, sizeof dir, "%s/work", root);
    mkdir(dir, 0755);
    snprintf(in, sizeof in, "%s/in.gguf", dir);
    CHECK(build_model(in) == 0);
    test_errors(dir, in);
    test_interrupt(dir, in);
    test_rmtree(root);
    free(root);
    return test_summary("quantize-cli");
}
