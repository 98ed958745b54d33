/* testutil.c — helpers for ember's C tests: fixtures, subprocesses, summary. */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <poll.h>

extern char **environ;

int test_failures;
int test_checks;

const char *test_shared_dir(void)
{
    const char *d = getenv("EMBER_SHARED");
    struct stat st;
    if (!d || stat(d, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return d;
}

const char *test_shared(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", test_shared_dir() ? test_shared_dir() : ".", rel);
    return buf;
}

char *test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/ember-test-XXXXXX", base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void test_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                test_rmtree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

int test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

static void append(char **buf, size_t *n, const char *src, size_t k)
{
    char *nb = realloc(*buf, *n + k + 1);
    if (!nb)
        return;
    memcpy(nb + *n, src, k);
    *n += k;
    nb[*n] = 0;
    *buf = nb;
}

int test_run(char *const argv[], char **out, char **err)
{
    return test_run_stdout(argv, NULL, out, err);
}

int test_run_stdout(char *const argv[], const char *stdout_path, char **out, char **err)
{
    int po[2], pe[2];
    if (pipe(po) || pipe(pe))
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (stdout_path)
        posix_spawn_file_actions_addopen(&fa, 1, stdout_path, O_WRONLY, 0);
    else
        posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_addclose(&fa, po[1]);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    posix_spawn_file_actions_addclose(&fa, po[0]);
    posix_spawn_file_actions_addclose(&fa, pe[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    close(pe[1]);
    if (rc != 0) {
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    char *ob = calloc(1, 1), *eb = calloc(1, 1);
    size_t on = 0, en = 0;
    struct pollfd fds[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char tmp[4096];
            ssize_t k = read(fds[i].fd, tmp, sizeof tmp);
            if (k <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                append(&ob, &on, tmp, (size_t)k);
            } else {
                append(&eb, &en, tmp, (size_t)k);
            }
        }
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (out)
        *out = ob;
    else
        free(ob);
    if (err)
        *err = eb;
    else
        free(eb);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

unsigned long long test_rand(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int test_summary(const char *name)
{
    if (!test_checks) {   /* a test that checked nothing has not passed */
        fprintf(stderr, "%s: no checks ran\n", name);
        return 1;
    }
    if (test_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, test_failures, test_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, test_checks);
    return 0;
}

int test_count_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; p && *p; p++)
        n += *p == '\n';
    return n;
}

void test_expect_cli_error(const char *what, char *const argv[], const char *needle)
{
    char *out = NULL, *err = NULL;
    int st = test_run(argv, &out, &err);
    CHECKF(st == 2, "%s: exit status %d (stderr: %s)", what, st, err ? err : "");
    CHECKF(err && strncmp(err, "ember: ", 7) == 0 && test_count_lines(err) == 1,
           "%s: stderr is not one 'ember: ' line: [%s]", what, err ? err : "");
    if (needle)
        CHECKF(err && strstr(err, needle), "%s: expected '%s' in: %s", what, needle, err ? err : "");
    free(out);
    free(err);
}
