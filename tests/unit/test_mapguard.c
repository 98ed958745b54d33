/* test_mapguard.c — firmware/boot.c's guard of the model file's mapping:
 * a copy of stories260K is opened as `ember serve` opens it; written over
 * in place with its size and times kept (em_gguf_unchanged's sampled
 * checksum says its contents changed; a byte between the sampled blocks
 * is not seen, as documented), put back; guarded, then truncated on
 * disk; em_gguf_unchanged says it changed; a read of its
 * mapped weights past the new end (SIGBUS) ends a child process with exit
 * status 3 and the line naming the file, not a crash; a fault elsewhere is
 * still the ordinary death by the signal. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/model/model.h"
#include "firmware/boot.h"
#include "tests/common/testutil.h"

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[1 << 16];
    size_t n;
    int ok = a && b;
    while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0)
        ok = fwrite(buf, 1, n, b) == n;
    if (a)
        fclose(a);
    if (b && fclose(b))
        ok = 0;
    return ok ? 0 : -1;
}

int main(void)
{
    const char *shared = getenv("EMBER_SHARED");
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    if (access(src, R_OK) != 0) {
        printf("SKIP: %s is absent\n", src);
        return 77;
    }
    snprintf(dst, sizeof dst, "/tmp/ember-mapguard-%d.gguf", (int)getpid());
    CHECK(copy_file(src, dst) == 0);
    em_model *m = NULL;
    em_err e = { 0 };
    CHECKF(em_model_open(dst, &m, &e) == 0, "%s", e.msg);
    CHECK(em_gguf_unchanged(em_model_gguf(m), &e) == 0);
    /* written over in place, size and times kept (cp -p of another model) */
    struct stat before;
    CHECK(stat(dst, &before) == 0);
    int fd = open(dst, O_RDWR);
    CHECK(fd >= 0);
    size_t size = (size_t)before.st_size;
    unsigned char *orig = malloc(size), *other = malloc(size);
    CHECK(orig && other && pread(fd, orig, size, 0) == (ssize_t)size);
    for (size_t i = 0; i < size; i++)
        other[i] = (unsigned char)(orig[i] ^ 0x5a);
    struct timespec times[2] = { before.st_atim, before.st_mtim };
    CHECK(pwrite(fd, other, size, 0) == (ssize_t)size && futimens(fd, times) == 0);
    memset(&e, 0, sizeof e);
    CHECKF(em_gguf_unchanged(em_model_gguf(m), &e) == EM_ESTATE && strstr(e.msg, "contents changed"), "%s", e.msg);
    /* one byte between two sampled blocks (the sample is 64 blocks of 4 KiB): not seen */
    CHECK(pwrite(fd, orig, size, 0) == (ssize_t)size && futimens(fd, times) == 0);
    CHECK(em_gguf_unchanged(em_model_gguf(m), &e) == 0);
    size_t between = (size_t)((size - 4096) / 63 / 2);   /* in the gap after the first block */
    if (between > 4096) {
        unsigned char x = (unsigned char)(orig[between] ^ 1);
        CHECK(pwrite(fd, &x, 1, (off_t)between) == 1 && futimens(fd, times) == 0);
        CHECK(em_gguf_unchanged(em_model_gguf(m), &e) == 0);
        CHECK(pwrite(fd, &orig[between], 1, (off_t)between) == 1 && futimens(fd, times) == 0);
    }
    close(fd);
    free(orig);
    free(other);
    const em_gguf_tensor *t = em_model_tok_embd(m);
    const volatile unsigned char *last = (const unsigned char *)t->data + t->nbytes - 1;
    em_boot_guard_mapping(m);
    CHECK(truncate(dst, 4096) == 0);
    memset(&e, 0, sizeof e);
    CHECK(em_gguf_unchanged(em_model_gguf(m), &e) == EM_ESTATE && strstr(e.msg, "changed size"));
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        volatile unsigned char v = *last;   /* past the new end of the file: SIGBUS */
        (void)v;
        _exit(0);
    }
    close(pipefd[1]);
    char msg[2048] = "";
    ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = 0;
    close(pipefd[0]);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 3, "the child ended with %#x", st);
    CHECKF(strstr(msg, dst) && strstr(msg, "truncated or replaced"), "the child said: %s", msg);
    pid = fork();
    if (pid == 0) {   /* a SIGBUS not from the model's mapping: the ordinary death by it */
        kill(getpid(), SIGBUS);
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
    em_model_close(m);
    unlink(dst);
    printf("mapguard: a truncated model file ends the process with status 3 and says why\n");
    return test_failures ? 1 : 0;
}
