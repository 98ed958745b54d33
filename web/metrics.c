/* metrics.c — what `ember serve` tells its operators: GET /metrics in the
 * Prometheus text exposition format 0.0.4 (every name prefixed ember_;
 * docs/api.md lists them all) and GET /healthz as JSON, and the request
 * counters behind /metrics. Those counters (requests by class and final
 * status and by endpoint, tokens, reasoning tokens, tool calls, the TTFT /
 * TPOT / queue-time histograms) are counted from the one generation path:
 * gen.c hands every request's final ledger row to web_metrics_count, so a
 * request is counted once whatever its front door, under the server's
 * mutex. The scheduler's, the KV pool's and the ledger's figures are read
 * at scrape time. Also routes these two endpoints, GET /api/usage
 * (usage_api.c) and GET /api/utilization (utilization.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/selftest.h"
#include "web/web_int.h"

/* The ledger's final statuses, in the order they are exposed. */
static const em_usage_status statuses[] = { EM_USAGE_COMPLETED, EM_USAGE_PREEMPTED_COMPLETED,
                                            EM_USAGE_CANCELLED, EM_USAGE_FAILED, EM_USAGE_REJECTED };
#define N_STATUS (sizeof statuses / sizeof statuses[0])
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- histograms ------------------------------------------------------------- */

#define MAX_LE 16

/* Upper bounds in seconds, ascending (+Inf follows). */
static const double ttft_le[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
static const double tpot_le[] = { 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2, 2.5 };
static const double queue_le[] = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300 };

enum { H_TTFT, H_TPOT, H_QUEUE, H_COUNT };

static const struct {
    const char   *name, *help;
    const double *le;
    size_t        n_le;
} hist_defs[H_COUNT] = {
    { "ember_time_to_first_token_seconds",
      "Time from a request's submission to its first generated token, by class.", ttft_le,
      COUNT_OF(ttft_le) },
    { "ember_time_per_output_token_seconds",
      "Mean time between a request's consecutive generated tokens (one observation per request "
      "with two or more), by class.", tpot_le, COUNT_OF(tpot_le) },
    { "ember_queue_time_seconds", "Time a request waited before it was first admitted to run, by class.",
      queue_le, COUNT_OF(queue_le) },
};
_Static_assert(COUNT_OF(ttft_le) <= MAX_LE && COUNT_OF(tpot_le) <= MAX_LE && COUNT_OF(queue_le) <= MAX_LE,
               "MAX_LE too small");

typedef struct {
    uint64_t bucket[MAX_LE + 1];   /* per bound, not cumulative; [n_le]: above the last bound */
    uint64_t count;
    double   sum;                  /* seconds */
} hist;

/* Requests by front door (the ledger row's endpoint): these from the start,
 * "unknown" for a row without one, any other name on first sight while
 * there is room, "other" after that. */
static const char *const endpoints_known[] = { "chat.completions", "completions", "responses", "messages",
                                               "ws.chat", "embeddings", "rerank", "unknown" };
#define MAX_ENDPOINTS 16
_Static_assert(COUNT_OF(endpoints_known) < MAX_ENDPOINTS, "MAX_ENDPOINTS too small");

struct web_metrics {
    uint64_t requests[EM_CLASS_COUNT][N_STATUS];
    uint64_t prompt[EM_CLASS_COUNT], cached[EM_CLASS_COUNT], completion[EM_CLASS_COUNT];
    uint64_t reasoning[EM_CLASS_COUNT], tool_calls[EM_CLASS_COUNT];
    hist     h[H_COUNT][EM_CLASS_COUNT];
    char     endpoint[MAX_ENDPOINTS][EM_USAGE_ENDPOINT_MAX];
    uint64_t by_endpoint[MAX_ENDPOINTS];
    size_t   n_endpoints;
};

int web_metrics_create(em_web *w)
{
    w->metrics = calloc(1, sizeof *w->metrics);
    if (!w->metrics)
        return EM_ENOMEM;
    for (size_t i = 0; i < COUNT_OF(endpoints_known); i++)
        snprintf(w->metrics->endpoint[i], EM_USAGE_ENDPOINT_MAX, "%s", endpoints_known[i]);
    w->metrics->n_endpoints = COUNT_OF(endpoints_known);
    return 0;
}

