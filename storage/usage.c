/* usage.c — usage queries: read the `requests` of one or more ledgers
 * through query-only connections of their own (any schema version from 1
 * on, never modified), all keys' or one key's, group them by key, day,
 * hour, class, model, batch or endpoint, and compute request and token
 * totals, the cached-token share, p50/p99 TTFT, TPOT and queue time, GPU
 * hours and cost (docs/storage.md, "Cost"). Also the date and name
 * parsers used by `ember usage`, GET /api/usage and the web dashboard. */
#include "core/grow.h"
#include "storage/storage_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DAY_MS 86400000LL
#define HOUR_MS 3600000LL

/* One group while rows are read. */
typedef struct {
    em_usage_row row;
    double      *ttft, *tpot, *queue;   /* per-request values, for percentiles */
    size_t       n_ttft, cap_ttft, n_tpot, cap_tpot, n_queue, cap_queue;
    int64_t      bucket_ms;         /* BY_DAY, BY_HOUR: the bucket's start (UTC) */
} acc;

typedef struct {
    acc     *v;                     /* sorted by row.label */
    size_t   n, cap;
    acc      total;
    int64_t (*win)[2];              /* per ledger: [start, end) in ms */
    size_t   n_win;
} accs;

void em_storage_usage_query_init(em_usage_query *q)
{
    memset(q, 0, sizeof *q);
    q->group_by = EM_USAGE_BY_NONE;
    q->gpu_cost_per_hour = -1.0;
}

static int push(double **v, size_t *n, size_t *cap, double x)
{
    if (em_grow((void **)v, cap, *n, sizeof **v, 64))
        return EM_ENOMEM;
    (*v)[(*n)++] = x;
    return 0;
}

static void acc_init(acc *a, const char *label)
{
    memset(a, 0, sizeof *a);
    snprintf(a->row.label, sizeof a->row.label, "%s", label);
}

static void acc_free(acc *a)
{
    free(a->ttft);
    free(a->tpot);
    free(a->queue);
}

/* The group labelled label, created (in sorted place) when new. */
static acc *acc_find(accs *g, const char *label)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(g->v[mid].row.label, label);
        if (c == 0)
            return &g->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (em_grow((void **)&g->v, &g->cap, g->n, sizeof *g->v, 16))
        return NULL;
    memmove(&g->v[lo + 1], &g->v[lo], (g->n - lo) * sizeof *g->v);
    g->n++;
    acc_init(&g->v[lo], label);
    return &g->v[lo];
}

typedef struct {
    int64_t     received_ms, end_ms;
    const char *cls, *model, *key;
    int64_t     prompt, cached, completion;
    double      ttft, tpot, queue; /* NAN when NULL */
} req_row;

static int acc_add(acc *a, const req_row *r)
{
    a->row.requests++;
    a->row.prompt_tokens += r->prompt;
    a->row.cached_tokens += r->cached;
    a->row.completion_tokens += r->completion;
    if (!isnan(r->ttft) && push(&a->ttft, &a->n_ttft, &a->cap_ttft, r->ttft))
        return EM_ENOMEM;
    if (!isnan(r->tpot) && push(&a->tpot, &a->n_tpot, &a->cap_tpot, r->tpot))
        return EM_ENOMEM;
    if (!isnan(r->queue) && push(&a->queue, &a->n_queue, &a->cap_queue, r->queue))
        return EM_ENOMEM;
    return 0;
}

void em_sto_bucket_label(int64_t ms, int64_t len_ms, char *buf, size_t cap, int64_t *start_ms)
{
    int64_t d = ms >= 0 ? ms / len_ms : -((-ms + len_ms - 1) / len_ms);
    time_t t = (time_t)(d * (len_ms / 1000));
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, len_ms == DAY_MS ? "%Y-%m-%d" : "%Y-%m-%dT%H:00Z", &tm);
    *start_ms = d * len_ms;
}

/* Columns: received, end, class, model, key name, prompt, cached and
 * completion tokens, TTFT, TPOT, queue time, batch, endpoint; a column an
 * older schema lacks reads as 0 or NULL. */
static const char *const query_v1 =
    "SELECT r.received_ms,"
    " coalesce(r.finished_ms, r.first_token_ms, r.started_ms, r.received_ms),"
    " r.class, r.model, k.name, r.prompt_tokens, 0, r.completion_tokens,"
    " r.ttft_ms, r.tpot_mean_ms, r.queue_ms, NULL, NULL"
    " FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id"
    " WHERE r.received_ms >= ?1 AND r.received_ms < ?2"
    "  AND (?3 = 0 OR coalesce(r.key_id, 0) = ?4)";

