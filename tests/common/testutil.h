/* testutil.h — tiny assertion and fixture helpers shared by ember's C tests.
 * A failing CHECK prints file:line and the condition and counts a failure;
 * tests end with `return test_summary("name")` (exit 0, 1, or 77 = skip). */
#ifndef EM_TESTUTIL_H
#define EM_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"   /* em_err_str, for CHECK_RC */

extern int test_failures;
extern int test_checks;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        test_checks++;                                                                \
        if (!(cond)) {                                                                \
            test_failures++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        test_checks++;                                                                \
        if (!(cond)) {                                                                \
            test_failures++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* expr must return want (an EM_E* code; core/err.h names it). */
#define CHECK_RC(expr, want)                                                          \
    do {                                                                              \
        test_checks++;                                                                \
        int rc_ = (expr);                                                             \
        if (rc_ != (want)) {                                                          \
            test_failures++;                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d\n", __FILE__,      \
                    __LINE__, #expr, rc_, em_err_str(rc_), (want));                   \
        }                                                                             \
    } while (0)

/* Fatal: the rest of the function would make no sense (it returns 1). */
#define REQUIRE(cond)                                                                 \
    do {                                                                              \
        test_checks++;                                                                \
        if (!(cond)) {                                                                \
            test_failures++;                                                          \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

/* REQUIRE in a function that returns nothing: a failed check, and return. */
#define REQUIRE_V(cond)                                                               \
    do {                                                                              \
        if (!(cond)) {                                                                \
            CHECK(cond);                                                              \
            return;                                                                   \
        }                                                                             \
    } while (0)

/* The shared data folder ($EMBER_SHARED), or NULL when it does not exist. */
const char *test_shared_dir(void);
/* "$EMBER_SHARED/<rel>" in a static buffer (one at a time). */
const char *test_shared(const char *rel);
/* A fresh temporary directory (mkdtemp), removed with its files by test_rmtree. */
char *test_tmpdir(void);
void  test_rmtree(const char *dir);
/* Read a whole file (malloc'd, NUL-terminated); NULL on failure. */
char *test_read_file(const char *path, size_t *len);
int   test_write_file(const char *path, const void *data, size_t len);

/* Run argv (argv[0] a path) with stdin from /dev/null; capture stdout/stderr
 * into malloc'd strings (either may be NULL to discard). Returns the exit
 * status, 128+signal if killed, -1 if it could not run. */
int test_run(char *const argv[], char **out, char **err);

/* test_run with stdout opened on stdout_path (an existing file or device,
 * e.g. /dev/full) instead of captured; *out, if wanted, stays empty. */
int test_run_stdout(char *const argv[], const char *stdout_path, char **out, char **err);

/* Run argv (as test_run) and check ember's contract for bad input: exit
 * status 2 and stderr exactly one line starting "ember: " (containing
 * needle unless it is NULL). what labels the failures. */
void test_expect_cli_error(const char *what, char *const argv[], const char *needle);

/* Newlines in s (0 for NULL): the lines of a captured output. */
int test_count_lines(const char *s);

/* Deterministic PRNG for tests. */
unsigned long long test_rand(unsigned long long *state);

int test_summary(const char *name);

#endif
