/* loadtest.h — the pieces of `ember loadtest` (firmware/cmd_loadtest.c):
 * one load level against an OpenAI-compatible server over streaming chat
 * completions (firmware/loadtest_run.c), and the reports of the levels as
 * a table, a JSON document and an SVG chart (firmware/loadtest_report.c).
 *
 * Per request: TTFT is the time from sending the request (opening its
 * connection where it needs one) to the first SSE chunk whose delta carries
 * non-empty content; a request answered 429/503 and retried once after
 * Retry-After keeps its first send as its start. TPOT is per request the
 * mean gap between output tokens, (last chunk - first chunk) / (tokens - 1),
 * and the p99 of the gaps between its content chunks (nearest rank): with
 * one token per chunk, as ember, vLLM and llama.cpp's server send them,
 * exactly the per-token gaps `ember bench --users` measures. Per level, as
 * there: TTFT p50/p99 over the requests, TPOT p50 the median request's mean
 * gap, TPOT p99 the p99 of the requests' own p99 gaps. All pointers are
 * borrowed unless a comment says otherwise. */
#ifndef EM_LOADTEST_H
#define EM_LOADTEST_H

#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "firmware/http_client.h"

#define EM_LOADTEST_MAX_LEVELS 16
#define EM_LOADTEST_MAX_USERS  1024          /* interactive + background at one level */
#define EM_LOADTEST_MAX_LINE   ((size_t)1 << 20)
#define EM_LOADTEST_MAX_BODY   ((size_t)16 << 20)

/* What a failed request failed on. */
typedef enum {
    EM_LT_HTTP,        /* HTTP status >= 300 (after a retry of 429/503), or an error event in the stream */
    EM_LT_CONNECT,     /* no connection, or it broke before the response began */
    EM_LT_TIMEOUT,     /* no byte for --timeout-s */
    EM_LT_MALFORMED,   /* not HTTP, not an event stream, a data line that is not a JSON object */
    EM_LT_TRUNCATED,   /* the stream ended (or broke) before "data: [DONE]" */
    EM_LT_TOO_LARGE,   /* an SSE line over 1 MiB or a body over 16 MiB */
    EM_LT_N_ERR
} em_lt_err;

/* "http", "connect", "timeout", "malformed", "truncated", "too_large". */
extern const char *const em_loadtest_err_names[EM_LT_N_ERR];

typedef struct {
    const char *url, *model, *api_key;   /* api_key NULL: no Authorization header */
    uint32_t levels[EM_LOADTEST_MAX_LEVELS], n_levels;
    uint32_t background;                 /* background users at every level */
    uint32_t requests_per_user;
    uint32_t prompt_lo, prompt_hi;       /* words in a prompt, uniform */
    uint32_t gen_lo, gen_hi;             /* max_tokens, uniform */
    double   temperature;
    double   slo_ttft_ms, slo_tpot_ms;   /* negative: none */
    double   gpu_cost_per_hour;          /* negative: not given */
    uint64_t seed;
    double   timeout_s;
} em_loadtest_opts;

typedef struct {
    uint32_t users, background;
    uint32_t requests;             /* interactive requests made: users x requests_per_user */
    uint32_t completed;            /* of those, the ones that ended with [DONE] */
    uint32_t retries;              /* 429/503 answers retried, every user */
    uint32_t background_requests;  /* requests the background users began */
    uint32_t errors[EM_LT_N_ERR];  /* failed requests by kind, every user */
    char     first_error[EM_LT_N_ERR][256];
    uint64_t output_tokens;        /* interactive ones, and background ones received by the level's end */
    double   wall_s;               /* the first user's start to the last interactive user's end */
    double   tokens_per_s;         /* output_tokens / wall_s */
    double   ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms;   /* NAN: no request to measure */
    double   prompt_tokens_mean;   /* the server's usage.prompt_tokens; NAN: it sent none */
    uint32_t goodput_requests;     /* completed within both SLOs (a request's TTFT and mean TPOT) */
    double   goodput_tokens_per_s; /* their output tokens / wall_s; NAN: no SLO given */
    double   cost_per_1m;          /* $ per 1M output tokens; NAN: no price given, or no tokens */
    int      within_slo;           /* p99 TTFT and p99 TPOT within, failures counting as late; -1: no SLO */
} em_loadtest_level;

/* Run one level: `users` interactive users doing o->requests_per_user
 * requests each, one after another, next to o->background background users
 * that start first and run until the interactive ones are done (their
 * request in flight is then dropped). `level` numbers the runs so that each
 * draws its own prompts. u is resolved. Failed requests are counted in *out;
 * an error return (EM_ENOMEM, threads that cannot start) means no figures. */
int em_loadtest_run_level(const em_http_url *u, const em_loadtest_opts *o, uint32_t level, uint32_t users,
                          em_loadtest_level *out, em_err *err);

/* The first id of GET /v1/models into buf (cap bytes). */
int em_loadtest_default_model(const em_http_url *u, const em_loadtest_opts *o, char *buf, size_t cap,
                              em_err *err);

/* The reports. best is the most users within the SLO (-1: no SLO given,
 * 0: no level within). */
void em_loadtest_report_table(FILE *f, const em_loadtest_opts *o, const em_loadtest_level *lv, uint32_t n,
                              long best);
int  em_loadtest_report_json(FILE *f, const em_loadtest_opts *o, const em_loadtest_level *lv, uint32_t n,
                             long best, em_err *err);
int  em_loadtest_report_svg(const char *path, const em_loadtest_opts *o, const em_loadtest_level *lv,
                            uint32_t n, em_err *err);

#endif
