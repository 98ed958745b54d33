/* usage_api.c — GET /api/usage: the reports of `ember usage` over HTTP,
 * from this server's ledger (storage's em_storage_usage), with the query
 * parameters since and until (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], UTC; an
 * until date includes that day), group_by (none, key, day, hour, class, model, batch,
 * endpoint), format (json, the default, or csv) and key (an id, or a name).
 *
 * Who sees what: a key sees its own requests only; an admin key sees every
 * key's and may pick one with key=ID or key=NAME (key=0: the requests made
 * without a key). A loopback client without a key (no --require-key) sees
 * the requests made without a key, like key 0's own, unless the database
 * holds no active key at all: then it is the box's only user and sees them
 * all (docs/api.md). Unknown, repeated or malformed parameters are a 400
 * naming the parameter. Runs on the service thread. Also the query-string
 * reader of the /api endpoints that take name=value parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/web_int.h"

enum { A_SINCE, A_UNTIL, A_GROUP_BY, A_FORMAT, A_KEY, A_COUNT };

static int bad_param(em_web_error *e, const char *param, const char *fmt, const char *v)
{
    return em_web_fail(e, 400, "invalid_request_error", NULL, param, fmt, v);
}

int web_query_args(web_conn *c, const char *const *names, size_t n, char (*vals)[WEB_ARG_MAX], int *seen,
                   em_web_error *e)
{
    char list[256] = "";
    for (size_t k = 0; k < n; k++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "", names[k]);
        seen[k] = 0;
        vals[k][0] = 0;
    }
    for (int i = 0;; i++) {
        char frag[WEB_ARG_MAX];
        int flen = lws_hdr_fragment_length(c->wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (flen >= (int)sizeof frag)
            return em_web_fail(e, 400, "invalid_request_error", NULL, NULL,
                               "a query parameter is longer than %d bytes", WEB_ARG_MAX - 1);
        if (lws_hdr_copy_fragment(c->wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
            return 0;   /* no more */
        if (i >= WEB_MAX_ARGS)
            return em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "more than %d query parameters",
                               WEB_MAX_ARGS);
        char *eq = strchr(frag, '=');
        if (!eq)
            return bad_param(e, frag, "'%s' has no value (name=value)", frag);
        *eq = 0;
        size_t k = 0;
        while (k < n && strcmp(frag, names[k]) != 0)
            k++;
        if (k == n)
            return em_web_fail(e, 400, "invalid_request_error", NULL, frag, "unknown query parameter '%s' (%s)",
                               frag, list);
        if (seen[k])
            return bad_param(e, frag, "'%s' is given twice", frag);
        seen[k] = 1;
        snprintf(vals[k], WEB_ARG_MAX, "%s", eq + 1);
    }
}

int web_query_window(const char *since, const char *until, int64_t *since_ms, int64_t *until_ms, em_web_error *e)
{
    em_err err = { 0 };
    if (since && em_storage_parse_time(since, 0, since_ms, &err))
        return bad_param(e, "since", "%s", err.msg);
    if (until && em_storage_parse_time(until, 1, until_ms, &err))
        return bad_param(e, "until", "%s", err.msg);
    if (since && until && *until_ms <= *since_ms)
        return bad_param(e, "until", "'until' (%s) must be later than 'since'", until);
    return 0;
}

/* key=ID or key=NAME among keys[0..n) -> *id; 0 names the requests without a key. */
static int resolve_key(const char *v, const em_key_info *keys, size_t n, int64_t *id, em_web_error *e)
{
    size_t digits = strspn(v, "0123456789");
    if (v[0] && !v[digits] && digits < 18) {
        *id = strtoll(v, NULL, 10);
        for (size_t i = 0; i < n && *id; i++)
            if (keys[i].id == *id)
                return 0;
        return *id == 0 ? 0 : bad_param(e, "key", "no key has the id %s", v);
    }
    size_t found = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].name, v) == 0) {
            *id = keys[i].id;
            found++;
        }
    if (found == 1)
        return 0;
    return bad_param(e, "key", found ? "more than one key is named '%s': give its id" : "no key is named '%s'", v);
}

