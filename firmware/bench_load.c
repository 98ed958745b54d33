/* bench_load.c — `ember bench --users ...`: drive the scheduler with many
 * concurrent users and report, per level, aggregate tokens/s, p50/p99 time
 * to first token and time per output token, and the cost per 1M output
 * tokens; with --background N the same next to N saturating background
 * users; the highest user count within a TPOT SLO. Also the KV measures of
 * the paged cache: prefill of a long prompt cold and with its prefix cached,
 * and the share of allocated KV bytes not holding live tokens. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firmware/bench.h"
#include "firmware/cli.h"
#include "scheduler/scheduler.h"

typedef struct {
    em_sched        *s;
    em_class         cls;
    uint32_t         n_prompt, n_gen, vocab;
    double           temp;
    int              n_requests;     /* requests to run; -1: until *stop */
    volatile int    *stop;
    unsigned long long seed;
    /* results */
    double          *ttft, *tpot_mean, *tpot_p99;
    uint32_t         n_done, cap;
    uint64_t         tokens;
    int              failed, started;
    char             error[256];
} user;

static void *user_main(void *arg)
{
    user *u = arg;
    /* mixed lengths: prompt and output each uniform in [n/2, 3n/2] */
    int32_t *prompt = malloc((u->n_prompt * 3 / 2 + 1) * sizeof *prompt);
    for (int k = 0; prompt && (u->n_requests < 0 ? !*u->stop : k < u->n_requests); k++) {
        u->seed = u->seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t np = u->n_prompt / 2 + (uint32_t)((u->seed >> 33) % (u->n_prompt + 1));
        u->seed = u->seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t ng = u->n_gen / 2 + (uint32_t)((u->seed >> 33) % (u->n_gen + 1));
        if (np == 0)
            np = 1;
        if (ng == 0)
            ng = 1;
        for (uint32_t i = 0; i < np; i++) {
            u->seed = u->seed * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (int32_t)(3 + (u->seed >> 33) % (u->vocab - 3));
        }
        em_req_params p = { .prompt = prompt, .n_prompt = np, .cls = u->cls,
                            .max_tokens = ng, .ignore_eog = 1 };
        p.sample.temp = (float)u->temp;   /* the API's defaults at temperature > 0: nothing filtered */
        p.sample.top_p = 1;
        p.sample.seed = u->seed;
        em_request *r = NULL;
        em_err err = { 0 };
        uint32_t retry = 0;
        int rc = em_sched_submit(u->s, &p, &r, &retry, &err);
        if (rc == EM_EBUSY) {
            struct timespec ts = { retry / 1000, (long)(retry % 1000) * 1000000L };
            nanosleep(&ts, NULL);
            k--;
            continue;
        }
        if (rc) {
            u->failed = 1;
            snprintf(u->error, sizeof u->error, "%s", err.msg);
            break;
        }
        em_event ev;
        while (em_request_next(r, &ev, -1)) {
            int done = ev.kind == EM_EV_DONE;
            if (done) {
                if (ev.finish == EM_FINISH_ERROR) {
                    u->failed = 1;
                    snprintf(u->error, sizeof u->error, "%s", ev.error);
                } else if (u->n_done < u->cap) {
                    u->ttft[u->n_done] = ev.metrics.ttft_ms;
                    u->tpot_mean[u->n_done] = ev.metrics.tpot_mean_ms;
                    u->tpot_p99[u->n_done] = ev.metrics.tpot_p99_ms;
                    u->n_done++;
                    u->tokens += ev.metrics.completion_tokens;
                }
            }
            em_event_clear(&ev);
            if (done)
                break;
        }
        em_request_release(r);
        if (u->failed)
            break;
    }
    free(prompt);
    return NULL;
}

/* A user's thread; one that cannot start counts as a failed user. */
static void start_user(pthread_t *th, user *u)
{
    u->started = pthread_create(th, NULL, user_main, u) == 0;
    if (!u->started) {
        u->failed = 1;
        snprintf(u->error, sizeof u->error, "cannot start a user thread");
    }
}

typedef struct {
    uint32_t users, background;
    double   tokens_per_s;       /* all output tokens, both classes */
    double   ttft_p50, ttft_p99, tpot_p50, tpot_p99;   /* interactive requests */
    uint32_t requests;
    double   cost_per_m;         /* per 1M output tokens; negative: no price given */
    double   kv_waste;           /* allocated KV positions holding no token, step-weighted */
} level;

/* One level: `users` interactive users doing `reqs` requests each, with
 * `background` background users running until they finish. Every run draws
 * new prompts (run counts the runs), so none finds another's in the prefix
 * cache. */
