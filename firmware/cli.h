/* cli.h — what every `ember` subcommand shares: the option table parser and
 * the one-line error convention ("ember: <what>: <why>" on stderr, exit
 * status 2 for bad input, 1 for other failures).
 *
 * Each subcommand lives in its own firmware/cmd_<name>.c and exports
 * int em_cmd_<name>(int argc, char **argv) returning the process exit status
 * (argv[0] is the subcommand name). firmware/main.c dispatches. */
#ifndef EM_CLI_H
#define EM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/run/sample.h"

typedef enum {
    EM_OPT_FLAG,    /* int*: set to 1 when present, takes no value */
    EM_OPT_STR,     /* const char**: points into argv */
    EM_OPT_INT,     /* long*: decimal integer, range-checked by min/max */
    EM_OPT_FLOAT,   /* double*: finite number, range-checked by min/max */
    EM_OPT_MULTI,   /* em_cli_list*: may repeat; each value appended */
} em_opt_kind;

typedef struct {
    const char *vals[16];
    int         n;
} em_cli_list;

typedef struct {
    const char  *name;     /* "--model"; NULL ends the table */
    const char  *alias;    /* "-n" or NULL */
    em_opt_kind  kind;
    void        *dst;
    double       min, max; /* INT/FLOAT bounds (inclusive); ignored when min == max == 0 */
} em_cli_opt;

/* Parse argv[1..argc) against opts. Positional arguments are collected into
 * pos (borrowed pointers into argv, at most max_pos). On a bad flag prints
 * the error line and returns 2; returns 0 on success. "--help" prints usage
 * (when non-NULL) and returns -1: the caller then exits 0. */
int em_cli_parse(const char *cmd, int argc, char **argv, const em_cli_opt *opts,
                 const char **pos, int max_pos, int *n_pos, const char *usage);

/* Print "ember: <what>: <why>" built from fmt (control bytes escaped:
 * em_err_escape), return the status to exit with. */
int em_cli_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print one "ember: ..." line on stderr built from fmt, escaped the same way:
 * warnings and summaries that quote a file's strings or paths. */
void em_cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print "ember: <err->msg>" and return 2 if the code is a user-input error, else 1. */
int em_cli_fail_err(const em_err *err);

/* Print "ember: <cmd>: warning: ..." when a context of ctx tokens is longer
 * than the n_ctx_train the model was trained for (positions past it are
 * extrapolated and text there is likely to degrade); nothing otherwise. */
void em_cli_warn_ctx(const char *cmd, uint32_t ctx, uint32_t n_ctx_train);

/* Whether an output file can be created at path before any work is done:
 * not empty, not a directory, in a directory that exists and is writable.
 * EM_EINVAL or EM_ENOENT naming the flag and path in err. */
int em_cli_check_out_path(const char *flag, const char *path, em_err *err);

/* Read a whole file into a malloc'd NUL-terminated buffer (caller frees).
 * Input files (prompts, texts, token ids) are capped at EM_CLI_MAX_INPUT
 * bytes: a bigger file, or a device that never ends (/dev/zero), is
 * EM_ERANGE instead of reading until memory runs out. Tokenizing takes
 * about 40 bytes of memory per input byte at worst (SentencePiece merges
 * over the whole text; a byte-level BPE pre-token can be the whole text:
 * 10 MB peaked at 374-439 MB), so 64 MiB keeps that under 3 GB. */
#define EM_CLI_MAX_INPUT ((size_t)64 << 20)
int em_cli_read_file(const char *path, char **data, size_t *len, em_err *err);

/* Parse whitespace-separated token ids from the len bytes at text (with
 * text[len] == 0, as em_cli_read_file leaves it) into a malloc'd array
 * (*ids, owned by the caller). Anything else, a NUL byte included, is
 * EM_EFORMAT naming the token's position. */
int em_cli_parse_ids(const char *text, size_t len, const char *what, int32_t **ids, size_t *n,
                     em_err *err);

/* 0 when the n_rows x n_vocab logits (borrowed; row i is position pos0 + i)
 * are all finite; else prints "ember: <cmd>: <model>: the model gives a
 * non-finite logit ..." (NaN or infinite weights) and returns 2. */
int em_cli_finite_logits(const char *cmd, const char *model_path, const float *logits, size_t n_rows,
                         uint32_t n_vocab, size_t pos0);

/* The model to use when --model is absent: the first *.gguf in ./models
 * (sorted by name), else the demo model under ../shared. Writes a path into
 * buf and returns 0, or EM_ENOENT. */