void web_metrics_destroy(em_web *w)
{
    free(w->metrics);
    w->metrics = NULL;
}

static void observe(hist *h, int which, double s)
{
    size_t i = 0;
    while (i < hist_defs[which].n_le && s > hist_defs[which].le[i])   /* le is inclusive */
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += s;
}

/* The slot of the door named name (at most EM_USAGE_ENDPOINT_MAX bytes,
 * terminated or not; "" is "unknown"), added when new; once the table is
 * full, its last slot counts every other name as "other". Under w->mu. */
static size_t endpoint_slot(struct web_metrics *m, const char *name)
{
    char want[EM_USAGE_ENDPOINT_MAX];
    size_t len = strnlen(name, sizeof want - 1);
    memcpy(want, name, len);
    want[len] = 0;
    if (!len)
        snprintf(want, sizeof want, "unknown");
    for (size_t i = 0; i < m->n_endpoints; i++)
        if (strcmp(m->endpoint[i], want) == 0)
            return i;
    if (m->n_endpoints == MAX_ENDPOINTS)
        return MAX_ENDPOINTS - 1;
    snprintf(m->endpoint[m->n_endpoints], sizeof m->endpoint[0], "%s",
             m->n_endpoints == MAX_ENDPOINTS - 1 ? "other" : want);
    return m->n_endpoints++;
}

void web_metrics_count(em_web *w, const em_usage_record *r)
{
    struct web_metrics *m = w->metrics;
    size_t si = 0;
    while (si < N_STATUS && statuses[si] != r->status)
        si++;
    if (!m || si == N_STATUS)   /* admitted (not final yet), or a status a server never writes */
        return;
    int c = r->cls == EM_USAGE_BACKGROUND ? EM_CLASS_BACKGROUND : EM_CLASS_INTERACTIVE;
    const double ms[H_COUNT] = { [H_TTFT] = r->ttft_ms, [H_TPOT] = r->tpot_mean_ms, [H_QUEUE] = r->queue_ms };
    pthread_mutex_lock(&w->mu);
    m->requests[c][si]++;
    m->prompt[c] += r->prompt_tokens > 0 ? (uint64_t)r->prompt_tokens : 0;
    m->cached[c] += r->cached_tokens > 0 ? (uint64_t)r->cached_tokens : 0;
    m->completion[c] += r->completion_tokens > 0 ? (uint64_t)r->completion_tokens : 0;
    m->reasoning[c] += r->reasoning_tokens > 0 ? (uint64_t)r->reasoning_tokens : 0;
    m->tool_calls[c] += r->tool_calls > 0 ? (uint64_t)r->tool_calls : 0;
    m->by_endpoint[endpoint_slot(m, r->endpoint)]++;
    for (int k = 0; k < H_COUNT; k++)
        if (ms[k] >= 0)   /* negative: unknown (no token, never admitted) */
            observe(&m->h[k][c], k, ms[k] / 1e3);
    pthread_mutex_unlock(&w->mu);
}

/* ---- the exposition format ------------------------------------------------------ */

/* The scrape's text; bad once anything failed to fit (out of memory). */
typedef struct {
    em_buf b;
    int    bad;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    char line[1024];   /* one sample or comment line; label values go through label_value */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || em_buf_add(&t->b, line, (size_t)n))
        t->bad = 1;
}

