/* utilization.c — the device's busy time per UTC hour (table
 * `utilization`): ember serve adds what it measured about every minute
 * (em_storage_util_add, on the ops connection: an upsert that adds to the
 * hour's row), and GET /api/utilization and the dashboard read it by hour
 * or day (em_storage_util_query, through a query-only connection of its
 * own, like the usage reports) with the figures derived from it:
 * utilization, throughput while busy, and the cost per 1M generated tokens
 * at full load and at the utilization measured (docs/storage.md,
 * "Utilization"). */
#include "storage/storage_int.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"

#define HOUR_MS 3600000LL
#define DAY_MS  86400000LL

void em_storage_util_query_init(em_util_query *q)
{
    memset(q, 0, sizeof *q);
    q->bucket = EM_UTIL_HOUR;
    q->gpu_cost_per_hour = -1.0;
}

int em_storage_util_bucket_parse(const char *s, em_util_bucket *out)
{
    if (s && strcmp(s, "hour") == 0)
        *out = EM_UTIL_HOUR;
    else if (s && strcmp(s, "day") == 0)
        *out = EM_UTIL_DAY;
    else
        return EM_EINVAL;
    return 0;
}

int em_storage_util_add(em_storage *st, const em_util_sample *s, em_err *err)
{
    int ret, rc = SQLITE_OK;
    int64_t span = s->end_ms - s->start_ms;
    if (s->start_ms < 0 || span <= 0 || s->start_ms / HOUR_MS != (s->end_ms - 1) / HOUR_MS ||
        !(s->busy_s >= 0) || s->busy_s * 1e3 > (double)span + 1e-6 || s->generated_tokens < 0 ||
        s->prefilled_tokens < 0 || s->steps < 0)
        return em_err_set(err, EM_EINVAL, "%s: utilization: a bad sample ([%lld, %lld) ms, busy %.3f s)",
                          st->path, (long long)s->start_ms, (long long)s->end_ms, s->busy_s);
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    sqlite3_stmt *q = em_sto_stmt(&st->ops, EM_STMT_UTIL_ADD,
                                  "INSERT INTO utilization (hour_ms, up_ms, busy_ms, generated_tokens,"
                                  "  prefilled_tokens, steps) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                                  " ON CONFLICT (hour_ms) DO UPDATE SET"
                                  "  up_ms = up_ms + excluded.up_ms,"
                                  "  busy_ms = busy_ms + excluded.busy_ms,"
                                  "  generated_tokens = generated_tokens + excluded.generated_tokens,"
                                  "  prefilled_tokens = prefilled_tokens + excluded.prefilled_tokens,"
                                  "  steps = steps + excluded.steps",
                                  st->path, err);
    if (!q) {
        ret = err ? err->code : EM_EIO;
        goto done;
    }
    sqlite3_bind_int64(q, 1, s->start_ms / HOUR_MS * HOUR_MS);
    sqlite3_bind_int64(q, 2, span);
    sqlite3_bind_double(q, 3, s->busy_s * 1e3);
    sqlite3_bind_int64(q, 4, s->generated_tokens);
    sqlite3_bind_int64(q, 5, s->prefilled_tokens);
    sqlite3_bind_int64(q, 6, s->steps);
    rc = sqlite3_step(q);
    sqlite3_reset(q);
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(st->ops.db, rc, st->path, "recording utilization", err);
        goto done;
    }
    rc = SQLITE_OK;
done:
    em_sto_ops_end(st, rc);
    return ret;
}

/* The derived figures of r (NAN where a divisor is 0 or there is no price). */
static void finish(em_util_row *r, double price)
{
    double gen = (double)r->generated_tokens;
    r->utilization = r->up_s > 0 ? r->busy_s / r->up_s : NAN;
    r->busy_tokens_per_s = r->busy_s > 0 ? gen / r->busy_s : NAN;
    r->cost_per_1m_full_load = price >= 0 && gen > 0 ? price * (r->busy_s / 3600.0) / gen * 1e6 : NAN;
    r->cost_per_1m_measured = price >= 0 && gen > 0 ? price * (r->up_s / 3600.0) / gen * 1e6 : NAN;
}

static const char *const util_sql =
    "SELECT hour_ms / ?3 * ?3 AS b, sum(up_ms), sum(busy_ms), sum(generated_tokens),"
    " sum(prefilled_tokens), sum(steps)"
    " FROM utilization WHERE hour_ms >= ?1 AND hour_ms < ?2 GROUP BY b ORDER BY b";

