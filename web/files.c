/* files.c — the OpenAI Files API for the Batch API (docs/api.md "Files"):
 *   POST   /v1/files              multipart/form-data: file (with a filename), purpose "batch"
 *   GET    /v1/files[?purpose=&limit=&order=&after=]
 *   GET    /v1/files/ID
 *   GET    /v1/files/ID/content   the bytes as uploaded
 *   DELETE /v1/files/ID
 * Objects in OpenAI's shapes; the bytes and rows are storage/files.c's.
 * Auth is the HTTP API's (web_auth): a key sees its own files (loopback
 * clients without a key share key 0), an admin key every key's; another
 * key's ID answers 404 as a missing one does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/web_int.h"

#define PREFIX     "/v1/files"
#define PREFIX_LEN (sizeof PREFIX - 1)
#define MAX_PARTS  8
#define LIST_MAX   10000   /* OpenAI's bound on limit */

static int answer(web_conn *c, int status, const char *type, const char *code, const char *param, const char *fmt,
                  const char *arg)
{
    em_web_error e = { 0 };
    em_web_fail(&e, status, type, code, param, fmt, arg);
    web_respond_error(c, &e);
    return 0;
}

static int64_t scope(const em_web_auth *a)
{
    return a->admin ? EM_STORAGE_ANY_KEY : a->key_id;
}

static const web_store file_store = { "file", "No such File object: %s", "id", 0, NULL, NULL };

/* A storage failure as the API says it (web_storage_fail): 404, 400, else 503. */
static int storage_error(web_conn *c, int rc, const char *id, const em_err *err)
{
    em_web_error e = { 0 };
    web_storage_fail(&e, rc, err, &file_store, id, NULL);
    web_respond_error(c, &e);
    return 0;
}

void web_respond_list(web_conn *c, json_t *data, const char *first, const char *last, int more)
{
    json_t *j = json_pack("{s:s, s:o, s:o, s:o, s:b}", "object", "list", "data", data, "first_id",
                          first ? json_string(first) : json_null(), "last_id", last ? json_string(last) : json_null(),
                          "has_more", more);
    web_respond_json(c, 200, j);
    json_decref(j);
}

json_t *web_file_json(const em_file_info *f)
{
    /* uploads are refused a name that is not UTF-8; one stored before that
     * was refused is shown escaped ("\xNN") rather than not at all */
    char name[sizeof f->filename];
    snprintf(name, sizeof name, "%s", f->filename);
    em_err_escape(name, sizeof name);
    return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:n, s:n}", "id", f->id, "object", "file", "bytes",
                     (json_int_t)f->bytes, "created_at", (json_int_t)(f->created_ms / 1000), "filename",
                     name, "purpose", f->purpose, "status", "processed", "expires_at", "status_details");
}

