/* loadtest_run.c — one level of `ember loadtest` (firmware/loadtest.h): a
 * thread per user sending streaming chat completions one after another
 * over its own keep-alive connection, the server-sent events read and timed
 * as they arrive, and the level's figures gathered from every request. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/grow.h"
#include "firmware/cli.h"
#include "firmware/http_client.h"
#include "firmware/loadtest.h"

const char *const em_loadtest_err_names[EM_LT_N_ERR] = {
    "http", "connect", "timeout", "malformed", "truncated", "too_large",
};

/* Common English words, most of them one token in the usual vocabularies:
 * a prompt of N of them is about N tokens. */
static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each",
    "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first",
    "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get",
    "come", "made", "may", "part", "over", "new", "sound", "take", "only", "little", "work", "know",
    "place", "year", "live", "me", "back", "give", "most", "very", "after", "thing", "our", "just",
    "name", "good", "sentence", "man", "think", "say", "great", "where", "help", "through", "much",
    "before", "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow", "came",
    "want", "show", "also", "around", "form", "three", "small", "set", "put", "end", "does", "another",
    "well", "large", "must", "big", "even", "such", "because", "turn", "here", "why", "ask", "went",
    "men", "read", "need", "land", "different", "home", "us", "move", "try", "kind", "hand", "picture",
    "again", "change", "off", "play", "spell", "air", "away", "animal", "house", "point", "page",
    "letter", "mother", "answer", "found", "study", "still", "learn", "should", "world", "high",
};

static uint64_t next_rand(uint64_t *s)   /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t draw(uint64_t *s, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(next_rand(s) % ((uint64_t)hi - lo + 1));
}

typedef struct {
    double   ttft_ms;                  /* < 0: no content arrived */
    double   tpot_mean_ms, tpot_p99_ms; /* < 0: fewer than two tokens */
    uint32_t tokens;                   /* usage.completion_tokens, else the content chunks */
    int32_t  prompt_tokens;            /* usage.prompt_tokens; -1: not sent */
    int      kind;                     /* -1: completed; -2: dropped at the level's end; else em_lt_err */
} result;

typedef struct {
    const em_http_url      *u;
    const em_loadtest_opts *o;
    const char             *headers;
    const atomic_int       *stop;        /* background users: the level is over */
    int                     background;
    uint32_t                n_requests;  /* interactive users */
    uint64_t                seed;
    atomic_ullong           live_tokens; /* output tokens received so far */
    result                 *res;         /* interactive users: every request */
    size_t                  n_res, cap_res;
    uint32_t                begun, retries, errors[EM_LT_N_ERR];
    int                     failed;      /* out of memory: the user stopped */
    char                    first_error[EM_LT_N_ERR][256];
    /* one request's scratch */
    double                 *gaps;
    size_t                  n_gaps, cap_gaps;
    char                   *data;        /* the data lines of one event */
    size_t                  n_data, cap_data;
} user;

/* One request's progress through its stream. */
typedef struct {
    double   t0, t_first, t_last, t_data;   /* t_data: the first data line of the event being read */
    uint32_t chunks;
    long     usage_tokens, usage_prompt;   /* -1: not sent */
    int      done;                         /* [DONE] seen */
    int      kind;
    char     error[256];
} stream;

static int fail_req(stream *st, em_lt_err kind, const char *fmt, const char *arg)
{
    st->kind = (int)kind;
    snprintf(st->error, sizeof st->error, fmt, arg);
    return -1;
}

/* The request body: a user message of ~n_words words, max_tokens n_gen. */
static char *make_body(user *us, uint64_t *rs, uint32_t n_words, uint32_t n_gen)
{
    char *text = malloc((size_t)n_words * 16 + 1), *p = text;
    if (!text)
        return NULL;
    for (uint32_t i = 0; i < n_words; i++) {
        const char *w = words[next_rand(rs) % (sizeof words / sizeof words[0])];
        size_t n = strlen(w);
        if (i)
            *p++ = (i % 12 == 0) ? '.' : ' ';
        if (i && i % 12 == 0)
            *p++ = ' ';
        memcpy(p, w, n);
        p += n;
    }
    *p = 0;
    json_t *msg = json_pack("{s:s, s:s}", "role", "user", "content", text);
    json_t *b = json_pack("{s:s, s:[o], s:i, s:f, s:b, s:{s:b}, s:b}", "model", us->o->model, "messages", msg,
                          "max_tokens", (int)n_gen, "temperature", us->o->temperature, "stream", 1,
                          "stream_options", "include_usage", 1, "ignore_eos", 1);
    if (b && us->background)
        json_object_set_new(b, "priority", json_string("background"));
    char *s = b ? json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(b);
    free(text);
    return s;
}