int em_storage_util_query(const char *path, const em_util_query *q, em_util_report **out, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    em_sto_conn c;
    sqlite3_stmt *s = NULL;
    size_t cap = 0;
    *out = NULL;
    if (q->since_ms > 0 && q->until_ms > 0 && q->until_ms <= q->since_ms)
        return em_err_set(err, EM_EINVAL, "utilization: until must be later than since");
    em_util_report *rep = calloc(1, sizeof *rep);
    if (!rep)
        return em_err_set(err, EM_ENOMEM, "utilization: out of memory");
    rep->query = *q;
    double price = q->gpu_cost_per_hour >= 0 && !isnan(q->gpu_cost_per_hour) ? q->gpu_cost_per_hour : -1.0;
    rep->query.gpu_cost_per_hour = price;
    snprintf(rep->total.label, sizeof rep->total.label, "total");
    em_sto_conn_params p = { .path = path, .query_only = 1, .busy_ms = 5000 };
    if ((ret = em_sto_conn_open(&p, &c, err))) {
        free(rep);
        return ret;
    }
    /* a ledger from before the table: nothing recorded */
    rc = sqlite3_prepare_v2(c.db, "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'utilization'", -1,
                            &s, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(s);
    int have = rc == SQLITE_ROW;
    sqlite3_finalize(s);
    s = NULL;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        ret = em_sto_fail(c.db, rc, path, "reading utilization", err);
        goto done;
    }
    rc = SQLITE_OK;
    if (!have)
        goto done;
    rc = sqlite3_prepare_v2(c.db, util_sql, -1, &s, NULL);
    if (rc != SQLITE_OK) {
        ret = em_sto_fail(c.db, rc, path, "reading utilization", err);
        goto done;
    }
    sqlite3_bind_int64(s, 1, q->since_ms > 0 ? q->since_ms : 0);
    sqlite3_bind_int64(s, 2, q->until_ms > 0 ? q->until_ms : INT64_MAX);
    sqlite3_bind_int64(s, 3, q->bucket == EM_UTIL_DAY ? DAY_MS : HOUR_MS);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (em_grow((void **)&rep->rows, &cap, rep->n_rows + 1, sizeof *rep->rows, 32)) {
            ret = em_err_set(err, EM_ENOMEM, "utilization: out of memory");
            goto done;
        }
        em_util_row *r = &rep->rows[rep->n_rows++];
        memset(r, 0, sizeof *r);
        em_sto_bucket_label(sqlite3_column_int64(s, 0), q->bucket == EM_UTIL_DAY ? DAY_MS : HOUR_MS, r->label,
                            sizeof r->label, &r->start_ms);
        r->up_s = (double)sqlite3_column_int64(s, 1) / 1e3;
        r->busy_s = sqlite3_column_double(s, 2) / 1e3;
        r->generated_tokens = sqlite3_column_int64(s, 3);
        r->prefilled_tokens = sqlite3_column_int64(s, 4);
        r->steps = sqlite3_column_int64(s, 5);
        finish(r, price);
        rep->total.up_s += r->up_s;
        rep->total.busy_s += r->busy_s;
        rep->total.generated_tokens += r->generated_tokens;
        rep->total.prefilled_tokens += r->prefilled_tokens;
        rep->total.steps += r->steps;
    }
    if (rc != SQLITE_DONE) {
        ret = em_sto_fail(c.db, rc, path, "reading utilization", err);
        goto done;
    }
    rc = SQLITE_OK;
done:
    sqlite3_finalize(s);
    em_sto_conn_close(&c);
    if (ret) {
        em_storage_util_free(rep);
        return ret;
    }
    finish(&rep->total, price);
    *out = rep;
    return 0;
}

int em_storage_util(em_storage *st, const em_util_query *q, em_util_report **out, em_err *err)
{
    return em_storage_util_query(st->path, q, out, err);
}

void em_storage_util_free(em_util_report *rep)
{
    if (!rep)
        return;
    free(rep->rows);
    free(rep);
}

static json_t *row_json(const em_util_row *r, int total)
{
    return json_pack("{s:s, s:o, s:o, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:o}", "period", r->label,
                          "start_ms", total ? json_null() : json_integer((json_int_t)r->start_ms),
                          "up_s", em_sto_json_num(r->up_s, 1e3), "busy_s", em_sto_json_num(r->busy_s, 1e6),
                          "generated_tokens", (json_int_t)r->generated_tokens, "prefilled_tokens",
                          (json_int_t)r->prefilled_tokens, "steps", (json_int_t)r->steps, "utilization",
                          em_sto_json_num(r->utilization, 1e9), "busy_tokens_per_s",
                          em_sto_json_num(r->busy_tokens_per_s, 1e3), "cost_per_1m_full_load",
                          em_sto_json_num(r->cost_per_1m_full_load, 1e6), "cost_per_1m_measured",
                          em_sto_json_num(r->cost_per_1m_measured, 1e6));
}

int em_storage_util_json(const em_util_report *rep, char **out, em_err *err)
{
    const em_util_query *q = &rep->query;
    json_t *root = json_object(), *buckets = json_array();
    int bad = !root || !buckets;
    *out = NULL;
    for (size_t i = 0; i < rep->n_rows && !bad; i++)
        bad |= json_array_append_new(buckets, row_json(&rep->rows[i], 0));
    bad |= json_object_set_new(root, "bucket", json_string(q->bucket == EM_UTIL_DAY ? "day" : "hour"));
    bad |= json_object_set_new(root, "since_ms", q->since_ms > 0 ? json_integer((json_int_t)q->since_ms) : json_null());
    bad |= json_object_set_new(root, "until_ms", q->until_ms > 0 ? json_integer((json_int_t)q->until_ms) : json_null());
    bad |= json_object_set_new(root, "gpu_cost_per_hour",
                               q->gpu_cost_per_hour >= 0 ? json_real(q->gpu_cost_per_hour) : json_null());
    bad |= json_object_set(root, "buckets", buckets);
    bad |= json_object_set_new(root, "total", row_json(&rep->total, 1));
    if (!bad)
        *out = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(buckets);
    json_decref(root);
    return *out ? 0 : em_err_set(err, EM_ENOMEM, "utilization: out of memory building JSON");
}