/* The report as the response: JSON, or CSV through a memory stream. */
static int respond_report(web_conn *c, const em_usage_report *rep, em_usage_format fmt, em_web_error *e)
{
    em_err err = { 0 };
    char *out = NULL;
    size_t len = 0;
    int rc;
    if (fmt == EM_USAGE_JSON) {
        char *js = NULL;
        rc = em_storage_usage_json(rep, &js, &err);
        if (!rc && !(out = malloc(strlen(js) + 2)))
            rc = EM_ENOMEM;
        if (!rc)   /* a line feed at the end, as every JSON answer has */
            len = (size_t)sprintf(out, "%s\n", js);
        free(js);
    } else {
        FILE *f = open_memstream(&out, &len);
        rc = f ? em_storage_usage_write(rep, fmt, f, &err) : EM_ENOMEM;
        if (f && fclose(f) && !rc)
            rc = EM_ENOMEM;
    }
    if (rc) {
        free(out);
        return em_web_fail(e, 500, "server_error", NULL, NULL, "the usage report failed: %s",
                           err.msg[0] ? err.msg : em_err_str(rc));
    }
    web_respond(c, 200, fmt == EM_USAGE_JSON ? "application/json" : "text/csv; charset=utf-8", out, len);
    free(out);
    return 0;
}

void web_usage_api(web_conn *c)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    em_web_auth auth;
    static const char *const names[A_COUNT] = { "since", "until", "group_by", "format", "key" };
    char a[A_COUNT][WEB_ARG_MAX];
    int has[A_COUNT];
    em_key_info *keys = NULL;
    size_t n_keys = 0;
    em_usage_report *rep = NULL;
    em_err err = { 0 };
    if (web_auth(w, c, &auth, &e) || web_query_args(c, names, A_COUNT, a, has, &e))
        goto fail;
    if (!w->o.storage) {
        em_web_fail(&e, 503, "server_error", NULL, NULL, "this server keeps no ledger");
        goto fail;
    }
    em_usage_query q;
    em_storage_usage_query_init(&q);
    em_usage_format fmt = EM_USAGE_JSON;
    if (web_query_window(has[A_SINCE] ? a[A_SINCE] : NULL, has[A_UNTIL] ? a[A_UNTIL] : NULL, &q.since_ms,
                         &q.until_ms, &e))
        goto fail;
    if (has[A_GROUP_BY] && em_storage_group_by_parse(a[A_GROUP_BY], &q.group_by)) {
        bad_param(&e, "group_by", "'%s' is not none, key, day, hour, class, model, batch or endpoint",
                  a[A_GROUP_BY]);
        goto fail;
    }
    if (has[A_FORMAT] && (em_storage_format_parse(a[A_FORMAT], &fmt) || fmt == EM_USAGE_TABLE)) {
        bad_param(&e, "format", "'%s' is not json or csv", a[A_FORMAT]);
        goto fail;
    }
    /* who sees what (the comment at the top) */
    int admin = auth.admin;
    if (has[A_KEY] || !auth.key_id) {
        if (em_storage_key_list(w->o.storage, &keys, &n_keys, &err)) {
            em_web_fail(&e, 503, "server_error", NULL, NULL, "the key store failed: %s", err.msg);
            goto fail;
        }
        size_t active = 0;
        for (size_t i = 0; i < n_keys; i++)
            active += keys[i].revoked_ms == 0;
        admin |= !auth.key_id && !active;
    }
    q.only_key = !admin;
    q.key_id = auth.key_id;
    if (has[A_KEY]) {
        int64_t id = 0;
        if (resolve_key(a[A_KEY], keys, n_keys, &id, &e))
            goto fail;
        if (!admin && id != auth.key_id) {
            em_web_fail(&e, 403, "permission_error", "admin_key_required", "key",
                        "only an admin key may read other keys' usage (ember keys add NAME --admin)");
            goto fail;
        }
        q.only_key = 1;
        q.key_id = id;
    }
    if (em_storage_usage(w->o.storage, &q, &rep, &err)) {
        em_web_fail(&e, 500, "server_error", NULL, NULL, "the usage query failed: %s", err.msg);
        goto fail;
    }
    respond_report(c, rep, fmt, &e);
fail:
    free(keys);
    em_storage_usage_free(rep);
    if (e.status)
        web_respond_error(c, &e);
}