/* The message of an error answer: error.message, message, detail or error
 * (a string), else the start of the body. */
static void error_message(const char *body, char *out, size_t cap)
{
    json_t *j = json_loads(body, 0, NULL), *e = json_object_get(j, "error");
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m)
        m = json_string_value(e);
    if (!m)
        m = json_string_value(json_object_get(j, "message"));
    if (!m)
        m = json_string_value(json_object_get(j, "detail"));
    snprintf(out, cap, "%.200s", m ? m : body);
    json_decref(j);
    em_err_escape(out, cap);
}

static const char *content_of(json_t *j)
{
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    static const char *const keys[] = { "content", "reasoning_content", "reasoning" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *s = json_string_value(json_object_get(delta, keys[i]));
        if (s && *s)
            return s;
    }
    return NULL;
}

/* One complete event (us->data, us->n_data bytes). 0, or -1 with st->kind. */
static int on_event(user *us, stream *st, double t)
{
    const char *d = us->data;
    if (us->n_data == 6 && memcmp(d, "[DONE]", 6) == 0) {
        st->done = 1;
        return 0;
    }
    json_error_t jerr;
    json_t *j = json_loadb(d, us->n_data, 0, &jerr);
    if (!json_is_object(j)) {
        json_decref(j);
        char head[64];
        snprintf(head, sizeof head, "%.40s", d);
        return fail_req(st, EM_LT_MALFORMED, "a data line that is not a JSON object: '%s'", head);
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        char *txt = json_dumps(j, JSON_COMPACT);
        char msg[220];
        error_message(txt ? txt : "", msg, sizeof msg);
        free(txt);
        json_decref(j);
        return fail_req(st, EM_LT_HTTP, "an error event in the stream: %s", msg);
    }
    if (content_of(j)) {
        if (st->chunks == 0)
            st->t_first = t;
        else if (!em_grow((void **)&us->gaps, &us->cap_gaps, us->n_gaps, sizeof *us->gaps, 256))
            us->gaps[us->n_gaps++] = (t - st->t_last) * 1e3;
        st->t_last = t;
        st->chunks++;
        atomic_fetch_add(&us->live_tokens, 1);
    }
    json_t *usage = json_object_get(j, "usage");
    json_int_t ct = json_integer_value(json_object_get(usage, "completion_tokens"));
    json_int_t pt = json_integer_value(json_object_get(usage, "prompt_tokens"));
    if (json_is_integer(json_object_get(usage, "completion_tokens")) && ct >= 0 && ct <= INT32_MAX)
        st->usage_tokens = (long)ct;
    if (json_is_integer(json_object_get(usage, "prompt_tokens")) && pt >= 0 && pt <= INT32_MAX)
        st->usage_prompt = (long)pt;
    json_decref(j);
    return 0;
}

/* The kind of a failure of the HTTP client; in_stream: the response had begun. */
static int client_kind(em_http_fail f, int in_stream)
{
    switch (f) {
    case EM_HTTP_FAIL_TIMEOUT: return EM_LT_TIMEOUT;
    case EM_HTTP_FAIL_PROTOCOL: return EM_LT_MALFORMED;
    case EM_HTTP_FAIL_TOO_LARGE: return EM_LT_TOO_LARGE;
    case EM_HTTP_FAIL_CANCELED: return -2;
    case EM_HTTP_FAIL_CLOSED: return in_stream ? EM_LT_TRUNCATED : EM_LT_CONNECT;
    default: return in_stream ? EM_LT_TRUNCATED : EM_LT_CONNECT;
    }
}