int em_cli_default_model(char *buf, size_t cap, em_err *err);

/* A byte count for people, in binary units: "512 B", "98.4 MiB". */
void em_cli_bytes(char *buf, size_t cap, uint64_t v);

/* Monotonic clock in seconds. */
double em_cli_now(void);

/* qsort comparator of doubles, ascending. */
int em_cli_cmp_double(const void *a, const void *b);

/* Nearest-rank percentile q (0 < q <= 1) of v[0..n): v sorted in place, then
 * v[ceil(q * n) - 1] (the definition `ember bench --users` and the
 * scheduler's per-request TPOT use); 0 when n is 0. */
double em_cli_percentile(double *v, size_t n, double q);

/* "1,4,16" -> at most max values in [1, hi] into v, *n of them; 0, or the
 * exit status of the error line it printed ("<cmd>: <flag>: ..."). */
int em_cli_parse_list(const char *cmd, const char *flag, const char *s, uint32_t *v, uint32_t max,
                      uint32_t *n, uint32_t hi);

/* The sampling flags `run` and `chat` share: --temp, --top-k, --top-p,
 * --min-p, --seed (-1: not given), --presence-penalty, --frequency-penalty,
 * --repeat-penalty into the fields of an em_cli_sampling (preset with the
 * command's defaults: EM_CLI_SAMPLING_INIT), as rows of an em_cli_opt table. */
typedef struct {
    double temp, top_p, min_p, presence, frequency, repeat;
    long   top_k, seed;
} em_cli_sampling;

#define EM_CLI_SAMPLING_INIT { .temp = 0.8, .top_p = 0.95, .min_p = 0.05, .repeat = 1, .top_k = 40, .seed = -1 }

#define EM_CLI_SAMPLING_OPTS(s)                                                   \
    { "--temp", NULL, EM_OPT_FLOAT, &(s).temp, 0, 100 },                          \
    { "--top-k", NULL, EM_OPT_INT, &(s).top_k, 0, 1 << 24 },                      \
    { "--top-p", NULL, EM_OPT_FLOAT, &(s).top_p, 1e-6, 1 },                       \
    { "--min-p", NULL, EM_OPT_FLOAT, &(s).min_p, 0, 1 },                          \
    { "--seed", NULL, EM_OPT_INT, &(s).seed, -1, 4294967295.0 },                  \
    { "--presence-penalty", NULL, EM_OPT_FLOAT, &(s).presence, -2, 2 },           \
    { "--frequency-penalty", NULL, EM_OPT_FLOAT, &(s).frequency, -2, 2 },         \
    { "--repeat-penalty", NULL, EM_OPT_FLOAT, &(s).repeat, 1e-6, 10 }

/* The sampler's parameters from the flags, with the seed resolved
 * (em_cli_seed). */
em_sample_params em_cli_sample_params(const em_cli_sampling *s);

/* The usage lines of those flags. */
#define EM_CLI_SAMPLING_USAGE                                                                   \
    "  Sampling: --temp T (0: greedy) --top-k K --top-p P --min-p P --seed S\n"               \
    "    --presence-penalty X, --frequency-penalty X (OpenAI's, -2..2, over the generated\n"   \
    "    tokens) --repeat-penalty X (over the prompt and the generated tokens; 1: off)\n"

/* The seed to sample with: seed when given (>= 0), else a random 32-bit one. */
uint64_t em_cli_seed(long seed);

/* How `ember serve` runs the forward pass: tokens per step (prompt chunks
 * and decodes), and sequences at once without --parallel on a CPU device
 * and on a GPU. `ember vram` plans with the same figures. */
#define EM_SERVE_STEP_TOKENS  512u
#define EM_SERVE_PARALLEL_CPU 16u
#define EM_SERVE_PARALLEL_GPU 64u

/* Open the model at path and its tokenizer for `cmd`; 0 with *m and *tok
 * set (the caller closes both), else the exit status after the error line.
 * A tokenizer with more tokens than the model's output rows is an input
 * error: those ids could be fed but never scored. */
struct em_model;
struct em_tokenizer;
int em_cli_open_model(const char *cmd, const char *path, struct em_model **m, struct em_tokenizer **tok);

/* Whether a draft model's tokenizer b has the same vocabulary as a's: as
 * many tokens, each with the same text (speculative decoding feeds one
 * model's ids to the other). 0, or EM_EINVAL with err naming the first
 * difference. Both borrowed. */
int em_cli_same_vocab(const struct em_tokenizer *a, const struct em_tokenizer *b, em_err *err);

#endif
