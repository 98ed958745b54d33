/* api.c — the conversations API (docs/api.md, "Conversations"):
 *   GET    /api/conversations[?q=TEXT]  the asking key's, newest first (q: titles containing TEXT)
 *   GET    /api/conversations/ID        one, with every message of every branch
 *   PATCH  /api/conversations/ID        rename, switch the branch shown
 *   DELETE /api/conversations/ID
 *   GET    /api/conversations/export, /api/conversations/ID/export
 *   POST   /api/conversations/import    (the export's JSON; new ids; all or nothing)
 * The chats of the WebSocket protocol are stored there (ws_chat.c). Auth is
 * the HTTP API's (web_auth): a key sees its own conversations only (loopback
 * clients without a key share key_id 0), and another key's ID answers 404
 * as a missing one does. Titles and texts go out as they were stored, byte
 * for byte: the UI renders them as text. Errors are in the OpenAI shape of
 * the rest of the HTTP API. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/web_int.h"

#define PREFIX         "/api/conversations"
#define PREFIX_LEN     (sizeof PREFIX - 1)
#define EXPORT_VERSION 1      /* "ember_conversations": the export format's version */
#define Q_MAX          512    /* bytes of a search */

/* ---- JSON out -------------------------------------------------------------- */

/* s as a JSON string; what storage holds came in as JSON, so it is UTF-8
 * (a byte that is not would make jansson refuse: U+FFFD then). */
static json_t *text_json(const char *s)
{
    json_t *j = json_string(s);
    return j ? j : json_string("\xef\xbf\xbd");
}

static json_t *id_or_null(int64_t id)
{
    return id > 0 ? json_integer(id) : json_null();
}

static json_t *title_json(const em_conv_info *ci)
{
    return ci->title[0] ? text_json(ci->title) : json_null();
}

/* A list entry: {id, title, created_ms, updated_ms, message_count}. */
static json_t *conv_json(const em_conv_info *ci)
{
    return json_pack("{s:I, s:o, s:I, s:I, s:I}", "id", (json_int_t)ci->id, "title", title_json(ci), "created_ms",
                     (json_int_t)ci->created_ms, "updated_ms", (json_int_t)ci->updated_ms, "message_count",
                     (json_int_t)ci->n_messages);
}

static json_t *messages_json(const em_message *m, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:I, s:o, s:s, s:o, s:I, s:o, s:I}", "id", (json_int_t)m[i].id,
                                             "parent_id", id_or_null(m[i].parent_id), "role", m[i].role, "content",
                                             text_json(m[i].content), "tokens", (json_int_t)m[i].tokens,
                                             "finish_reason",
                                             m[i].finish_reason[0] ? json_string(m[i].finish_reason) : json_null(),
                                             "created_ms", (json_int_t)m[i].created_ms));
    return arr;
}

/* ---- errors ----------------------------------------------------------------- */

static int refuse(web_conn *c, int status, const char *code, const char *param, const char *msg)
{
    em_web_error e = { 0 };
    em_web_fail(&e, status, "invalid_request_error", code, param, "%s", msg);
    web_respond_error(c, &e);
    return 0;
}

static const web_store conv_store = {
    "conversation", "conversation %s does not exist", NULL, 403, "storage_off",
    "this server keeps no conversation text (--no-store-content)",
};

/* A storage failure (web_storage_fail): 404 for a conversation that is not
 * the key's, 400 for what the request got wrong, 403 with storing switched
 * off, else 503. */
static int storage_error(web_conn *c, int rc, int64_t id, const char *param, const em_err *err)
{
    em_web_error e = { 0 };
    char ids[32];
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    web_storage_fail(&e, rc, err, &conv_store, ids, param);
    web_respond_error(c, &e);
    return 0;
}