/* Read the event stream of a 2xx answer. 0, or -1 with st->kind. */
static int read_stream(user *us, em_http_client *c, const em_http_resp *resp, stream *st)
{
    if (resp->content_type[0] && strncasecmp(resp->content_type, "text/event-stream", 17) != 0)
        return fail_req(st, EM_LT_MALFORMED, "the answer is not an event stream (Content-Type: %s)",
                        resp->content_type);
    us->n_data = 0;
    int have_data = 0;
    for (;;) {
        const char *line;
        size_t len;
        em_err err = { 0 };
        int r = em_http_line(c, &line, &len, &err);
        double t = em_cli_now();
        if (r < 0) {
            st->kind = client_kind(em_http_failure(c), 1);
            snprintf(st->error, sizeof st->error, "%s", err.msg);
            return -1;
        }
        if (r == 0 || len == 0) {   /* the end of an event (a last one without its blank line too) */
            if (have_data && (on_event(us, st, st->t_data) || st->done))
                return st->done ? 0 : -1;
            us->n_data = 0;
            have_data = 0;
            if (r == 0)
                return fail_req(st, EM_LT_TRUNCATED, "%s", "the stream ended without data: [DONE]");
            continue;
        }
        if (len < 5 || memcmp(line, "data:", 5) != 0)
            continue;   /* a comment (": ping", a keep-alive), or a field other than data */
        const char *v = line + 5;
        size_t vn = len - 5;
        if (vn && *v == ' ') {
            v++;
            vn--;
        }
        size_t need = us->n_data + (have_data ? 1 : 0) + vn + 1;
        if (need > EM_LOADTEST_MAX_LINE)
            return fail_req(st, EM_LT_TOO_LARGE, "%s", "an event over 1 MiB");
        while (us->cap_data < need)
            if (em_grow((void **)&us->data, &us->cap_data, us->cap_data, 1, 4096))
                return fail_req(st, EM_LT_TOO_LARGE, "%s", "out of memory for an event");
        if (have_data)
            us->data[us->n_data++] = '\n';
        else
            st->t_data = t;
        memcpy(us->data + us->n_data, v, vn);
        us->n_data += vn;
        us->data[us->n_data] = 0;
        have_data = 1;
    }
}