static int run_level(em_sched *s, const em_bench_load_opts *o, uint32_t users, uint32_t background,
                     uint32_t run, level *out)
{
    uint32_t n = users + background;
    user *us = calloc(n, sizeof *us);
    pthread_t *th = calloc(n, sizeof *th);
    volatile int stop = 0;
    int rc = 0;
    if (!us || !th) {
        free(us);
        free(th);
        return EM_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        user *u = &us[i];
        u->s = s;
        u->cls = i < users ? EM_CLASS_INTERACTIVE : EM_CLASS_BACKGROUND;
        u->n_prompt = o->prompt_tokens;
        u->n_gen = o->gen_tokens;
        u->temp = o->temp;
        u->vocab = o->n_vocab;
        u->n_requests = i < users ? (int)o->requests_per_user : -1;
        u->stop = &stop;
        u->seed = 1000 + i * 7919ull + run * 104729ull;
        u->cap = 4096;
        u->ttft = calloc(u->cap, sizeof(double));
        u->tpot_mean = calloc(u->cap, sizeof(double));
        u->tpot_p99 = calloc(u->cap, sizeof(double));
    }
    em_sched_stats st0, st1;
    em_sched_get_stats(s, &st0);
    double t0 = em_cli_now();
    for (uint32_t i = users; i < n; i++)   /* background users first: saturate */
        start_user(&th[i], &us[i]);
    if (background) {
        struct timespec ts = { 0, 500000000L };
        nanosleep(&ts, NULL);
    }
    for (uint32_t i = 0; i < users; i++)
        start_user(&th[i], &us[i]);
    for (uint32_t i = 0; i < users; i++)
        if (us[i].started)
            pthread_join(th[i], NULL);
    stop = 1;
    for (uint32_t i = users; i < n; i++)
        if (us[i].started)
            pthread_join(th[i], NULL);
    double t1 = em_cli_now();
    em_sched_get_stats(s, &st1);
    double *ttft = calloc(users * 4096u, sizeof(double)), *tpot = calloc(users * 4096u, sizeof(double));
    double *tmean = calloc(users * 4096u, sizeof(double));
    uint32_t nt = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (us[i].failed && !rc) {
            fprintf(stderr, "ember: bench: a request failed: %s\n", us[i].error);
            rc = EM_EDEVICE;
        }
        for (uint32_t k = 0; i < users && k < us[i].n_done; k++) {
            ttft[nt] = us[i].ttft[k];
            tpot[nt] = us[i].tpot_p99[k];
            tmean[nt] = us[i].tpot_mean[k];
            nt++;
        }
        free(us[i].ttft);
        free(us[i].tpot_mean);
        free(us[i].tpot_p99);
    }
    out->users = users;
    out->background = background;
    out->requests = nt;
    out->tokens_per_s = (double)(st1.tokens_generated - st0.tokens_generated) / (t1 - t0);
    out->ttft_p50 = em_cli_percentile(ttft, nt, 0.5);
    out->ttft_p99 = em_cli_percentile(ttft, nt, 0.99);
    /* TPOT: the median request's mean gap between tokens, and the p99 of
     * the requests' own p99 gaps (the tail a user feels) */
    out->tpot_p50 = em_cli_percentile(tmean, nt, 0.5);
    out->tpot_p99 = em_cli_percentile(tpot, nt, 0.99);
    out->cost_per_m = o->gpu_cost_per_hour < 0 ? -1
                      : out->tokens_per_s > 0 ? o->gpu_cost_per_hour / (out->tokens_per_s * 3600) * 1e6 : 0;
    uint64_t alloc = st1.kv_alloc_sum - st0.kv_alloc_sum, live = st1.kv_live_sum - st0.kv_live_sum;
    out->kv_waste = alloc ? 1.0 - (double)live / (double)alloc : 0;
    free(ttft);
    free(tpot);
    free(tmean);
    free(us);
    free(th);
    return rc;
}

/* Time to first token of one interactive request with a prompt of n tokens
 * whose first `shared` ids equal the previous call's (prefix cache test). */
static double one_ttft(em_sched *s, uint32_t vocab, uint32_t n, unsigned long long salt)
{
    int32_t *prompt = malloc(n * sizeof *prompt);
    if (!prompt)
        return -1;
    unsigned long long x = 99;
    for (uint32_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)(3 + (x >> 33) % (vocab - 3));
    }
    prompt[n - 1] = (int32_t)(3 + salt % (vocab - 3));   /* the last id differs */
    em_req_params p = { .prompt = prompt, .n_prompt = n, .max_tokens = 1, .ignore_eog = 1 };
    p.sample.top_p = 1;
    em_request *r = NULL;
    double ttft = -1;
    if (em_sched_submit(s, &p, &r, NULL, NULL) == 0) {
        em_event ev;
        while (em_request_next(r, &ev, -1)) {
            int done = ev.kind == EM_EV_DONE;
            if (done)
                ttft = ev.metrics.ttft_ms;
            em_event_clear(&ev);
            if (done)
                break;
        }
        em_request_release(r);
    }
    free(prompt);
    return ttft;
}

