/* utilization.c — how busy the device was, remembered: the recorder that
 * adds the scheduler's busy time (em_sched_stats.busy_s, the sum of step
 * times), its tokens and steps to the ledger's `utilization` table, one row
 * per UTC hour (storage's em_storage_util_add), at every minute boundary,
 * when asked and when the server stops; and GET /api/utilization, which
 * reads it back by hour or day with the utilization and the cost per 1M
 * tokens derived from it (docs/api.md; docs/storage.md, "Utilization").
 *
 * A span recorded never crosses an hour boundary (it is cut there) and
 * never carries more busy time than it is long: busy time is counted when
 * a step ends, and what a span cannot hold waits for the next one. A write
 * that fails leaves the state as it was, so the next span takes everything
 * since. Everything here runs on the service thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "web/web_int.h"

#define HOUR_MS   3600000LL
#define RECORD_MS 60000LL   /* record at every minute boundary */

struct web_util {
    em_web                *w;
    lws_sorted_usec_list_t sul;
    int64_t                last_ms;     /* wall clock: the end of what was recorded */
    double                 busy_s;      /* the scheduler's cumulative figures recorded so far */
    uint64_t               generated, prefilled, steps;
    int                    failing;     /* the last write failed (said once on stderr) */
};

/* Record from last_ms to now, cut at hour boundaries. */
static void record(struct web_util *u)
{
    em_sched_stats st;
    em_sched_get_stats(u->w->o.sched, &st);
    int64_t now = em_storage_now_ms();
    if (now < u->last_ms) {   /* the clock was set back: go on from now */
        u->last_ms = now;
        return;
    }
    double busy = st.busy_s - u->busy_s;
    uint64_t gen = st.tokens_generated - u->generated, pre = st.tokens_prefilled - u->prefilled,
             steps = st.steps - u->steps;
    while (u->last_ms < now) {
        int64_t hour_end = (u->last_ms / HOUR_MS + 1) * HOUR_MS, end = now < hour_end ? now : hour_end;
        double span_s = (double)(end - u->last_ms) / 1e3;
        em_util_sample s = { u->last_ms, end, busy > span_s ? span_s : busy > 0 ? busy : 0, (int64_t)gen,
                             (int64_t)pre, (int64_t)steps };
        em_err err = { 0 };
        if (em_storage_util_add(u->w->o.storage, &s, &err)) {
            if (!u->failing)
                em_log(EM_LOG_WARN, NULL, "utilization not recorded (retried with the next span): %s", err.msg);
            u->failing = 1;
            return;
        }
        if (u->failing)
            em_log(EM_LOG_INFO, NULL, "utilization recorded again");
        u->failing = 0;
        u->last_ms = end;
        u->busy_s += s.busy_s;
        u->generated += gen;
        u->prefilled += pre;
        u->steps += steps;
        busy -= s.busy_s;
        gen = pre = steps = 0;   /* the tokens go with the first span */
    }
}

static void tick(lws_sorted_usec_list_t *sul);

static void schedule(struct web_util *u)
{
    int64_t now = em_storage_now_ms(), next = (now / RECORD_MS + 1) * RECORD_MS;
    lws_sul_schedule(u->w->ctx, 0, &u->sul, tick, (lws_usec_t)(next - now) * 1000);
}

static void tick(lws_sorted_usec_list_t *sul)
{
    struct web_util *u = lws_container_of(sul, struct web_util, sul);
    record(u);
    schedule(u);
}

int web_util_start(em_web *w)
{
    if (!w->o.storage || !w->o.sched)
        return 0;
    struct web_util *u = calloc(1, sizeof *u);
    if (!u)
        return EM_ENOMEM;
    em_sched_stats st;
    em_sched_get_stats(w->o.sched, &st);
    u->w = w;
    u->last_ms = em_storage_now_ms();
    u->busy_s = st.busy_s;
    u->generated = st.tokens_generated;
    u->prefilled = st.tokens_prefilled;
    u->steps = st.steps;
    w->util = u;
    schedule(u);
    return 0;
}

void web_util_stop(em_web *w)
{
    struct web_util *u = w->util;
    if (!u)
        return;
    lws_sul_cancel(&u->sul);
    record(u);
    free(u);
    w->util = NULL;
}

/* ---- GET /api/utilization ------------------------------------------------------- */

enum { U_SINCE, U_UNTIL, U_BUCKET, U_PRICE, U_COUNT };

void web_util_api(web_conn *c)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    em_web_auth auth;
    static const char *const names[U_COUNT] = { "since", "until", "bucket", "gpu_cost_per_hour" };
    char a[U_COUNT][WEB_ARG_MAX];
    int has[U_COUNT];
    em_util_report *rep = NULL;
    char *js = NULL, *out = NULL;
    em_err err = { 0 };
    if (web_auth(w, c, &auth, &e) || web_query_args(c, names, U_COUNT, a, has, &e))
        goto done;
    if (!w->o.storage || !w->util) {
        em_web_fail(&e, 503, "server_error", NULL, NULL, "this server keeps no ledger");
        goto done;
    }
    em_util_query q;
    em_storage_util_query_init(&q);
    if (web_query_window(has[U_SINCE] ? a[U_SINCE] : NULL, has[U_UNTIL] ? a[U_UNTIL] : NULL, &q.since_ms,
                         &q.until_ms, &e))
        goto done;
    if (has[U_BUCKET] && em_storage_util_bucket_parse(a[U_BUCKET], &q.bucket)) {
        em_web_fail(&e, 400, "invalid_request_error", NULL, "bucket", "'%s' is not hour or day", a[U_BUCKET]);
        goto done;
    }
    if (has[U_PRICE]) {
        char *end = NULL;
        q.gpu_cost_per_hour = strtod(a[U_PRICE], &end);
        if (end == a[U_PRICE] || *end || !isfinite(q.gpu_cost_per_hour) || q.gpu_cost_per_hour < 0 ||
            q.gpu_cost_per_hour > 1e9) {
            em_web_fail(&e, 400, "invalid_request_error", NULL, "gpu_cost_per_hour",
                        "'%s' is not a price per hour (a number from 0 to 1e9)", a[U_PRICE]);
            goto done;
        }
    }
    record(w->util);   /* up to now */
    if (em_storage_util(w->o.storage, &q, &rep, &err) || em_storage_util_json(rep, &js, &err)) {
        em_web_fail(&e, 500, "server_error", NULL, NULL, "the utilization query failed: %s", err.msg);
        goto done;
    }
    size_t len = strlen(js);
    if (!(out = malloc(len + 2))) {
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    memcpy(out, js, len);
    out[len++] = '\n';   /* a line feed at the end, as every JSON answer has */
    web_respond(c, 200, "application/json", out, len);
done:
    free(out);
    free(js);
    em_storage_util_free(rep);
    if (e.status)
        web_respond_error(c, &e);
}