static void family(text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and line feed escaped. */
static void label_value(text *t, const char *v)
{
    int bad = em_buf_add(&t->b, "\"", 1);
    for (const char *p = v; *p; p++) {
        if (*p == '\\' || *p == '"')
            bad |= em_buf_add(&t->b, "\\", 1) | em_buf_add(&t->b, p, 1);
        else if (*p == '\n')
            bad |= em_buf_add(&t->b, "\\n", 2);
        else
            bad |= em_buf_add(&t->b, p, 1);
    }
    bad |= em_buf_add(&t->b, "\"", 1);
    t->bad |= bad != 0;
}

/* A family with one sample per class: name{class="..."} value. */
static void per_class(text *t, const char *name, const char *type, const char *help, const uint64_t *v)
{
    family(t, name, type, help);
    for (int c = 0; c < EM_CLASS_COUNT; c++)
        put(t, "%s{class=\"%s\"} %llu\n", name, em_class_name((em_class)c), (unsigned long long)v[c]);
}

static void scalar(text *t, const char *name, const char *type, const char *help, unsigned long long v)
{
    family(t, name, type, help);
    put(t, "%s %llu\n", name, v);
}

static void histogram(text *t, int which, const hist *per_cls)
{
    const char *name = hist_defs[which].name;
    family(t, name, "histogram", hist_defs[which].help);
    for (int c = 0; c < EM_CLASS_COUNT; c++) {
        const hist *h = &per_cls[c];
        const char *cls = em_class_name((em_class)c);
        uint64_t cum = 0;
        for (size_t i = 0; i < hist_defs[which].n_le; i++) {
            cum += h->bucket[i];
            put(t, "%s_bucket{class=\"%s\",le=\"%g\"} %llu\n", name, cls, hist_defs[which].le[i],
                (unsigned long long)cum);
        }
        put(t, "%s_bucket{class=\"%s\",le=\"+Inf\"} %llu\n", name, cls, (unsigned long long)h->count);
        put(t, "%s_sum{class=\"%s\"} %.9g\n", name, cls, h->sum);
        put(t, "%s_count{class=\"%s\"} %llu\n", name, cls, (unsigned long long)h->count);
    }
}

/* ---- boot: stages and the self-test ------------------------------------------------ */

/* {"stages": [{name, ms}], "selftest": report or null}; NULL without boot info. */
static json_t *boot_json(const em_web_boot *b)
{
    if (!b)
        return NULL;
    json_t *stages = json_array();
    for (uint32_t i = 0; i < b->n; i++)
        json_array_append_new(stages, json_pack("{s:s, s:f}", "name", b->stage[i].name, "ms",
                                                round(b->stage[i].ms * 10) / 10));
    return json_pack("{s:o, s:o}", "stages", stages, "selftest",
                     b->selftest ? em_selftest_json(b->selftest) : json_null());
}

static void boot_metrics(text *t, const em_web_boot *b)
{
    if (!b)
        return;
    family(t, "ember_boot_stage_seconds", "gauge",
           "How long each stage of the server's boot took (model, device, weights, self-test, database, port).");
    for (uint32_t i = 0; i < b->n; i++)
        put(t, "ember_boot_stage_seconds{stage=\"%s\"} %.6f\n", b->stage[i].name, b->stage[i].ms / 1e3);
    if (!b->selftest)
        return;
    scalar(t, "ember_selftest_passed", "gauge",
           "1 when the boot self-test (the model's kernels on the device against the CPU reference) passed.",
           (unsigned long long)(b->selftest->ok != 0));
    family(t, "ember_selftest_nmse", "gauge",
           "The boot self-test's logits NMSE against the CPU reference, by stage (limit 1e-3).");
    for (int i = 0; i < EM_SELFTEST_N; i++)
        if (b->selftest->stage[i].ran && isfinite(b->selftest->stage[i].nmse))
            put(t, "ember_selftest_nmse{stage=\"%s\"} %.9g\n", b->selftest->stage[i].name,
                b->selftest->stage[i].nmse);
    family(t, "ember_selftest_kernel_nmse", "gauge",
           "The boot self-test's check of each matrix kernel variant alone on random inputs, NMSE against the "
           "CPU reference (limit 1e-6).");
    for (uint32_t i = 0; i < b->selftest->n_kernels; i++) {
        const em_selftest_kernel_result *k = &b->selftest->kernel[i];
        if (isfinite(k->nmse))
            put(t, "ember_selftest_kernel_nmse{kernel=\"%s\",tn=\"%u\",flags=\"%s\"} %.9g\n", k->kernel, k->tn,
                k->flags, k->nmse);
    }
}

static void metrics(web_conn *c)
{
    em_web *w = c->w;
    em_web_auth auth;
    em_web_error e = { 0 };
    if (web_auth(w, c, &auth, &e)) {
        web_respond_error(c, &e);
        return;
    }
    struct web_metrics m;
    pthread_mutex_lock(&w->mu);
    m = *w->metrics;
    pthread_mutex_unlock(&w->mu);
    em_sched_stats st;
    em_sched_get_stats(w->o.sched, &st);

    text t = { .b = { 0 } };
    family(&t, "ember_info", "gauge", "The model served and the device it runs on.");
    put(&t, "ember_info{model=");
    label_value(&t, w->model_id);
    put(&t, ",device=");
    label_value(&t, w->device);
    put(&t, "} 1\n");

    family(&t, "ember_requests_total", "counter",
           "Generation requests ended, by class and final status (the ledger's: completed, "
           "preempted_completed, cancelled, failed, rejected).");
    for (int k = 0; k < EM_CLASS_COUNT; k++)
        for (size_t s = 0; s < N_STATUS; s++)
            put(&t, "ember_requests_total{class=\"%s\",status=\"%s\"} %llu\n", em_class_name((em_class)k),
                        em_storage_status_name(statuses[s]), (unsigned long long)m.requests[k][s]);
    per_class(&t, "ember_prompt_tokens_total", "counter",
              "Prompt tokens of the requests ended (as their ledger rows count them), by class.", m.prompt);
    per_class(&t, "ember_prompt_tokens_cached_total", "counter",
              "Prompt tokens served from the prefix cache instead of computed, by class.", m.cached);
    per_class(&t, "ember_generation_tokens_total", "counter", "Tokens generated, by class.", m.completion);
    per_class(&t, "ember_reasoning_tokens_total", "counter",
              "Of the tokens generated, those spent thinking (reasoning), by class.", m.reasoning);
    per_class(&t, "ember_tool_calls_total", "counter", "Tool calls the answers made, by class.", m.tool_calls);
    family(&t, "ember_requests_by_endpoint_total", "counter",
           "Generation requests ended, by the endpoint they came through (chat.completions, completions, "
           "responses, messages, ws.chat; unknown when the ledger row names none).");
    for (size_t i = 0; i < m.n_endpoints; i++) {
        put(&t, "ember_requests_by_endpoint_total{endpoint=");
        label_value(&t, m.endpoint[i]);
        put(&t, "} %llu\n", (unsigned long long)m.by_endpoint[i]);
    }
    for (int k = 0; k < H_COUNT; k++)
        histogram(&t, k, m.h[k]);

    uint64_t running[EM_CLASS_COUNT], queued[EM_CLASS_COUNT];
    for (int k = 0; k < EM_CLASS_COUNT; k++) {
        running[k] = st.running[k];
        queued[k] = st.waiting[k];
    }
    per_class(&t, "ember_requests_running", "gauge", "Sequences running on the device, by class.", running);
    per_class(&t, "ember_requests_queued", "gauge", "Requests waiting to be admitted, by class.", queued);
    family(&t, "ember_kv_blocks", "gauge",
           "KV cache blocks by state: used by sequences, cached (a finished prefix kept for reuse), free.");
    put(&t, "ember_kv_blocks{state=\"used\"} %u\nember_kv_blocks{state=\"cached\"} %u\n"
                "ember_kv_blocks{state=\"free\"} %u\n", st.kv.used, st.kv.cached, st.kv.free);
    scalar(&t, "ember_kv_capacity_blocks", "gauge", "KV cache blocks in the pool.", st.kv.n_blocks);
    if (st.kv.w_blocks) {   /* a sliding-window model: its windowed layers' pool */
        family(&t, "ember_kv_window_blocks", "gauge",
               "Blocks of the sliding-window layers' KV pool by state (each sequence holds its last window).");
        put(&t, "ember_kv_window_blocks{state=\"used\"} %u\nember_kv_window_blocks{state=\"cached\"} %u\n"
                    "ember_kv_window_blocks{state=\"free\"} %u\n", st.kv.w_used, st.kv.w_cached, st.kv.w_free);
        scalar(&t, "ember_kv_window_capacity_blocks", "gauge", "Blocks in the sliding-window layers' KV pool.",
               st.kv.w_blocks);
    }
    scalar(&t, "ember_prefix_cache_lookups_total", "counter", "Prefix cache lookups (one per sequence admitted).",
           st.kv.lookups);
    scalar(&t, "ember_prefix_cache_hit_blocks_total", "counter", "KV blocks attached from the prefix cache.",
           st.kv.hit_blocks);
    scalar(&t, "ember_device_failures_total", "counter",
           "Steps that failed on the device (lost, or a kernel failure): their requests got the error.",
           st.device_failures);
    scalar(&t, "ember_device_resets_total", "counter",
           "Times the device and forward pass were rebuilt and checked after a failure, and serving resumed.",
           st.device_resets);
    scalar(&t, "ember_device_up", "gauge",
           "1 while the device serves; 0 while it failed and could not be rebuilt (every request fails at once, "
           "a rebuild is tried every 5 s).", !st.device_down);
    scalar(&t, "ember_speculative_drafted_tokens_total", "counter",
           "Tokens drafted by speculative decoding (prompt lookup or the draft model) and checked by the model.",
           st.spec_drafted);
    web_batch_metrics(w, &t.b);
    scalar(&t, "ember_response_cache_hits_total", "counter",
           "Requests answered from the response cache (deterministic, asked before).", w->cache_hits);
    scalar(&t, "ember_response_cache_misses_total", "counter",
           "Deterministic requests the response cache did not hold.", w->cache_misses);
    scalar(&t, "ember_response_cache_stores_total", "counter", "Answers the response cache kept.", w->cache_stores);
    scalar(&t, "ember_response_cache_evictions_total", "counter",
           "Answers the response cache let go, least recently used first, to stay within its bound.",
           w->cache_evictions);
    int64_t c_rows = 0, c_bytes = 0;
    em_err cerr = { 0 };
    if (w->o.storage)
        em_storage_cache_size(w->o.storage, &c_rows, &c_bytes, &cerr);
    scalar(&t, "ember_response_cache_entries", "gauge", "Answers the response cache holds.",
           (unsigned long long)c_rows);
    scalar(&t, "ember_response_cache_bytes", "gauge", "Bytes of the answers the response cache holds.",
           (unsigned long long)c_bytes);
    scalar(&t, "ember_speculative_accepted_tokens_total", "counter",
           "Drafted tokens the model accepted (each saved a step).", st.spec_accepted);
    scalar(&t, "ember_tokens_chosen_on_device_total", "counter",
           "Tokens chosen from the device's summary of their logit row (topk.comp).", st.chosen_on_device);
    scalar(&t, "ember_tokens_chosen_from_row_total", "counter",
           "Tokens whose choice needed their whole logit row (a filter or the draw past the summary's "
           "candidates).", st.chosen_from_row);
    scalar(&t, "ember_preemptions_total", "counter",
           "Sequences preempted (their blocks freed, to be recomputed) to make room.", st.preemptions);
    family(&t, "ember_busy_seconds_total", "counter",
           "Seconds the scheduler spent in steps (planning, the forward pass, sampling) since the server "
           "started: its rate is the device's utilization.");
    put(&t, "ember_busy_seconds_total %.6f\n", st.busy_s);
    family(&t, "ember_generation_tokens_per_second", "gauge",
           "Tokens generated per second over the last 5 seconds (0 once the server has been idle that long).");
    put(&t, "ember_generation_tokens_per_second %.3f\n", st.tokens_per_s);
    if (w->o.storage) {
        em_storage_counters sc;
        em_storage_counters_get(w->o.storage, &sc);
        scalar(&t, "ember_ledger_degraded", "gauge",
               "1 while the usage ledger cannot be written (rows wait in memory), else 0.",
               (unsigned long long)(sc.degraded != 0));
        scalar(&t, "ember_ledger_rows_written_total", "counter", "Ledger rows committed to the database.",
               sc.rows_written);
        scalar(&t, "ember_ledger_rows_dropped_total", "counter",
               "Ledger rows lost: the queue was full, or the database refused them.", sc.rows_dropped);
        scalar(&t, "ember_ledger_queue_depth", "gauge", "Ledger rows waiting to be written.", sc.queue_depth);
    }
    scalar(&t, "ember_draining", "gauge", "1 while the server drains before it stops, else 0.",
           (unsigned long long)(atomic_load(&w->draining) != 0));
    boot_metrics(&t, w->o.boot);
    if (t.bad) {
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        web_respond_error(c, &e);
    } else {
        web_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", t.b.s, t.b.n);
    }
    em_buf_free(&t.b);
}

/* ---- /healthz ----------------------------------------------------------------- */

/* No key needed: load balancers ask. The model is loaded before the port
 * opens (cmd_serve.c), so a server that answers at all has it: "until the
 * model is loaded" needs no state of its own. */
static void healthz(web_conn *c)
{
    em_web *w = c->w;
    em_sched_stats st;
    em_sched_get_stats(w->o.sched, &st);
    int draining = atomic_load(&w->draining) != 0, degraded = 0;
    json_t *storage = json_null();
    if (w->o.storage) {
        em_storage_health h;
        em_storage_health_get(w->o.storage, &h);
        degraded = h.degraded;
        storage = degraded ? json_pack("{s:s, s:s, s:I}", "status", "degraded", "reason", h.reason, "since_ms",
                                       (json_int_t)h.since_ms)
                           : json_pack("{s:s}", "status", "ok");
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:o*, s:{s:{s:I, s:I}, s:{s:I, s:I}}, s:{s:I, s:I, s:I, s:I}}",
                          "status", draining ? "draining" : st.device_down ? "device_down" : degraded ? "degraded"
                                                                                                   : "ok",
                          "model", w->model_id,
                          "device", w->device, "context", (json_int_t)w->o.n_ctx, "parallel",
                          (json_int_t)w->o.parallel, "storage", storage, "requests", "running", "interactive",
                          (json_int_t)st.running[EM_CLASS_INTERACTIVE], "background",
                          (json_int_t)st.running[EM_CLASS_BACKGROUND], "queued", "interactive",
                          (json_int_t)st.waiting[EM_CLASS_INTERACTIVE], "background",
                          (json_int_t)st.waiting[EM_CLASS_BACKGROUND], "kv_blocks", "total",
                          (json_int_t)st.kv.n_blocks, "used", (json_int_t)st.kv.used, "cached",
                          (json_int_t)st.kv.cached, "free", (json_int_t)st.kv.free);
    if (j && st.device_down)   /* every request fails until a rebuild succeeds: balancers route elsewhere */
        json_object_set_new(j, "device_error", json_string(st.device_error));
    if (j && w->o.boot)
        json_object_set_new(j, "boot", boot_json(w->o.boot));
    if (!j) {
        em_web_error e = { 0 };
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        web_respond_error(c, &e);
        return;
    }
    if (draining || st.device_down)
        snprintf(c->headers, sizeof c->headers, "retry-after: %u\r\n",
                 draining ? web_drain_retry_s(w) : (unsigned)EM_SCHED_RECOVER_S);
    web_respond_json(c, draining || st.device_down ? 503 : 200, j);
    json_decref(j);
}

int web_metrics_route(web_conn *c)
{
    static const struct {
        const char *path;
        void (*fn)(web_conn *c);
    } routes[] = { { "/metrics", metrics }, { "/healthz", healthz }, { "/api/usage", web_usage_api },
                   { "/api/utilization", web_util_api } };
    for (size_t i = 0; i < COUNT_OF(routes); i++) {
        if (strcmp(c->path, routes[i].path) != 0)
            continue;
        if (c->method != EM_M_GET) {
            em_web_error e = { 0 };
            em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes GET", c->path);
            web_respond_error(c, &e);
        } else {
            routes[i].fn(c);
        }
        return 0;
    }
    return 1;
}