int em_bench_load(em_sched *s, const em_bench_load_opts *o, int json)
{
    level lv[16];
    uint32_t nl = 0;
    int rc = 0;
    double unloaded_p99[16] = { 0 };
    uint32_t run = 0;
    /* warm-up (not reported): the first steps of each shape record command
     * buffers and llvmpipe compiles kernels on their first dispatch */
    {
        em_bench_load_opts w = *o;
        w.requests_per_user = 1;
        level tmp;
        if ((rc = run_level(s, &w, 2, o->background ? 1 : 0, run++, &tmp)))
            return rc;
    }
    for (uint32_t i = 0; i < o->n_levels && !rc; i++) {
        if (o->background) {   /* the unloaded figure to compare with */
            level base;
            if ((rc = run_level(s, o, o->levels[i], 0, run++, &base)))
                break;
            unloaded_p99[nl] = base.ttft_p99;
        }
        if ((rc = run_level(s, o, o->levels[i], o->background, run++, &lv[nl])))
            break;
        nl++;
        if (!json)
            fprintf(stderr, "ember: bench: %u users done\n", o->levels[i]);
    }
    if (rc)
        return rc;
    /* prefix cache: a long prompt cold, then again with all but its last id cached */
    double cold = 0, warm = 0;
    if (o->prefix_tokens) {
        cold = one_ttft(s, o->n_vocab, o->prefix_tokens, 1);
        warm = one_ttft(s, o->n_vocab, o->prefix_tokens, 2);
    }
    uint32_t best = 0;
    for (uint32_t i = 0; i < nl; i++)
        if (o->slo_tpot_ms >= 0 && lv[i].tpot_p99 <= o->slo_tpot_ms && lv[i].users > best)
            best = lv[i].users;
    double ratio16 = 0;
    for (uint32_t i = 0; i < nl; i++)
        if (lv[i].users == 16 && lv[0].users == 1 && lv[0].tokens_per_s > 0)
            ratio16 = lv[i].tokens_per_s / lv[0].tokens_per_s;

    if (json) {
        json_t *arr = json_array();
        for (uint32_t i = 0; i < nl; i++) {
            json_t *e = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:o, s:f}",
                                  "users", (int)lv[i].users, "background", (int)lv[i].background,
                                  "requests", (int)lv[i].requests, "tokens_per_s", lv[i].tokens_per_s,
                                  "ttft_p50_ms", lv[i].ttft_p50, "ttft_p99_ms", lv[i].ttft_p99,
                                  "tpot_p50_ms", lv[i].tpot_p50, "tpot_p99_ms", lv[i].tpot_p99,
                                  "cost_per_1m_tokens",
                                  lv[i].cost_per_m < 0 ? json_null() : json_real(lv[i].cost_per_m),
                                  "kv_waste", lv[i].kv_waste);
            if (o->background)
                json_object_set_new(e, "unloaded_ttft_p99_ms", json_real(unloaded_p99[i]));
            json_array_append_new(arr, e);
        }
        json_t *root = json_pack("{s:o, s:f, s:o}", "levels", arr, "throughput_ratio_16_vs_1", ratio16,
                                 "max_users_within_slo",
                                 o->slo_tpot_ms < 0 ? json_null() : json_integer(best));
        if (o->prefix_tokens) {
            json_object_set_new(root, "prefix_tokens", json_integer(o->prefix_tokens));
            json_object_set_new(root, "ttft_cold_ms", json_real(cold));
            json_object_set_new(root, "ttft_cached_prefix_ms", json_real(warm));
        }
        char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (txt)
            puts(txt);
        free(txt);
        json_decref(root);
        return 0;
    }
    printf("users  bg   requests  tok/s    TTFT p50/p99 ms      TPOT p50/p99 ms    $/1M tok  KV waste%s\n",
           o->background ? "  unloaded TTFT p99" : "");
    for (uint32_t i = 0; i < nl; i++) {
        char cost[32];
        if (lv[i].cost_per_m < 0)
            snprintf(cost, sizeof cost, "not given");
        else
            snprintf(cost, sizeof cost, "%9.3f", lv[i].cost_per_m);
        printf("%5u %3u %10u %7.1f %9.0f /%8.0f %9.1f /%7.1f %9s %8.1f%%", lv[i].users,
               lv[i].background, lv[i].requests, lv[i].tokens_per_s, lv[i].ttft_p50, lv[i].ttft_p99,
               lv[i].tpot_p50, lv[i].tpot_p99, cost, 100 * lv[i].kv_waste);
        if (o->background)
            printf("  %8.0f (x%.2f)", unloaded_p99[i], unloaded_p99[i] > 0 ? lv[i].ttft_p99 / unloaded_p99[i] : 0);
        printf("\n");
    }
    if (ratio16 > 0)
        printf("throughput at 16 users / at 1 user: %.2f\n", ratio16);
    if (o->slo_tpot_ms >= 0)
        printf("most users within p99 TPOT <= %g ms: %u\n", o->slo_tpot_ms, best);
    if (o->prefix_tokens)
        printf("prefix cache: %u-token prompt TTFT %.0f ms cold, %.0f ms with its prefix cached (%.1f%%)\n",
               o->prefix_tokens, cold, warm, cold > 0 ? 100 * warm / cold : 0);
    return 0;
}