static const char *const query_v8 =   /* + the endpoint */
    "SELECT r.received_ms,"
    " coalesce(r.finished_ms, r.first_token_ms, r.started_ms, r.received_ms),"
    " r.class, r.model, k.name, r.prompt_tokens, r.cached_tokens, r.completion_tokens,"
    " r.ttft_ms, r.tpot_mean_ms, r.queue_ms, r.batch_id, r.endpoint"
    " FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id"
    " WHERE r.received_ms >= ?1 AND r.received_ms < ?2"
    "  AND (?3 = 0 OR coalesce(r.key_id, 0) = ?4)";

static const char *const query_v7 =   /* + the batch */
    "SELECT r.received_ms,"
    " coalesce(r.finished_ms, r.first_token_ms, r.started_ms, r.received_ms),"
    " r.class, r.model, k.name, r.prompt_tokens, r.cached_tokens, r.completion_tokens,"
    " r.ttft_ms, r.tpot_mean_ms, r.queue_ms, r.batch_id, NULL"
    " FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id"
    " WHERE r.received_ms >= ?1 AND r.received_ms < ?2"
    "  AND (?3 = 0 OR coalesce(r.key_id, 0) = ?4)";

static const char *const query_v2 =
    "SELECT r.received_ms,"
    " coalesce(r.finished_ms, r.first_token_ms, r.started_ms, r.received_ms),"
    " r.class, r.model, k.name, r.prompt_tokens, r.cached_tokens, r.completion_tokens,"
    " r.ttft_ms, r.tpot_mean_ms, r.queue_ms, NULL, NULL"
    " FROM requests r LEFT JOIN api_keys k ON k.id = r.key_id"
    " WHERE r.received_ms >= ?1 AND r.received_ms < ?2"
    "  AND (?3 = 0 OR coalesce(r.key_id, 0) = ?4)";

