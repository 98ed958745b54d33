/* replay.c — the fuzz targets without libFuzzer: main() feeds every file
 * of the directories (or files) given on the command line to the target's
 * LLVMFuzzerTestOneInput, in name order, and says how many it ran. This is
 * how the committed seed corpora (tests/fuzz/corpus/NAME) and the inputs of
 * crashes once found (tests/fuzz/crashes/NAME) run in the normal suite under
 * both builds; a directory that does not exist is skipped. With -runs=N it
 * then runs N more inputs made from those by blind mutation (bytes flipped,
 * inserted, deleted, repeated; pieces of two inputs spliced; cut short)
 * with a fixed seed, so the same N inputs every time: no coverage guidance
 * (that is libFuzzer's, scripts/ember-dev fuzz), but every run of the suite
 * tries N inputs no one wrote. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

typedef struct {
    unsigned char *p;
    size_t         n;
} input;

static input *inputs;
static size_t n_inputs, cap_inputs;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)   /* xorshift64* */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

static size_t below(size_t n)
{
    return n ? (size_t)(next_rand() % n) : 0;
}

/* One mutant of a kept input (malloc'd, *n its length; NULL: out of memory). */
static unsigned char *mutate(size_t *n)
{
    const input *a = &inputs[below(n_inputs)], *b = &inputs[below(n_inputs)];
    size_t cap = a->n + b->n + 64;
    unsigned char *m = malloc(cap);
    if (!m)
        return NULL;
    memcpy(m, a->p, a->n);
    size_t len = a->n;
    static const unsigned char interesting[] = { 0, 1, 0x7f, 0x80, 0xff, '"', '\\', '{', '}', '[', ']', '%', '<',
                                                 '>', '\n', '\r', ':', ',', '.', '|', '*', '(', ')', 0xc3, 0xe2,
                                                 0xf0 };
    for (int k = 0, steps = 1 + (int)below(4); k < steps; k++) {
        switch (below(7)) {
        case 0:   /* flip a bit */
            if (len)
                m[below(len)] ^= (unsigned char)(1u << below(8));
            break;
        case 1:   /* a byte that parsers care about */
            if (len)
                m[below(len)] = interesting[below(sizeof interesting)];
            break;
        case 2:   /* insert a few bytes */
            if (len + 8 <= cap) {
                size_t at = below(len + 1), c = 1 + below(8);
                memmove(m + at + c, m + at, len - at);
                for (size_t i = 0; i < c; i++)
                    m[at + i] = (unsigned char)(below(2) ? interesting[below(sizeof interesting)] : below(256));
                len += c;
            }
            break;
        case 3:   /* delete a run */
            if (len) {
                size_t at = below(len), c = 1 + below(len - at);
                c = c > 16 ? 1 + below(16) : c;
                memmove(m + at, m + at + c, len - at - c);
                len -= c;
            }
            break;
        case 4:   /* repeat a piece */
            if (len) {
                size_t at = below(len), c = 1 + below(len - at < 32 ? len - at : 32);
                if (len + c <= cap) {
                    memmove(m + at + c, m + at, len - at);
                    len += c;
                }
            }
            break;
        case 5:   /* splice: this input's head, the other's tail */
            if (b->n) {
                size_t head = below(len + 1), from = below(b->n);
                size_t tail = b->n - from;
                if (head + tail <= cap) {
                    memcpy(m + head, b->p + from, tail);
                    len = head + tail;
                }
            }
            break;
        default:   /* cut short */
            len = below(len + 1);
        }
    }
    *n = len;
    return m;
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    /* an exact-size copy, so that ASan sees a read past the end; kept for the mutants */
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    if (n_inputs == cap_inputs) {
        input *ni = realloc(inputs, (cap_inputs = cap_inputs ? 2 * cap_inputs : 64) * sizeof *inputs);
        if (!ni) {
            free(exact);
            return -1;
        }
        inputs = ni;
    }
    inputs[n_inputs++] = (input){ exact, n };
    return 0;
}

static volatile long current = -1;   /* the mutant running, for the crash message */

static void on_crash(int sig)
{
    char msg[160];
    int n = snprintf(msg, sizeof msg, "replay: died at mutant %ld: rerun with the same arguments and -dump=%ld to "
                     "write it to mutant-%ld\n", current, current, current);
    if (current >= 0 && n > 0)
        (void)!write(2, msg, (size_t)n);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    size_t ran = 0;
    long runs = 0, dump = -1;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (strncmp(argv[i], "-runs=", 6) == 0) {
            runs = strtol(argv[i] + 6, NULL, 10);
            continue;
        }
        if (strncmp(argv[i], "-dump=", 6) == 0) {
            dump = strtol(argv[i] + 6, NULL, 10);
            continue;
        }
        if (stat(argv[i], &sb) != 0)
            continue;   /* no crashes directory yet: nothing to replay */
        if (!S_ISDIR(sb.st_mode)) {
            if (run_file(argv[i]))
                return 1;
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d)
            return 1;
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                char **nn = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
                if (!nn)
                    return 1;
                names = nn;
            }
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(l)))
                return 1;
            snprintf(names[n++], l, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t k = 0; k < n; k++) {
            if (run_file(names[k]))
                return 1;
            ran++;
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %zu inputs ran clean\n", ran);
    signal(SIGABRT, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    for (long r = 0; r < runs && n_inputs; r++) {
        size_t n = 0;
        unsigned char *m = mutate(&n);
        if (!m)
            return 1;
        if (r == dump) {
            char name[64];
            snprintf(name, sizeof name, "mutant-%ld", r);
            FILE *f = fopen(name, "wb");
            if (!f || fwrite(m, 1, n, f) != n || fclose(f))
                return 1;
            printf("replay: mutant %ld (%zu bytes) in %s\n", r, n, name);
            free(m);
            return 0;
        }
        current = r;
        unsigned char *exact = malloc(n ? n : 1);   /* exact size again, for ASan */
        if (!exact)
            return 1;
        memcpy(exact, m, n);
        free(m);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    current = -1;
    if (runs)
        printf("replay: %ld mutants of them ran clean\n", runs);
    for (size_t i = 0; i < n_inputs; i++)
        free(inputs[i].p);
    free(inputs);
    return 0;
}
