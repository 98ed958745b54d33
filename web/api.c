/* api.c — the conversations API: GET /api/conversations (the asking key's
 * conversations, newest first), GET /api/conversations/ID (one, with its
 * messages) and DELETE /api/conversations/ID. The chats of the WebSocket
 * protocol are stored there (ws_chat.c). Auth is the HTTP API's (web_auth):
 * a key sees its own conversations only (loopback clients without a key
 * share key_id 0), and another key's ID answers 404 as a missing one does.
 * Errors are in the OpenAI shape of the rest of the HTTP API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/web_int.h"

#define PREFIX     "/api/conversations"
#define PREFIX_LEN (sizeof PREFIX - 1)

static json_t *conv_json(const em_conv_info *ci)
{
    return json_pack("{s:I, s:o, s:I, s:I, s:I}", "id", (json_int_t)ci->id, "title",
                     ci->title[0] ? json_string(ci->title) : json_null(), "created_ms", (json_int_t)ci->created_ms,
                     "updated_ms", (json_int_t)ci->updated_ms, "message_count", (json_int_t)ci->n_messages);
}

static int store_failed(web_conn *c, const em_err *err)
{
    em_web_error e = { 0 };
    em_web_fail(&e, 503, "server_error", NULL, NULL, "the conversation store failed: %s", err->msg);
    web_respond_error(c, &e);
    return 0;
}

static int not_found(web_conn *c, int64_t id)
{
    em_web_error e = { 0 };
    em_web_fail(&e, 404, "invalid_request_error", "not_found", NULL, "conversation %lld does not exist",
                (long long)id);
    web_respond_error(c, &e);
    return 0;
}

static int list(web_conn *c, const em_web_auth *a)
{
    em_conv_info *v = NULL;
    size_t n = 0;
    em_err err = { 0 };
    if (em_storage_conv_list(c->w->o.storage, a->key_id, &v, &n, &err))
        return store_failed(c, &err);
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
    em_storage *st = c->w->o.storage;
    em_conv_info *v = NULL;
    em_message *msgs = NULL;
    size_t n = 0, n_msgs = 0;
    em_err err = { 0 };
    int rc = em_storage_message_list(st, a->key_id, id, &msgs, &n_msgs, &err);
    if (rc == EM_ENOENT)
        return not_found(c, id);
    if (rc || em_storage_conv_list(st, a->key_id, &v, &n, &err)) {
        em_storage_messages_free(msgs, n_msgs);
        return store_failed(c, &err);
    }
    json_t *j = NULL;
    for (size_t i = 0; i < n && !j; i++)
        if (v[i].id == id)
            j = conv_json(&v[i]);
    free(v);
    if (!j) {   /* deleted between the two reads */
        em_storage_messages_free(msgs, n_msgs);
        return not_found(c, id);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n_msgs; i++)
        json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:I, s:I}", "id", (json_int_t)msgs[i].id, "role",
                                             msgs[i].role, "content", msgs[i].content, "tokens",
                                             (json_int_t)msgs[i].tokens, "created_ms",
                                             (json_int_t)msgs[i].created_ms));
    em_storage_messages_free(msgs, n_msgs);
    json_object_set_new(j, "messages", arr);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

static int delete_one(web_conn *c, const em_web_auth *a, int64_t id)
{
    em_err err = { 0 };
    int rc = em_storage_conv_delete(c->w->o.storage, a->key_id, id, &err);
    if (rc == EM_ENOENT)
        return not_found(c, id);
    if (rc)
        return store_failed(c, &err);
    json_t *j = json_pack("{s:I, s:s, s:b}", "id", (json_int_t)id, "object", "conversation", "deleted", 1);
    web_respond_json(c, 200, j);
    json_decref(j);
    return 0;
}

/* "/123" -> 123; 0 for anything else (ids start at 1). */
static int64_t parse_id(const char *s)
{
    if (*s++ != '/' || !*s || strlen(s) > 18)
        return 0;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        v = v * 10 + (*s - '0');
    }
    return v;
}

int web_api_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, PREFIX, PREFIX_LEN) != 0 || (p[PREFIX_LEN] && p[PREFIX_LEN] != '/'))
        return 1;
    const char *rest = p + PREFIX_LEN;
    int whole = !*rest || strcmp(rest, "/") == 0;
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
    if (whole) {
        if (c->method == EM_M_GET)
            return list(c, &a);
        em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes GET", PREFIX);
        web_respond_error(c, &e);
        return 0;
    }
    int64_t id = parse_id(rest);
    if (!id) {
        em_web_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no route for %s", p);
        web_respond_error(c, &e);
        return 0;
    }
    if (c->method == EM_M_GET)
        return get_one(c, &a, id);
    if (c->method == EM_M_DELETE)
        return delete_one(c, &a, id);
    em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s/ID takes GET or DELETE", PREFIX);
    web_respond_error(c, &e);
    return 0;
}