/* POST /v1/files */
static int upload(web_conn *c, const em_web_auth *a)
{
    char boundary[80], why[200];
    web_part parts[MAX_PARTS];
    size_t n = 0;
    if (web_multipart_boundary(c->ctype_in, boundary, sizeof boundary))
        return answer(c, 400, "invalid_request_error", NULL, NULL,
                      "an upload is multipart/form-data with a boundary (Content-Type: %s)",
                      c->ctype_in[0] ? c->ctype_in : "none");
    if (web_multipart_parse(c->body.s, c->body.n, boundary, parts, MAX_PARTS, &n, why, sizeof why))
        return answer(c, 400, "invalid_request_error", NULL, NULL, "the multipart body is malformed: %s", why);
    const web_part *file = NULL, *purpose = NULL;
    for (size_t i = 0; i < n; i++) {
        const web_part *p = &parts[i];
        const web_part **slot = strcmp(p->name, "file") == 0 ? &file : strcmp(p->name, "purpose") == 0 ? &purpose
                                                                                                   : NULL;
        if (!slot)
            return answer(c, 400, "invalid_request_error", "unknown_parameter", p->name,
                          "unknown field '%.64s': an upload has 'file' and 'purpose'", p->name);
        if (*slot)
            return answer(c, 400, "invalid_request_error", NULL, p->name, "field '%s' is given twice", p->name);
        *slot = p;
    }
    if (!file || !file->has_filename)
        return answer(c, 400, "invalid_request_error", NULL, "file", "%s",
                      "'file' is required: a part with a filename holding the file's bytes");
    json_t *fn = json_string(file->filename);   /* NULL: not valid UTF-8 (or a control byte jansson refuses) */
    json_decref(fn);
    if (!fn || strpbrk(file->filename, "\r\n\t"))
        return answer(c, 400, "invalid_request_error", "invalid_filename", "file", "%s",
                      "the file's name must be valid UTF-8 text on one line");
    if (!purpose)
        return answer(c, 400, "invalid_request_error", NULL, "purpose", "%s", "'purpose' is required");
    if (purpose->len != 5 || memcmp(purpose->data, "batch", 5) != 0)
        return answer(c, 400, "invalid_request_error", NULL, "purpose", "%s",
                      "ember keeps files for the Batch API: 'purpose' must be \"batch\"");
    em_file_info f;
    em_err err = { 0 };
    int rc = em_storage_file_add(c->w->o.storage, a->key_id, file->filename, "batch", file->data, file->len, &f,
                                 &err);
    if (rc)
        return storage_error(c, rc, "", &err);
    json_t *j = web_file_json(&f);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* GET /v1/files: purpose, limit (1..10000, default 10000), order (desc|asc), after */
static int list(web_conn *c, const em_web_auth *a)
{
    char purpose[40] = "", after[EM_STORAGE_FILE_ID_MAX + 8] = "", frag[128];
    long limit = LIST_MAX;
    int asc = 0;
    for (int i = 0; lws_hdr_copy_fragment(c->wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) >= 0; i++) {
        char *eq = strchr(frag, '=');
        if (!eq)
            return answer(c, 400, "invalid_request_error", NULL, NULL, "a query parameter without a value: %s", frag);
        *eq = 0;
        const char *v = eq + 1;
        if (strcmp(frag, "purpose") == 0) {
            snprintf(purpose, sizeof purpose, "%s", v);
        } else if (strcmp(frag, "after") == 0) {
            snprintf(after, sizeof after, "%s", v);
        } else if (strcmp(frag, "order") == 0 && (strcmp(v, "asc") == 0 || strcmp(v, "desc") == 0)) {
            asc = strcmp(v, "asc") == 0;
        } else if (strcmp(frag, "limit") == 0) {
            char *end;
            limit = strtol(v, &end, 10);
            if (*end || limit < 1 || limit > LIST_MAX)
                return answer(c, 400, "invalid_request_error", NULL, "limit", "'limit' must be 1 to 10000, not %s",
                              v);
        } else {
            return answer(c, 400, "invalid_request_error", "unknown_parameter", frag,
                          "unknown query parameter '%s' (purpose, limit, order=asc|desc, after)", frag);
        }
    }
    em_file_info *v = NULL;
    size_t n = 0;
    int more = 0;
    em_err err = { 0 };
    int rc = em_storage_file_list(c->w->o.storage, scope(a), purpose[0] ? purpose : NULL, after[0] ? after : NULL,
                                  asc, (size_t)limit, &v, &n, &more, &err);
    if (rc)
        return storage_error(c, rc, after, &err);
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(data, web_file_json(&v[i]));
    web_respond_list(c, data, n ? v[0].id : NULL, n ? v[n - 1].id : NULL, more);
    free(v);
    return 0;
}

static int get_one(web_conn *c, const em_web_auth *a, const char *id)
{
    em_file_info f;
    em_err err = { 0 };
    int rc = em_storage_file_get(c->w->o.storage, scope(a), id, &f, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    json_t *j = web_file_json(&f);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

static int content(web_conn *c, const em_web_auth *a, const char *id)
{
    char *data = NULL;
    size_t n = 0;
    em_err err = { 0 };
    int rc = em_storage_file_read(c->w->o.storage, scope(a), id, &data, &n, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    web_respond(c, 200, "application/octet-stream", data, n);
    free(data);
    return 0;
}

static int delete_one(web_conn *c, const em_web_auth *a, const char *id)
{
    em_err err = { 0 };
    int rc = em_storage_file_delete(c->w->o.storage, scope(a), id, &err);
    if (rc)
        return storage_error(c, rc, id, &err);
    json_t *j = json_pack("{s:s, s:s, s:b}", "id", id, "object", "file", "deleted", 1);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

static int not_allowed(web_conn *c, const char *what, const char *methods)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s takes %s", what, methods);
    return answer(c, 405, "invalid_request_error", "method_not_allowed", NULL, "%s", msg);
}

int web_files_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, PREFIX, PREFIX_LEN) != 0 || (p[PREFIX_LEN] && p[PREFIX_LEN] != '/'))
        return 1;
    em_web_error e = { 0 };
    em_web_auth a;
    if (web_auth(c->w, c, &a, &e)) {
        web_respond_error(c, &e);
        return 0;
    }
    if (!c->w->o.storage)
        return answer(c, 503, "server_error", NULL, NULL, "%s", "this server keeps no files (no database)");
    const char *rest = p + PREFIX_LEN;
    int m = c->method;
    if (!*rest || strcmp(rest, "/") == 0)
        return m == EM_M_POST ? upload(c, &a) : m == EM_M_GET ? list(c, &a) : not_allowed(c, PREFIX, "GET or POST");
    char id[EM_STORAGE_FILE_ID_MAX + 8];
    const char *slash = strchr(rest + 1, '/');
    size_t il = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    if (!il || il >= sizeof id)
        return answer(c, 404, "invalid_request_error", "not_found", "id", "No such File object: %.64s", rest + 1);
    memcpy(id, rest + 1, il);
    id[il] = 0;
    if (slash && strcmp(slash, "/content") == 0)
        return m == EM_M_GET ? content(c, &a, id) : not_allowed(c, PREFIX "/ID/content", "GET");
    if (slash)
        return answer(c, 404, "invalid_request_error", "not_found", NULL, "no route for %.200s", p);
    if (m == EM_M_GET)
        return get_one(c, &a, id);
    if (m == EM_M_DELETE)
        return delete_one(c, &a, id);
    return not_allowed(c, PREFIX "/ID", "GET or DELETE");
}