static double col_ms(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

/* Read one ledger into g. */
static int read_ledger(const char *path, const em_usage_query *q, accs *g, em_err *err)
{
    int ret = 0, rc = SQLITE_OK, v = 0;
    em_sto_conn c;
    sqlite3_stmt *s = NULL;
    int64_t first = INT64_MAX, last = INT64_MIN;
    /* Read-write but query-only: nothing changes, and unlike a read-only
     * connection this one can remove the -wal/-shm files when it is the
     * last to close (a file on read-only media still opens read-only). */
    em_sto_conn_params p = { .path = path, .query_only = 1, .busy_ms = 5000 };
    if ((ret = em_sto_conn_open(&p, &c, err)))
        return ret;
    if ((ret = em_sto_user_version(c.db, &v, path, err)))
        goto done;
    rc = sqlite3_prepare_v2(c.db, v >= 8 ? query_v8 : v >= 7 ? query_v7 : v >= 2 ? query_v2 : query_v1, -1,
                            &s, NULL);
    if (rc != SQLITE_OK) {
        ret = em_sto_fail(c.db, rc, path, "reading the ledger", err);
        goto done;
    }
    sqlite3_bind_int64(s, 1, q->since_ms > 0 ? q->since_ms : INT64_MIN);
    sqlite3_bind_int64(s, 2, q->until_ms > 0 ? q->until_ms : INT64_MAX);
    sqlite3_bind_int(s, 3, q->only_key ? 1 : 0);
    sqlite3_bind_int64(s, 4, q->key_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        req_row r;
        r.received_ms = sqlite3_column_int64(s, 0);
        r.end_ms = sqlite3_column_int64(s, 1);
        r.cls = (const char *)sqlite3_column_text(s, 2);
        r.model = (const char *)sqlite3_column_text(s, 3);
        r.key = (const char *)sqlite3_column_text(s, 4);
        r.prompt = sqlite3_column_int64(s, 5);
        r.cached = sqlite3_column_int64(s, 6);
        r.completion = sqlite3_column_int64(s, 7);
        r.ttft = col_ms(s, 8);
        r.tpot = col_ms(s, 9);
        r.queue = col_ms(s, 10);
        if (r.received_ms < first)
            first = r.received_ms;
        if (r.end_ms > last)
            last = r.end_ms;
        if (r.received_ms > last)
            last = r.received_ms;

        char label[EM_USAGE_MODEL_MAX];
        int64_t bucket_ms = 0;
        switch (q->group_by) {
        case EM_USAGE_BY_KEY:   snprintf(label, sizeof label, "%s", r.key ? r.key : "-"); break;
        case EM_USAGE_BY_CLASS: snprintf(label, sizeof label, "%s", r.cls ? r.cls : "-"); break;
        case EM_USAGE_BY_MODEL:
            snprintf(label, sizeof label, "%s", r.model && r.model[0] ? r.model : "-");
            break;
        case EM_USAGE_BY_DAY:   em_sto_bucket_label(r.received_ms, DAY_MS, label, sizeof label, &bucket_ms); break;
        case EM_USAGE_BY_HOUR:  em_sto_bucket_label(r.received_ms, HOUR_MS, label, sizeof label, &bucket_ms); break;
        case EM_USAGE_BY_BATCH:
        case EM_USAGE_BY_ENDPOINT: {
            const unsigned char *b = sqlite3_column_text(s, q->group_by == EM_USAGE_BY_BATCH ? 11 : 12);
            snprintf(label, sizeof label, "%s", b && b[0] ? (const char *)b : "-");
            break;
        }
        case EM_USAGE_BY_NONE:  label[0] = 0; break;
        }
        if (acc_add(&g->total, &r)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        if (q->group_by == EM_USAGE_BY_NONE)
            continue;
        acc *a = acc_find(g, label);
        if (!a || acc_add(a, &r)) {
            ret = em_err_set(err, EM_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        a->bucket_ms = bucket_ms;
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(c.db, rc, path, "reading the ledger", err);
        goto done;
    }
    /* The hours this box counts: the query's bounds where given, else the
     * span of its own ledger in the range. */
    int64_t ws = q->since_ms > 0 ? q->since_ms : first;
    int64_t we = q->until_ms > 0 ? q->until_ms : last;
    if (first == INT64_MAX && (q->since_ms <= 0 || q->until_ms <= 0))
        ws = we = 0;   /* no rows and an open end: nothing to count */
    g->win[g->n_win][0] = ws;
    g->win[g->n_win][1] = we > ws ? we : ws;
    g->n_win++;
done:
    sqlite3_finalize(s);
    em_sto_conn_close(&c);
    return ret;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of v[0..n) (sorted in place); NAN when empty. */
static double percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

static void finish_row(acc *a, double gpu_hours, double price)
{
    em_usage_row *r = &a->row;
    r->cached_share = r->prompt_tokens > 0 ? (double)r->cached_tokens / (double)r->prompt_tokens
                                           : NAN;
    r->ttft_p50_ms = percentile(a->ttft, a->n_ttft, 50);
    r->ttft_p99_ms = percentile(a->ttft, a->n_ttft, 99);
    r->tpot_p50_ms = percentile(a->tpot, a->n_tpot, 50);
    r->tpot_p99_ms = percentile(a->tpot, a->n_tpot, 99);
    r->queue_p50_ms = percentile(a->queue, a->n_queue, 50);
    r->queue_p99_ms = percentile(a->queue, a->n_queue, 99);
    r->gpu_hours = gpu_hours;
    r->cost = price >= 0 ? gpu_hours * price : NAN;
    r->cost_per_1m = price >= 0 && r->completion_tokens > 0
                         ? r->cost / (double)r->completion_tokens * 1e6
                         : NAN;
}

static double overlap_hours(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? (double)(hi - lo) / 3.6e6 : 0.0;
}

int em_storage_usage_query(const char *const *paths, size_t n, const em_usage_query *q,
                           em_usage_report **out, em_err *err)
{
    int ret = 0;
    accs g;
    em_usage_report *rep = NULL;
    memset(&g, 0, sizeof g);
    acc_init(&g.total, "total");
    *out = NULL;
    if (n == 0 || !paths) {
        ret = em_err_set(err, EM_EINVAL, "usage: no database given");
        goto done;
    }
    if (q->since_ms > 0 && q->until_ms > 0 && q->until_ms <= q->since_ms) {
        ret = em_err_set(err, EM_EINVAL, "usage: --until must be later than --since");
        goto done;
    }
    g.win = calloc(n, sizeof *g.win);
    rep = calloc(1, sizeof *rep);
    if (!g.win || !rep) {
        ret = em_err_set(err, EM_ENOMEM, "usage: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if ((ret = read_ledger(paths[i], q, &g, err)))
            goto done;

    double price = q->gpu_cost_per_hour >= 0 && !isnan(q->gpu_cost_per_hour)
                       ? q->gpu_cost_per_hour
                       : -1.0;
    double total_hours = 0;
    for (size_t i = 0; i < g.n_win; i++)
        total_hours += (double)(g.win[i][1] - g.win[i][0]) / 3.6e6;
    rep->rows = calloc(g.n ? g.n : 1, sizeof *rep->rows);
    if (!rep->rows) {
        ret = em_err_set(err, EM_ENOMEM, "usage: out of memory");
        goto done;
    }
    int64_t tokens = g.total.row.completion_tokens;
    for (size_t i = 0; i < g.n; i++) {
        acc *a = &g.v[i];
        double h = 0;
        if (q->group_by == EM_USAGE_BY_DAY || q->group_by == EM_USAGE_BY_HOUR) {
            int64_t len = q->group_by == EM_USAGE_BY_DAY ? DAY_MS : HOUR_MS;
            for (size_t w = 0; w < g.n_win; w++)
                h += overlap_hours(a->bucket_ms, a->bucket_ms + len, g.win[w][0], g.win[w][1]);
        } else if (tokens > 0) {
            h = total_hours * (double)a->row.completion_tokens / (double)tokens;
        }
        finish_row(a, h, price);
        rep->rows[i] = a->row;
    }
    finish_row(&g.total, total_hours, price);
    rep->total = g.total.row;
    rep->n_rows = g.n;
    rep->n_dbs = n;
    rep->query = *q;
    rep->query.gpu_cost_per_hour = price;
done:
    for (size_t i = 0; i < g.n; i++)
        acc_free(&g.v[i]);
    acc_free(&g.total);
    free(g.v);
    free(g.win);
    if (ret) {
        em_storage_usage_free(rep);
        return ret;
    }
    *out = rep;
    return 0;
}

int em_storage_usage(em_storage *st, const em_usage_query *q, em_usage_report **out, em_err *err)
{
    const char *paths[1] = { st->path };
    return em_storage_usage_query(paths, 1, q, out, err);
}

void em_storage_usage_free(em_usage_report *rep)
{
    if (!rep)
        return;
    free(rep->rows);
    free(rep);
}

int em_storage_parse_time(const char *s, int end_of_day, int64_t *ms, em_err *err)
{
    int y, mo, d, h = 0, mi = 0, sec = 0, used = 0, date_only = 0;
    size_t len = s ? strlen(s) : 0;
    if (len == 10 && sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &used) == 3 && used == 10) {
        date_only = 1;
    } else if (len >= 16 && sscanf(s, "%4d-%2d-%2d%*1[T ]%2d:%2d%n", &y, &mo, &d, &h, &mi, &used) == 5 &&
               used == 16) {
        const char *rest = s + 16;
        if (rest[0] == ':') {
            int u2 = 0;
            if (sscanf(rest, ":%2d%n", &sec, &u2) != 1 || u2 != 3)
                goto bad;
            rest += 3;
        }
        if (strcmp(rest, "") != 0 && strcmp(rest, "Z") != 0)
            goto bad;
    } else {
        goto bad;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || h < 0 ||
        mi < 0 || sec < 0 || y < 1970)
        goto bad;
    struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
                     .tm_hour = h, .tm_min = mi, .tm_sec = sec };
    time_t t = timegm(&tm);
    if (tm.tm_mday != d || tm.tm_mon != mo - 1)   /* e.g. Feb 30 normalised */
        goto bad;
    *ms = (int64_t)t * 1000 + (date_only && end_of_day ? DAY_MS : 0);
    return 0;
bad:
    return em_err_set(err, EM_EINVAL,
                      "'%s' is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)",
                      s ? s : "");
}

/* By em_usage_group_by. */
static const char *const group_names[] = { "none", "key", "day", "class", "model", "hour", "batch", "endpoint" };
_Static_assert(sizeof group_names / sizeof group_names[0] == EM_USAGE_BY_ENDPOINT + 1, "a grouping without a name");

const char *em_sto_group_by_name(em_usage_group_by g)
{
    return (unsigned)g <= EM_USAGE_BY_ENDPOINT ? group_names[g] : "none";
}

int em_storage_group_by_parse(const char *s, em_usage_group_by *out)
{
    for (size_t i = 0; i < sizeof group_names / sizeof group_names[0]; i++)
        if (s && strcmp(s, group_names[i]) == 0) {
            *out = (em_usage_group_by)i;
            return 0;
        }
    return EM_EINVAL;
}

int em_storage_format_parse(const char *s, em_usage_format *out)
{
    static const char *const names[] = { "table", "csv", "json" };
    for (int i = 0; i < 3; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *out = (em_usage_format)i;
            return 0;
        }
    return EM_EINVAL;
}