/* The request body as a JSON object; NULL after answering 400. */
static json_t *body_object(web_conn *c)
{
    json_error_t je;
    json_t *j = c->body.n ? json_loadb(c->body.s, c->body.n, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (json_is_object(j))
        return j;
    char msg[256];
    if (j)
        snprintf(msg, sizeof msg, "the body must be a JSON object");
    else if (!c->body.n)
        snprintf(msg, sizeof msg, "the body is empty: a JSON object is expected");
    else
        snprintf(msg, sizeof msg, "the body is not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    json_decref(j);
    refuse(c, 400, NULL, NULL, msg);
    return NULL;
}

/* ---- list, one, rename, delete -------------------------------------------------- */

/* q from the query string (lws has decoded each "name=value"), "" when
 * absent; 0, or -1 after answering 400. */
static int search_arg(web_conn *c, char *q, size_t cap)
{
    q[0] = 0;
    for (int i = 0, seen = 0;; i++) {
        char frag[Q_MAX + 8];
        int flen = lws_hdr_fragment_length(c->wsi, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (flen >= (int)sizeof frag) {
            refuse(c, 400, NULL, "q", "the search is longer than 512 bytes");
            return -1;
        }
        if (lws_hdr_copy_fragment(c->wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
            return 0;   /* no more */
        if (strncmp(frag, "q=", 2) != 0 || seen++) {
            refuse(c, 400, NULL, "q", "the one query parameter here is q=TEXT, once");
            return -1;
        }
        snprintf(q, cap, "%s", frag + 2);
    }
}

static int list(web_conn *c, const em_web_auth *a)
{
    char q[Q_MAX + 8];
    em_conv_info *v = NULL;
    size_t n = 0;
    em_err err = { 0 };
    if (search_arg(c, q, sizeof q))
        return 0;
    int rc = em_storage_conv_search(c->w->o.storage, a->key_id, q, &v, &n, &err);
    if (rc)
        return storage_error(c, rc, 0, "q", &err);
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(data, conv_json(&v[i]));
    free(v);
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", data);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

static int get_one(web_conn *c, const em_web_auth *a, int64_t id)
{
    em_conv_full *v = NULL;
    size_t n = 0;
    em_err err = { 0 };
    int rc = em_storage_conv_export(c->w->o.storage, a->key_id, id, &v, &n, &err);
    if (rc)
        return storage_error(c, rc, id, NULL, &err);
    json_t *j = conv_json(&v[0].info);
    json_object_set_new(j, "current_leaf_id", id_or_null(v[0].info.current_leaf_id));
    json_object_set_new(j, "messages", messages_json(v[0].msgs, v[0].n_msgs));
    em_storage_conv_full_free(v, n);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* PATCH {"title": "...", "current_leaf_id": N}: either or both, at once. */
static int patch_one(web_conn *c, const em_web_auth *a, int64_t id)
{
    json_t *b = body_object(c);
    if (!b)
        return 0;
    const char *k;
    json_t *v, *title = json_object_get(b, "title"), *leaf = json_object_get(b, "current_leaf_id");
    em_err err = { 0 };
    json_object_foreach(b, k, v) {
        if (strcmp(k, "title") && strcmp(k, "current_leaf_id")) {
            char msg[160];
            snprintf(msg, sizeof msg, "a conversation has no field '%.64s' to change (title, current_leaf_id)", k);
            refuse(c, 400, "unknown_field", k, msg);
            goto done;
        }
    }
    if (!title && !leaf) {
        refuse(c, 400, NULL, NULL, "nothing to change: send \"title\" and/or \"current_leaf_id\"");
        goto done;
    }
    if (title && (!json_is_string(title) || !json_string_length(title) ||
                  json_string_length(title) > EM_STORAGE_TITLE_MAX)) {
        refuse(c, 400, NULL, "title", "'title' must be a string of 1 to 512 bytes");
        goto done;
    }
    if (leaf && (!json_is_integer(leaf) || json_integer_value(leaf) <= 0)) {
        refuse(c, 400, NULL, "current_leaf_id", "'current_leaf_id' must be a message id (a positive integer)");
        goto done;
    }
    int rc = em_storage_conv_update(c->w->o.storage, a->key_id, id, title ? json_string_value(title) : NULL,
                                    leaf ? json_integer_value(leaf) : 0, &err);
    em_conv_info ci;
    if (!rc)
        rc = em_storage_conv_get(c->w->o.storage, a->key_id, id, &ci, &err);
    if (rc) {
        storage_error(c, rc, id, leaf ? "current_leaf_id" : "title", &err);
        goto done;
    }
    json_t *j = conv_json(&ci);
    json_object_set_new(j, "current_leaf_id", id_or_null(ci.current_leaf_id));
    web_respond_json(c, 200, j);
    json_decref(j);
done:
    json_decref(b);
    return 0;
}

static int delete_one(web_conn *c, const em_web_auth *a, int64_t id)
{
    em_err err = { 0 };
    int rc = em_storage_conv_delete(c->w->o.storage, a->key_id, id, &err);
    if (rc)
        return storage_error(c, rc, id, NULL, &err);
    json_t *j = json_pack("{s:I, s:s, s:b}", "id", (json_int_t)id, "object", "conversation", "deleted", 1);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* ---- export and import ------------------------------------------------------------ */

/* {"ember_conversations": 1, "conversations": [{title, created_ms, updated_ms,
 * current_leaf_id, messages}]}: one (id > 0) or all the key's. */
static int export_convs(web_conn *c, const em_web_auth *a, int64_t id)
{
    em_conv_full *v = NULL;
    size_t n = 0;
    em_err err = { 0 };
    int rc = em_storage_conv_export(c->w->o.storage, a->key_id, id, &v, &n, &err);
    if (rc)
        return storage_error(c, rc, id, NULL, &err);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const em_conv_info *ci = &v[i].info;
        json_array_append_new(arr, json_pack("{s:o, s:I, s:I, s:o, s:o}", "title", title_json(ci), "created_ms",
                                             (json_int_t)ci->created_ms, "updated_ms", (json_int_t)ci->updated_ms,
                                             "current_leaf_id", id_or_null(ci->current_leaf_id), "messages",
                                             messages_json(v[i].msgs, v[i].n_msgs)));
    }
    em_storage_conv_full_free(v, n);
    json_t *j = json_pack("{s:i, s:o}", "ember_conversations", EXPORT_VERSION, "conversations", arr);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* What an import's JSON says, as storage wants it (strings point into the JSON). */
typedef struct {
    em_conv_in    *convs;
    em_message_in *msgs;
    size_t         n;
    char           param[64];   /* where the shape is wrong */
    char           why[192];
    int            oom;
} import_in;

static int bad(import_in *in, const char *why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int bad(import_in *in, const char *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->param, sizeof in->param, fmt, ap);
    va_end(ap);
    snprintf(in->why, sizeof in->why, "%s", why);
    return -1;
}

/* An optional integer field >= 0 (absent or null: dflt). */
static int opt_int(const json_t *obj, const char *name, int64_t dflt, int64_t *out)
{
    const json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = json_integer_value(v);
    return 0;
}

/* An optional string field (absent or null: NULL); -1 for another type. */
static int opt_str(const json_t *obj, const char *name, const char **out)
{
    const json_t *v = json_object_get(obj, name);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    *out = json_string_value(v);
    return 0;
}

static int import_message(const json_t *m, size_t i, size_t j, int64_t now, em_message_in *out, import_in *in)
{
    if (!json_is_object(m))
        return bad(in, "a message must be an object", "conversations[%zu].messages[%zu]", i, j);
    const json_t *id = json_object_get(m, "id"), *parent = json_object_get(m, "parent_id");
    if (!json_is_integer(id) || json_integer_value(id) <= 0)
        return bad(in, "must be a positive integer", "conversations[%zu].messages[%zu].id", i, j);
    if (!parent || (!json_is_null(parent) && (!json_is_integer(parent) || json_integer_value(parent) <= 0)))
        return bad(in, "must be null (a first message) or the id of another message",
                   "conversations[%zu].messages[%zu].parent_id", i, j);
    out->id = json_integer_value(id);
    out->parent_id = json_is_null(parent) ? 0 : json_integer_value(parent);
    if (!json_is_string(json_object_get(m, "role")))
        return bad(in, "must be \"system\", \"user\" or \"assistant\"", "conversations[%zu].messages[%zu].role", i, j);
    if (!json_is_string(json_object_get(m, "content")))
        return bad(in, "must be a string", "conversations[%zu].messages[%zu].content", i, j);
    out->role = json_string_value(json_object_get(m, "role"));
    out->content = json_string_value(json_object_get(m, "content"));
    if (strcmp(out->role, "system") && strcmp(out->role, "user") && strcmp(out->role, "assistant"))
        return bad(in, "must be \"system\", \"user\" or \"assistant\"", "conversations[%zu].messages[%zu].role", i,
                   j);
    const char *fr;
    if (opt_str(m, "finish_reason", &fr) ||
        (fr && (strcmp(out->role, "assistant") ||
                (strcmp(fr, "stop") && strcmp(fr, "length") && strcmp(fr, "cancelled")))))
        return bad(in, "must be null, or for an assistant message \"stop\", \"length\" or \"cancelled\"",
                   "conversations[%zu].messages[%zu].finish_reason", i, j);
    out->finish_reason = fr;
    if (opt_int(m, "tokens", 0, &out->tokens))
        return bad(in, "must be an integer >= 0", "conversations[%zu].messages[%zu].tokens", i, j);
    if (opt_int(m, "created_ms", now, &out->created_ms))
        return bad(in, "must be an integer >= 0 (epoch ms)", "conversations[%zu].messages[%zu].created_ms", i, j);
    return 0;
}

/* The document's shape into in (storage checks the trees). 0 or -1. */
static int import_parse(const json_t *doc, import_in *in)
{
    const json_t *ver = json_object_get(doc, "ember_conversations"), *convs = json_object_get(doc, "conversations");
    if (!json_is_integer(ver) || json_integer_value(ver) != EXPORT_VERSION)
        return bad(in, "must be 1: this is not an ember conversations export, or a newer one", "ember_conversations");
    if (!json_is_array(convs))
        return bad(in, "must be an array", "conversations");
    size_t total = 0, i, j;
    const json_t *cv, *m;
    json_array_foreach(convs, i, cv) {
        const json_t *msgs = json_object_get(cv, "messages");
        if (!json_is_object(cv))
            return bad(in, "a conversation must be an object", "conversations[%zu]", i);
        if (!json_is_array(msgs))
            return bad(in, "must be an array", "conversations[%zu].messages", i);
        total += json_array_size(msgs);
    }
    in->n = json_array_size(convs);
    in->convs = calloc(in->n ? in->n : 1, sizeof *in->convs);
    in->msgs = calloc(total ? total : 1, sizeof *in->msgs);
    if (!in->convs || !in->msgs) {
        in->oom = 1;
        return -1;
    }
    int64_t now = em_storage_now_ms();
    size_t at = 0;
    json_array_foreach(convs, i, cv) {
        em_conv_in *c = &in->convs[i];
        const json_t *leaf = json_object_get(cv, "current_leaf_id"), *msgs = json_object_get(cv, "messages");
        if (opt_str(cv, "title", &c->title) || (c->title && !*c->title))
            return bad(in, "must be null or a non-empty string", "conversations[%zu].title", i);
        if (opt_int(cv, "created_ms", now, &c->created_ms))
            return bad(in, "must be an integer >= 0 (epoch ms)", "conversations[%zu].created_ms", i);
        if (opt_int(cv, "updated_ms", 0, &c->updated_ms))
            return bad(in, "must be an integer >= 0 (epoch ms)", "conversations[%zu].updated_ms", i);
        if (leaf && !json_is_null(leaf) && (!json_is_integer(leaf) || json_integer_value(leaf) <= 0))
            return bad(in, "must be null or the id of one of its messages", "conversations[%zu].current_leaf_id", i);
        c->current_leaf_id = json_is_integer(leaf) ? json_integer_value(leaf) : 0;
        c->msgs = &in->msgs[at];
        c->n_msgs = json_array_size(msgs);
        json_array_foreach(msgs, j, m) {
            if (import_message(m, i, j, now, &in->msgs[at++], in))
                return -1;
        }
    }
    return 0;
}

static int import(web_conn *c, const em_web_auth *a)
{
    import_in in = { 0 };
    int64_t *ids = NULL;
    em_err err = { 0 };
    json_t *doc = body_object(c);
    if (!doc)
        return 0;
    int parsed = import_parse(doc, &in);
    if (parsed && !in.oom) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s: %s", in.param, in.why);
        refuse(c, 400, NULL, in.param, msg);
        goto done;
    }
    if (parsed || !(ids = calloc(in.n ? in.n : 1, sizeof *ids))) {
        em_web_error e = { 0 };
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        web_respond_error(c, &e);
        goto done;
    }
    int rc = em_storage_conv_import(c->w->o.storage, a->key_id, in.convs, in.n, ids, &err);
    if (rc) {
        storage_error(c, rc, 0, NULL, &err);
        goto done;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < in.n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    json_t *j = json_pack("{s:o}", "imported", arr);
    web_respond_json(c, 200, j);
    json_decref(j);
done:
    free(ids);
    free(in.convs);
    free(in.msgs);
    json_decref(doc);
    return 0;
}

/* ---- routing --------------------------------------------------------------------- */

/* "123" (up to end or '/') -> 123, *end after it; 0 for anything else (ids start at 1). */
static int64_t parse_id(const char *s, const char **end)
{
    int64_t v = 0;
    size_t n = strspn(s, "0123456789");
    if (!n || n > 18)
        return 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    *end = s + n;
    return v;
}

static int not_allowed(web_conn *c, const char *what, const char *methods)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s takes %s", what, methods);
    return refuse(c, 405, "method_not_allowed", NULL, msg);
}

int web_api_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, PREFIX, PREFIX_LEN) != 0 || (p[PREFIX_LEN] && p[PREFIX_LEN] != '/'))
        return 1;
    const char *rest = p + PREFIX_LEN, *end = NULL;
    int m = c->method;
    em_web_error e = { 0 };
    em_web_auth a;
    if (web_auth(c->w, c, &a, &e)) {
        web_respond_error(c, &e);
        return 0;
    }
    if (!c->w->o.storage) {
        em_web_fail(&e, 503, "server_error", NULL, NULL, "this server keeps no conversations (no database)");
        web_respond_error(c, &e);
        return 0;
    }
    if (!*rest || strcmp(rest, "/") == 0)
        return m == EM_M_GET ? list(c, &a) : not_allowed(c, PREFIX, "GET");
    if (strcmp(rest, "/export") == 0)
        return m == EM_M_GET ? export_convs(c, &a, 0) : not_allowed(c, PREFIX "/export", "GET");
    if (strcmp(rest, "/import") == 0)
        return m == EM_M_POST ? import(c, &a) : not_allowed(c, PREFIX "/import", "POST");
    int64_t id = parse_id(rest + 1, &end);
    if (id && strcmp(end, "/export") == 0)
        return m == EM_M_GET ? export_convs(c, &a, id) : not_allowed(c, PREFIX "/ID/export", "GET");
    if (!id || *end) {
        em_web_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no route for %s", p);
        web_respond_error(c, &e);
        return 0;
    }
    if (m == EM_M_GET)
        return get_one(c, &a, id);
    if (m == EM_M_PATCH)
        return patch_one(c, &a, id);
    if (m == EM_M_DELETE)
        return delete_one(c, &a, id);
    return not_allowed(c, PREFIX "/ID", "GET, PATCH or DELETE");
}