/* Sleep s seconds, or less if the level ends. */
static void nap(const atomic_int *stop, double s)
{
    double end = em_cli_now() + s;
    for (double left; (left = end - em_cli_now()) > 0 && !(stop && atomic_load(stop));) {
        double d = left < 0.1 ? left : 0.1;
        struct timespec ts = { 0, (long)(d * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* One request, retried once after a 429 or 503. */
static void one_request(user *us, em_http_client *c, const char *body, result *res)
{
    stream st = { .usage_tokens = -1, .usage_prompt = -1, .kind = -1 };
    us->n_gaps = 0;
    st.t0 = em_cli_now();
    for (int attempt = 0;; attempt++) {
        em_http_resp resp;
        em_err err = { 0 };
        if (em_http_request(c, "POST", "/v1/chat/completions", us->headers, body, strlen(body), &resp, &err)) {
            st.kind = client_kind(em_http_failure(c), 0);
            snprintf(st.error, sizeof st.error, "%s", err.msg);
            break;
        }
        if (resp.status >= 200 && resp.status < 300) {
            read_stream(us, c, &resp, &st);
            break;
        }
        char *eb = NULL;
        size_t en;
        char msg[220];
        em_err berr = { 0 };
        int brc = em_http_body(c, &eb, &en, &berr);
        error_message(brc ? berr.msg : eb, msg, sizeof msg);
        free(eb);
        em_http_end(c);
        if ((resp.status == 429 || resp.status == 503) && attempt == 0) {
            us->retries++;
            double wait = resp.retry_after_s >= 0 ? resp.retry_after_s : 1;
            nap(us->stop, wait < us->o->timeout_s ? wait : us->o->timeout_s);
            if (us->stop && atomic_load(us->stop)) {
                st.kind = -2;
                break;
            }
            continue;
        }
        st.kind = EM_LT_HTTP;
        snprintf(st.error, sizeof st.error, "HTTP %d%s%s", resp.status, msg[0] ? ": " : "", msg);
        break;
    }
    em_http_end(c);
    uint32_t tokens = st.usage_tokens >= 0 ? (uint32_t)st.usage_tokens : st.chunks;
    if (tokens > st.chunks && st.kind == -1)
        atomic_fetch_add(&us->live_tokens, tokens - st.chunks);
    res->kind = st.kind;
    res->tokens = tokens;
    res->prompt_tokens = (int32_t)st.usage_prompt;   /* -1, or within int32 (on_event) */
    res->ttft_ms = st.chunks ? (st.t_first - st.t0) * 1e3 : -1;
    res->tpot_mean_ms = res->tpot_p99_ms = -1;
    if (tokens >= 2 && st.chunks) {
        res->tpot_mean_ms = (st.t_last - st.t_first) * 1e3 / (tokens - 1);
        res->tpot_p99_ms = us->n_gaps ? em_cli_percentile(us->gaps, us->n_gaps, 0.99) : res->tpot_mean_ms;
    }
    us->begun++;
    if (st.kind >= 0)
        us->errors[st.kind]++;
    if (st.kind >= 0 && !us->first_error[st.kind][0]) {   /* server text: printable, valid UTF-8 for the JSON */
        snprintf(us->first_error[st.kind], sizeof us->first_error[0], "%s", st.error[0] ? st.error : "failed");
        em_err_escape(us->first_error[st.kind], sizeof us->first_error[0]);
    }
}

static void *user_main(void *arg)
{
    user *us = arg;
    em_http_opts ho = { (int)(us->o->timeout_s * 1e3), EM_LOADTEST_MAX_LINE, EM_LOADTEST_MAX_BODY, us->stop };
    em_http_client *c = NULL;
    if (em_http_client_create(us->u, &ho, &c, NULL)) {
        us->failed = 1;
        return NULL;
    }
    uint64_t rs = us->seed;
    for (uint32_t k = 0; us->background ? !atomic_load(us->stop) : k < us->n_requests; k++) {
        uint32_t nw = draw(&rs, us->o->prompt_lo, us->o->prompt_hi);
        uint32_t ng = draw(&rs, us->o->gen_lo, us->o->gen_hi);
        char *body = make_body(us, &rs, nw, ng);
        result bg;
        if (!body || (!us->background && em_grow((void **)&us->res, &us->cap_res, us->n_res, sizeof *us->res, 16))) {
            free(body);
            us->failed = 1;
            break;
        }
        one_request(us, c, body, us->background ? &bg : &us->res[us->n_res++]);
        free(body);
        if (us->background && bg.kind >= 0)
            nap(us->stop, 0.1);   /* a server that fails at once is not asked again in a tight loop */
    }
    em_http_client_destroy(c);
    return NULL;
}

/* ---- the level's figures ------------------------------------------------- */

typedef struct {
    double *ttft, *tmean, *tp99, *lat_ttft, *lat_tpot;
    size_t  n_ttft, n_tpot, n_lat;
} samples;

/* Whether a p99 (failures counted as +inf) is within slo. */
static int p99_within(double *v, size_t n, double slo)
{
    return slo < 0 || (n && em_cli_percentile(v, n, 0.99) <= slo);
}

static void gather(user *us, uint32_t n_users, uint32_t users, const em_loadtest_opts *o, samples *s,
                   uint64_t bg_tokens, em_loadtest_level *out)
{
    double prompt_sum = 0, good_tokens = 0;
    uint32_t n_prompt = 0;
    out->output_tokens = bg_tokens;
    for (uint32_t i = 0; i < n_users; i++) {
        user *u = &us[i];
        out->retries += u->retries;
        if (i >= users)
            out->background_requests += u->begun;
        for (int k = 0; k < EM_LT_N_ERR; k++) {
            out->errors[k] += u->errors[k];
            if (!out->first_error[k][0] && u->first_error[k][0])
                memcpy(out->first_error[k], u->first_error[k], sizeof out->first_error[k]);
        }
        for (size_t r = 0; r < u->n_res; r++) {
            result *x = &u->res[r];
            out->requests++;
            out->output_tokens += x->tokens;
            if (x->kind != -1) {   /* late beyond any SLO */
                s->lat_ttft[s->n_lat] = s->lat_tpot[s->n_lat] = INFINITY;
                s->n_lat++;
                continue;
            }
            out->completed++;
            if (x->prompt_tokens >= 0) {
                prompt_sum += x->prompt_tokens;
                n_prompt++;
            }
            if (x->ttft_ms >= 0)
                s->ttft[s->n_ttft++] = x->ttft_ms;
            if (x->tpot_mean_ms >= 0) {
                s->tmean[s->n_tpot] = x->tpot_mean_ms;
                s->tp99[s->n_tpot++] = x->tpot_p99_ms;
            }
            s->lat_ttft[s->n_lat] = x->ttft_ms >= 0 ? x->ttft_ms : 0;
            s->lat_tpot[s->n_lat] = x->tpot_p99_ms >= 0 ? x->tpot_p99_ms : 0;
            s->n_lat++;
            int good = (o->slo_ttft_ms < 0 || (x->ttft_ms >= 0 && x->ttft_ms <= o->slo_ttft_ms)) &&
                       (o->slo_tpot_ms < 0 || x->tpot_mean_ms <= o->slo_tpot_ms);
            if (good) {
                out->goodput_requests++;
                good_tokens += x->tokens;
            }
        }
    }
    int slo = o->slo_ttft_ms >= 0 || o->slo_tpot_ms >= 0;
    out->tokens_per_s = out->wall_s > 0 ? (double)out->output_tokens / out->wall_s : 0;
    out->ttft_p50_ms = s->n_ttft ? em_cli_percentile(s->ttft, s->n_ttft, 0.5) : NAN;
    out->ttft_p99_ms = s->n_ttft ? em_cli_percentile(s->ttft, s->n_ttft, 0.99) : NAN;
    out->tpot_p50_ms = s->n_tpot ? em_cli_percentile(s->tmean, s->n_tpot, 0.5) : NAN;
    out->tpot_p99_ms = s->n_tpot ? em_cli_percentile(s->tp99, s->n_tpot, 0.99) : NAN;
    out->prompt_tokens_mean = n_prompt ? prompt_sum / n_prompt : NAN;
    if (!slo)
        out->goodput_requests = 0;
    out->goodput_tokens_per_s = !slo ? NAN : out->wall_s > 0 ? good_tokens / out->wall_s : 0;
    out->cost_per_1m = o->gpu_cost_per_hour < 0 || out->tokens_per_s <= 0
                       ? NAN : o->gpu_cost_per_hour / (out->tokens_per_s * 3600) * 1e6;
    out->within_slo = !slo ? -1
                      : p99_within(s->lat_ttft, s->n_lat, o->slo_ttft_ms) &&
                        p99_within(s->lat_tpot, s->n_lat, o->slo_tpot_ms);
}

/* Start the threads of us[from..to); -1 when one cannot start (those before it run). */
static int start_users(user *us, pthread_t *th, int *started, uint32_t from, uint32_t to)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    int rc = 0;
    for (uint32_t i = from; i < to && !rc; i++)
        rc = (started[i] = pthread_create(&th[i], &attr, user_main, &us[i]) == 0) ? 0 : -1;
    pthread_attr_destroy(&attr);
    return rc;
}

int em_loadtest_run_level(const em_http_url *u, const em_loadtest_opts *o, uint32_t level, uint32_t users,
                          em_loadtest_level *out, em_err *err)
{
    uint32_t n = users + o->background;
    user *us = calloc(n, sizeof *us);
    pthread_t *th = calloc(n, sizeof *th);
    int *started = calloc(n, sizeof *started);
    char headers[1024];
    atomic_int stop = 0;
    samples s = { 0 };
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->users = users;
    out->background = o->background;
    snprintf(headers, sizeof headers, "Content-Type: application/json\r\nAccept: text/event-stream\r\n%s%s%s",
             o->api_key ? "Authorization: Bearer " : "", o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "");
    if (!us || !th || !started) {
        rc = em_err_set(err, EM_ENOMEM, "loadtest: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < n; i++) {
        us[i].u = u;
        us[i].o = o;
        us[i].headers = headers;
        us[i].background = i >= users;
        us[i].stop = us[i].background ? &stop : NULL;
        us[i].n_requests = o->requests_per_user;
        uint64_t k = o->seed ^ (0x51ed27ull * (level + 1)) ^ ((uint64_t)(i + 1) << 32);
        us[i].seed = next_rand(&k);
        atomic_init(&us[i].live_tokens, 0);
    }
    json_object_seed(0);   /* jansson's hash seed, set before the threads make objects */
    double t0 = em_cli_now();
    int bad = start_users(us, th, started, users, n);   /* background users first: saturate */
    if (!bad && o->background)
        nap(NULL, 0.5);
    if (!bad)
        bad = start_users(us, th, started, 0, users);
    for (uint32_t i = 0; i < users; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    double t1 = em_cli_now();
    uint64_t bg_tokens = 0;
    for (uint32_t i = users; i < n; i++)
        bg_tokens += atomic_load(&us[i].live_tokens);
    atomic_store(&stop, 1);
    for (uint32_t i = users; i < n; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    for (uint32_t i = 0; i < n && !bad; i++)
        bad = us[i].failed;
    if (bad) {
        rc = em_err_set(err, EM_ENOMEM, "loadtest: %u users: a user could not start or ran out of memory", users);
        goto done;
    }
    size_t cap = (size_t)users * o->requests_per_user + 1;
    s.ttft = malloc(cap * sizeof(double));
    s.tmean = malloc(cap * sizeof(double));
    s.tp99 = malloc(cap * sizeof(double));
    s.lat_ttft = malloc(cap * sizeof(double));
    s.lat_tpot = malloc(cap * sizeof(double));
    if (!s.ttft || !s.tmean || !s.tp99 || !s.lat_ttft || !s.lat_tpot) {
        rc = em_err_set(err, EM_ENOMEM, "loadtest: out of memory");
        goto done;
    }
    out->wall_s = t1 - t0;
    gather(us, n, users, o, &s, bg_tokens, out);
done:
    for (uint32_t i = 0; us && i < n; i++) {
        free(us[i].res);
        free(us[i].gaps);
        free(us[i].data);
    }
    free(s.ttft);
    free(s.tmean);
    free(s.tp99);
    free(s.lat_ttft);
    free(s.lat_tpot);
    free(us);
    free(th);
    free(started);
    return rc;
}

int em_loadtest_default_model(const em_http_url *u, const em_loadtest_opts *o, char *buf, size_t cap, em_err *err)
{
    em_http_opts ho = { (int)(o->timeout_s * 1e3), EM_LOADTEST_MAX_LINE, EM_LOADTEST_MAX_BODY, NULL };
    em_http_client *c = NULL;
    em_http_resp resp;
    char *body = NULL, headers[1024];
    size_t len;
    json_t *j = NULL;
    snprintf(headers, sizeof headers, "Accept: application/json\r\n%s%s%s", o->api_key ? "Authorization: Bearer " : "",
             o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "");
    int rc = em_http_client_create(u, &ho, &c, err);
    if (rc || (rc = em_http_request(c, "GET", "/v1/models", headers, NULL, 0, &resp, err)) ||
        (rc = em_http_body(c, &body, &len, err)))
        goto done;
    if (resp.status != 200) {
        char msg[220];
        error_message(body, msg, sizeof msg);
        rc = em_err_set(err, EM_EIO, "HTTP %d%s%s", resp.status, msg[0] ? ": " : "", msg);
        goto done;
    }
    j = json_loadb(body, len, 0, NULL);
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    if (!id || !*id || strlen(id) >= cap) {
        rc = em_err_set(err, EM_EFORMAT, "the answer lists no model (no data[0].id)");
        goto done;
    }
    snprintf(buf, cap, "%s", id);
done:
    json_decref(j);
    free(body);
    em_http_client_destroy(c);
    return rc;
}
