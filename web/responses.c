/* responses.c — OpenAI's Responses API: POST /v1/responses (a whole
 * response, or streamed as the event sequence the official SDK parses:
 * response.created, .in_progress, output items added, their deltas and
 * .done events, response.completed / .incomplete / .failed), GET and
 * DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items. A request
 * is translated into a chat completions body (input items to messages,
 * instructions to the system message, function tools, text.format to
 * response_format, previous_response_id to the stored conversation before
 * the input) and runs on the one generation path; only the framing is this
 * file's. Responses are stored per key (store, default true) in the
 * ledger's database so that previous_response_id continues a conversation
 * without resending it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "web/api_req.h"

/* What the output is made of, as it streams. */
enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL };

typedef struct {
    em_web  *w;
    json_t  *resp;          /* the response object (status, output, usage filled at the end) */
    json_t  *conv;          /* the conversation to store: the messages before and the input, not the instructions */
    json_t  *input;         /* the input items as given (input_items) */
    int      store;
    int      seq;           /* the stream's sequence_number */
    int      cur;           /* ITEM_*: the item open now */
    json_t  *item;          /* it (a reference into resp's output) */
    em_buf   text;          /* its text so far (message, reasoning) */
} resp_door;

static void door_free(void *p)
{
    resp_door *d = p;
    if (!d)
        return;
    json_decref(d->resp);
    json_decref(d->conv);
    json_decref(d->input);
    em_buf_free(&d->text);
    free(d);
}

/* ---- the request, as a chat completions body ------------------------------------ */

static const char *const builtin_tools[] = { "web_search", "web_search_preview", "file_search", "computer_use_preview",
                                             "computer_use", "code_interpreter", "image_generation", "mcp",
                                             "local_shell", "shell", "custom", "apply_patch" };

/* An item's or message's content as text: a string, or text parts
 * (input_text, output_text, text). NULL with e filled. */
static json_t *content_text(json_t *c, const char *param, em_web_error *e)
{
    if (json_is_string(c))
        return json_incref(c);
    if (!json_is_array(c)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: 'content' must be a string or an array of "
                    "text parts", param);
        return NULL;
    }
    em_buf b = { 0 };
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text")) ||
            !json_is_string(t)) {
            em_buf_free(&b);
            em_web_fail(e, 400, "invalid_request_error", "unsupported_content", param,
                        "%s: only text content parts are supported (input_text, output_text), not '%s'", param,
                        type ? type : "?");
            return NULL;
        }
        em_buf_add(&b, json_string_value(t), json_string_length(t));
    }
    json_t *s = json_stringn(b.s ? b.s : "", b.n);
    em_buf_free(&b);
    if (!s)
        em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s: the text is not valid UTF-8", param);
    return s;
}

/* The input (a string, or items) appended to msgs as chat messages. */
static int input_messages(json_t *input, json_t *msgs, em_web_error *e)
{
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "input",
                           "'input' must be a string or an array of input items");
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        char param[48];
        snprintf(param, sizeof param, "input[%zu]", i);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        if (!json_is_object(it))
            return em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s must be an input item object", param);
        if ((!type && role) || (type && !strcmp(type, "message"))) {
            json_t *text = content_text(json_object_get(it, "content"), param, e);
            if (!text)
                return -1;
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                          strcmp(role, "developer"))) {
                json_decref(text);
                return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                                   "%s: 'role' must be user, assistant, system or developer", param);
            }
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", text));
        } else if (type && !strcmp(type, "function_call")) {
            const char *id = json_string_value(json_object_get(it, "call_id"));
            const char *name = json_string_value(json_object_get(it, "name"));
            json_t *args = json_object_get(it, "arguments");
            if (!id || !name || !json_is_string(args))
                return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                                   "%s: a function_call needs 'call_id', 'name' and 'arguments' (a string)", param);
            json_t *call = json_pack("{s:s, s:s, s:{s:s, s:O}}", "id", id, "type", "function", "function", "name", name,
                                     "arguments", args);
            /* calls in a row are one assistant turn's */
            const char *lr = json_string_value(json_object_get(last, "role"));
            if (lr && !strcmp(lr, "assistant")) {
                json_t *tc = json_object_get(last, "tool_calls");
                if (!tc)
                    json_object_set_new(last, "tool_calls", tc = json_array());
                json_array_append_new(tc, call);
            } else {
                json_array_append_new(msgs, json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls",
                                                      call));
            }
        } else if (type && !strcmp(type, "function_call_output")) {
            json_t *id = json_object_get(it, "call_id");
            json_t *out = json_object_get(it, "output");
            json_t *text = json_is_string(id) ? content_text(out, param, e) : NULL;
            if (!text)
                return e->status ? -1 : em_web_fail(e, 400, "invalid_request_error", NULL, param,
                                                    "%s: a function_call_output needs 'call_id'", param);
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content",
                                                  text));
        } else if (type && !strcmp(type, "reasoning")) {
            continue;   /* earlier reasoning is not fed back (as the templates drop it) */
        } else {
            return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", param,
                               "%s: input items of type '%s' are not supported (message, function_call, "
                               "function_call_output, reasoning)", param, type ? type : "?");
        }
    }
    return 0;
}

/* Responses' flat function tools as chat's, and the tool_choice. */
static int tools_of(json_t *req, json_t *chat, em_web_error *e)
{
    json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "tools", "'tools' must be an array of tools");
        json_t *out = json_array(), *t;
        size_t i;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            char param[48];
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!type || strcmp(type, "function")) {
                json_decref(out);
                for (size_t k = 0; type && k < sizeof builtin_tools / sizeof builtin_tools[0]; k++)
                    if (!strncmp(type, builtin_tools[k], strlen(builtin_tools[k])))
                        return em_web_fail(e, 400, "invalid_request_error", "unsupported_tool", param,
                                           "%s: the built-in tool '%s' is not available on this server (function "
                                           "tools only)", param, type);
                return em_web_fail(e, 400, "invalid_request_error", "unsupported_tool", param,
                                   "%s: tools of type '%s' are not supported (function)", param, type ? type : "?");
            }
            json_t *fn = json_object();
            const char *keys[] = { "name", "description", "parameters", "strict" };
            for (int k = 0; k < 4; k++)
                if (json_object_get(t, keys[k]))
                    json_object_set(fn, keys[k], json_object_get(t, keys[k]));
            json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(chat, "tools", out);
    }
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
    } else if (json_is_object(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        json_t *name = json_object_get(tc, "name");
        if (!type || strcmp(type, "function") || !json_is_string(name))
            return em_web_fail(e, 400, "invalid_request_error", "unsupported_tool", "tool_choice",
                               "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
                               "\"name\": ...}");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                                           name));
    } else if (tc && !json_is_null(tc)) {
        return em_web_fail(e, 400, "invalid_request_error", NULL, "tool_choice", "'tool_choice' must be a string or "
                           "an object");
    }
    if (json_object_get(req, "parallel_tool_calls"))
        json_object_set(chat, "parallel_tool_calls", json_object_get(req, "parallel_tool_calls"));
    return 0;
}

/* text.format as chat's response_format. */
static int format_of(json_t *req, json_t *chat, em_web_error *e)
{
    json_t *text = json_object_get(req, "text"), *f = json_object_get(text, "format");
    if (text && !json_is_null(text) && !json_is_object(text))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "text", "'text' must be an object");
    if (!f || json_is_null(f))
        return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "text.format", "'text.format' needs a 'type'");
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "text.format",
                           "'text.format' type '%s' is not supported (text, json_object, json_schema)", type);
    json_t *js = json_object();
    const char *keys[] = { "name", "schema", "strict" };
    for (int k = 0; k < 3; k++)
        if (json_object_get(f, keys[k]))
            json_object_set(js, keys[k], json_object_get(f, keys[k]));
    json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
    return 0;
}

/* The chat completions body of a Responses request (a new reference), the
 * conversation to store into *conv; NULL with e filled. */
static json_t *to_chat(em_web *w, json_t *req, const em_web_auth *auth, json_t **conv, em_web_error *e)
{
    *conv = NULL;
    if (!json_is_object(req)) {
        em_web_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        return NULL;
    }
    static const char *const refused[] = { "prompt", "conversation", "background" };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        json_t *v = json_object_get(req, refused[k]);
        if (v && !json_is_null(v) && !json_is_false(v)) {
            em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", refused[k],
                        "'%s' is not supported by this server", refused[k]);
            return NULL;
        }
    }
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_t *prev = json_object_get(req, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        char *stored = NULL, *in = NULL, *resp = NULL;
        em_err err = { 0 };
        int rc = !json_is_string(prev) ? EM_EINVAL
               : !w->o.storage ? EM_ENOENT
               : em_storage_response_get(w->o.storage, json_string_value(prev), auth->key_id, &stored, &in, &resp,
                                         &err);
        json_t *before = stored ? json_loads(stored, 0, NULL) : NULL;
        free(stored);
        free(in);
        free(resp);
        if (rc || !json_is_array(before)) {
            json_decref(before);
            json_decref(chat);
            if (rc == EM_ENOENT || rc == EM_EINVAL || !rc)
                em_web_fail(e, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id",
                            "Previous response with id '%.64s' not found.", json_is_string(prev) ?
                            json_string_value(prev) : "?");
            else
                em_web_fail(e, 503, "server_error", NULL, NULL, "the response store failed: %s", err.msg);
            return NULL;
        }
        json_array_extend(msgs, before);
        json_decref(before);
    }
    json_t *input = json_object_get(req, "input");
    if (!input || input_messages(input, msgs, e)) {
        if (!input)
            em_web_fail(e, 400, "invalid_request_error", NULL, "input", "'input' is required");
        json_decref(chat);
        return NULL;
    }
    *conv = json_deep_copy(msgs);
    json_t *ins = json_object_get(req, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins)) {
            json_decref(chat);
            json_decref(*conv);
            *conv = NULL;
            em_web_fail(e, 400, "invalid_request_error", NULL, "instructions", "'instructions' must be a string");
            return NULL;
        }
        json_array_insert_new(msgs, 0, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    }
    if (tools_of(req, chat, e) || format_of(req, chat, e)) {
        json_decref(chat);
        json_decref(*conv);
        *conv = NULL;
        return NULL;
    }
    static const char *const same[] = { "model", "temperature", "top_p", "stream", "user", "seed", "priority" };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (json_object_get(req, same[k]))
            json_object_set(chat, same[k], json_object_get(req, same[k]));
    if (json_object_get(req, "max_output_tokens"))
        json_object_set(chat, "max_completion_tokens", json_object_get(req, "max_output_tokens"));
    json_t *eff = json_object_get(json_object_get(req, "reasoning"), "effort");
    if (json_is_string(eff))
        json_object_set(chat, "reasoning_effort", eff);
    return chat;
}

/* ---- the response object ----------------------------------------------------------- */

static json_t *or_null(json_t *v)
{
    return v ? json_incref(v) : json_null();
}

/* The response as created: status in_progress, no output yet. */
static json_t *skeleton(em_web *w, const api_req *a, json_t *req)
{
    json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    json_t *text = json_object_get(req, "text");
    json_t *pt = json_object_get(req, "parallel_tool_calls");
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:o, s:o, s:s, s:[], s:b, s:o, s:o, s:o, s:o, s:o, s:o, "
                          "s:o, s:s, s:n, s:o, s:o}",
                          "id", a->id, "object", "response", "created_at", (json_int_t)a->created, "status",
                          "in_progress", "error", "incomplete_details", "instructions",
                          or_null(json_object_get(req, "instructions")), "max_output_tokens",
                          or_null(json_object_get(req, "max_output_tokens")), "model", w->model_id, "output",
                          "parallel_tool_calls", !json_is_false(pt), "previous_response_id",
                          or_null(json_object_get(req, "previous_response_id")), "reasoning",
                          json_pack("{s:o, s:n}", "effort", or_null(json_object_get(json_object_get(req, "reasoning"),
                                                                                    "effort")), "summary"),
                          "store", json_boolean(!json_is_false(json_object_get(req, "store"))), "temperature",
                          or_null(json_object_get(req, "temperature")), "text",
                          text ? json_incref(text) : json_pack("{s:{s:s}}", "format", "type", "text"), "tool_choice",
                          tc ? json_incref(tc) : json_string("auto"), "tools",
                          tools ? json_incref(tools) : json_array(),
                          "truncation", "disabled", "usage", "top_p", or_null(json_object_get(req, "top_p")),
                          "metadata", json_is_object(json_object_get(req, "metadata"))
                                          ? json_incref(json_object_get(req, "metadata")) : json_object());
    json_object_set(r, "user", or_null(json_object_get(req, "user")));
    return r;
}

/* A stream's event (web_sse_event) with its sequence_number. */
static void event(web_conn *c, resp_door *d, const char *type, json_t *j)
{
    json_object_set_new(j, "sequence_number", json_integer(d->seq++));
    web_sse_event(c, type, j);
}

static json_t *output(resp_door *d)
{
    return json_object_get(d->resp, "output");
}

/* Close the item open now: its text into it, its .done events (c NULL: a
 * plain response, no events). */
static void close_item(web_conn *c, resp_door *d)
{
    if (d->cur == ITEM_NONE)
        return;
    json_t *it = d->item;
    size_t oi = json_array_size(output(d)) - 1;
    const char *iid = json_string_value(json_object_get(it, "id"));
    json_t *t = json_stringn(d->text.s ? d->text.s : "", d->text.n);
    if (d->cur == ITEM_MESSAGE) {
        json_t *part = json_pack("{s:s, s:O, s:[], s:[]}", "type", "output_text", "text", t, "annotations", "logprobs");
        event(c, d, "response.output_text.done", json_pack("{s:s, s:I, s:i, s:O, s:[]}", "item_id", iid, "output_index",
                                                          (json_int_t)oi, "content_index", 0, "text", t, "logprobs"));
        event(c, d, "response.content_part.done", json_pack("{s:s, s:I, s:i, s:O}", "item_id", iid, "output_index",
                                                           (json_int_t)oi, "content_index", 0, "part", part));
        json_array_append_new(json_object_get(it, "content"), part);
    } else if (d->cur == ITEM_REASONING) {
        event(c, d, "response.reasoning_text.done", json_pack("{s:s, s:I, s:i, s:O}", "item_id", iid, "output_index",
                                                             (json_int_t)oi, "content_index", 0, "text", t));
        json_array_append_new(json_object_get(it, "content"), json_pack("{s:s, s:O}", "type", "reasoning_text",
                                                                        "text", t));
    } else {
        json_object_set(it, "arguments", t);
        event(c, d, "response.function_call_arguments.done",
              json_pack("{s:s, s:I, s:O, s:O}", "item_id", iid, "output_index", (json_int_t)oi, "arguments", t, "name",
                        json_object_get(it, "name")));
    }
    json_decref(t);
    json_object_set_new(it, "status", json_string("completed"));
    event(c, d, "response.output_item.done", json_pack("{s:I, s:O}", "output_index", (json_int_t)oi, "item", it));
    d->cur = ITEM_NONE;
    d->item = NULL;
    em_buf_reset(&d->text);
}

/* Open an item of kind (its .added events); call: the call's chat delta. */
static void open_item(web_conn *c, resp_door *d, int kind, json_t *call)
{
    close_item(c, d);
    char id[64];
    json_t *it;
    if (kind == ITEM_MESSAGE) {
        web_new_id(d->w, "msg_", id, sizeof id);
        it = json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", id, "type", "message", "status", "in_progress", "role",
                       "assistant", "content");
    } else if (kind == ITEM_REASONING) {
        web_new_id(d->w, "rs_", id, sizeof id);
        it = json_pack("{s:s, s:s, s:[], s:[], s:s}", "id", id, "type", "reasoning", "summary", "content", "status",
                       "in_progress");
    } else {
        web_new_id(d->w, "fc_", id, sizeof id);
        json_t *fn = json_object_get(call, "function");
        it = json_pack("{s:s, s:s, s:O, s:O, s:s, s:s}", "id", id, "type", "function_call", "call_id",
                       json_object_get(call, "id"), "name", json_object_get(fn, "name"), "arguments", "", "status",
                       "in_progress");
    }
    size_t oi = json_array_size(output(d));
    json_array_append_new(output(d), it);
    d->item = it;
    d->cur = kind;
    event(c, d, "response.output_item.added", json_pack("{s:I, s:O}", "output_index", (json_int_t)oi, "item", it));
    if (kind == ITEM_MESSAGE) {
        json_t *part = json_pack("{s:s, s:s, s:[], s:[]}", "type", "output_text", "text", "", "annotations",
                                 "logprobs");
        event(c, d, "response.content_part.added", json_pack("{s:s, s:I, s:i, s:o}", "item_id", id, "output_index",
                                                            (json_int_t)oi, "content_index", 0, "part", part));
    }
}

/* One piece of what the generation produced (web_api_take) into the
 * output (and, streaming, its events), opening the item it belongs to. */
typedef struct {
    web_conn  *c;
    resp_door *d;
} take_ctx;

static void piece(void *ctx, int kind, const char *s, size_t n, const json_t *call)
{
    take_ctx *t = ctx;
    resp_door *d = t->d;
    static const int item[] = { ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL, ITEM_CALL };
    if (kind == WEB_PIECE_CALL || (kind != WEB_PIECE_ARGS && d->cur != item[kind]))
        open_item(t->c, d, item[kind], (json_t *)call);
    if (kind == WEB_PIECE_CALL || (kind == WEB_PIECE_ARGS && d->cur != ITEM_CALL))
        return;
    static const char *const ev[] = { "response.reasoning_text.delta", "response.output_text.delta", "",
                                      "response.function_call_arguments.delta" };
    json_t *j = json_pack("{s:O, s:I, s:s%}", "item_id", json_object_get(d->item, "id"), "output_index",
                          (json_int_t)(json_array_size(output(d)) - 1), "delta", s, n);
    if (kind != WEB_PIECE_ARGS)
        json_object_set_new(j, "content_index", json_integer(0));
    if (kind == WEB_PIECE_TEXT)
        json_object_set_new(j, "logprobs", json_array());
    em_buf_add(&d->text, s, n);
    event(t->c, d, ev[kind], j);
}

/* The generation is done: the last item closed, status, usage; calls cut
 * off dropped (only whole calls are the gen's). */
static void finish(web_conn *c, api_req *a, resp_door *d)
{
    if (json_array_size(output(d)) == 0 && d->cur == ITEM_NONE)
        open_item(c, d, ITEM_MESSAGE, NULL);   /* an empty answer is still a message */
    close_item(c, d);
    const json_t *whole = em_gen_tool_calls(a->gen, 0);
    size_t i;
    json_t *it;
    json_array_foreach(output(d), i, it) {   /* a call the gen did not keep was cut off */
        const char *type = json_string_value(json_object_get(it, "type"));
        if (strcmp(type, "function_call"))
            continue;
        int kept = 0;
        size_t k;
        json_t *wc;
        json_array_foreach((json_t *)whole, k, wc)
            kept |= json_equal(json_object_get(wc, "id"), json_object_get(it, "call_id"));
        if (!kept)
            json_object_set_new(it, "status", json_string("incomplete"));
    }
    uint32_t prompt, cached, comp;
    em_gen_usage(a->gen, &prompt, &cached, &comp);
    json_object_set_new(d->resp, "usage", json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens",
                                                    (json_int_t)prompt, "input_tokens_details", "cached_tokens",
                                                    (json_int_t)cached, "output_tokens", (json_int_t)comp,
                                                    "output_tokens_details", "reasoning_tokens",
                                                    (json_int_t)em_gen_reasoning_tokens(a->gen), "total_tokens",
                                                    (json_int_t)(prompt + comp)));
    int cut = em_gen_finish(a->gen, 0) == EM_FINISH_LENGTH;
    json_object_set_new(d->resp, "status", json_string(cut ? "incomplete" : "completed"));
    if (cut)
        json_object_set_new(d->resp, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
}

/* The answer as chat messages after the conversation (what
 * previous_response_id continues): the text, the calls. */
static void store(em_web *w, api_req *a, resp_door *d)
{
    if (!d->store || !w->o.storage)
        return;
    json_t *calls = json_array(), *it;
    em_buf text = { 0 };
    size_t i;
    json_array_foreach(output(d), i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (!strcmp(type, "message")) {
            json_t *p = json_array_get(json_object_get(it, "content"), 0);
            json_t *pt = json_object_get(p, "text");
            em_buf_add(&text, json_string_value(pt), json_string_length(pt));
        } else if (!strcmp(type, "function_call") && !strcmp(json_string_value(json_object_get(it, "status")),
                                                              "completed")) {
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(it, "call_id"),
                                                   "type", "function", "function", "name", json_object_get(it, "name"),
                                                   "arguments", json_object_get(it, "arguments")));
        }
    }
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", text.s ? text.s : "", text.n);
    if (json_array_size(calls))
        json_object_set(m, "tool_calls", calls);
    json_decref(calls);
    em_buf_free(&text);
    json_array_append_new(d->conv, m);
    char *conv = json_dumps(d->conv, JSON_COMPACT), *resp = json_dumps(d->resp, JSON_COMPACT),
         *input = json_dumps(d->input, JSON_COMPACT | JSON_ENCODE_ANY);
    em_err err = { 0 };
    int rc = conv && resp && input ? em_storage_response_put(w->o.storage, a->id, a->auth.key_id, em_storage_now_ms(),
                                                             conv, input, resp, &err) : EM_ENOMEM;
    if (rc && rc != EM_ESTATE)   /* (EM_ESTATE: store_content is off, which keeps no chat text) */
        em_log(EM_LOG_WARN, a->id, "the response was not stored: %s", rc == EM_ENOMEM ? "out of memory" : err.msg);
    free(conv);
    free(resp);
    free(input);
}

static void pump(web_conn *c)
{
    api_req *a = c->api;
    resp_door *d = a->door;
    web_conn *sc = a->stream ? c : NULL;
    if (a->stream && d->seq == 0) {
        event(sc, d, "response.created", json_pack("{s:O}", "response", d->resp));
        event(sc, d, "response.in_progress", json_pack("{s:O}", "response", d->resp));
    }
    int all = em_gen_pump(a->gen, a->delta);
    take_ctx tc = { sc, d };
    web_api_take(a, piece, &tc);
    if (!all)
        return;
    em_web_error e = { 0 };
    if (em_gen_failed(a->gen, &e)) {
        if (!a->stream) {
            web_respond_error(c, &e);
            return;
        }
        close_item(sc, d);
        json_object_set_new(d->resp, "status", json_string("failed"));
        json_object_set_new(d->resp, "error", json_pack("{s:s, s:s}", "code", e.code ? e.code : "server_error",
                                                        "message", e.message));
        event(sc, d, "response.failed", json_pack("{s:O}", "response", d->resp));
        web_stream_end(c);
        return;
    }
    finish(sc, a, d);
    store(c->w, a, d);
    if (!a->stream) {
        web_respond_json(c, 200, d->resp);
        return;
    }
    const char *done = !strcmp(json_string_value(json_object_get(d->resp, "status")), "incomplete")
                           ? "response.incomplete" : "response.completed";
    event(sc, d, done, json_pack("{s:O}", "response", d->resp));
    web_stream_end(c);
}

static void create(web_conn *c)
{
    em_web *w = c->w;
    em_web_error e = { 0 };
    api_req *a = NULL;
    json_t *req = NULL, *chat = NULL, *conv = NULL;
    em_web_auth auth;
    char id[64];
    req = web_door_begin(c, "resp_", id, sizeof id, &auth, &e);
    if (!e.status)
        chat = to_chat(w, req, &auth, &conv, &e);
    json_t *st = json_object_get(req, "store");
    if (!e.status && st && !json_is_boolean(st) && !json_is_null(st))
        em_web_fail(&e, 400, "invalid_request_error", NULL, "store", "'store' must be true or false");
    /* (a refusal so far goes through too: its ledger row is the generation path's) */
    if (web_api_start(w, chat, WEB_API_RESPONSES, &auth, c->addr, id, NULL, &a, &e)) {
        if (!strncmp(e.param, "messages", 8))   /* the chat body's messages are the input (and what came before) */
            snprintf(e.param, sizeof e.param, "input");
        goto fail;
    }
    resp_door *d = calloc(1, sizeof *d);
    if (!d || !(d->resp = skeleton(w, a, req))) {
        free(d);
        web_openai_free(a);
        em_web_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    d->w = w;
    d->conv = conv;
    conv = NULL;
    d->input = json_incref(json_object_get(req, "input"));
    d->store = !json_is_false(st);
    web_api_go(c, a, d, door_free, pump);
    json_decref(req);
    json_decref(chat);
    return;
fail:
    json_decref(req);
    json_decref(chat);
    json_decref(conv);
    web_respond_error(c, &e);
}

/* ---- stored responses --------------------------------------------------------------- */

static const web_store resp_store = { "response", "No response found with id '%s'.", NULL, 0, NULL, NULL };

static void get_one(web_conn *c, const char *id, int items)
{
    em_web_error e = { 0 };
    em_web_auth auth;
    if (web_auth(c->w, c, &auth, &e)) {
        web_respond_error(c, &e);
        return;
    }
    char *conv = NULL, *input = NULL, *resp = NULL;
    em_err err = { 0 };
    int rc = c->w->o.storage ? em_storage_response_get(c->w->o.storage, id, auth.key_id, &conv, &input, &resp, &err)
                             : EM_ENOENT;
    if (rc) {
        web_storage_fail(&e, rc, &err, &resp_store, id, NULL);
        web_respond_error(c, &e);
        return;
    }
    json_t *j = json_loads(items ? input : resp, JSON_DECODE_ANY, NULL);
    if (items) {   /* the input items as given (a string: one user message) */
        json_t *list = json_array(), *it;
        if (json_is_string(j))
            json_array_append_new(list, json_pack("{s:s, s:s, s:[{s:s, s:O}]}", "type", "message", "role", "user",
                                                  "content", "type", "input_text", "text", j));
        size_t i;
        json_array_foreach(json_is_array(j) ? j : NULL, i, it)
            json_array_append(list, it);
        json_decref(j);
        web_respond_list(c, list, NULL, NULL, 0);
    } else {
        web_respond_json(c, 200, j);
        json_decref(j);
    }
    free(conv);
    free(input);
    free(resp);
}

static void delete_one(web_conn *c, const char *id)
{
    em_web_error e = { 0 };
    em_web_auth auth;
    if (web_auth(c->w, c, &auth, &e)) {
        web_respond_error(c, &e);
        return;
    }
    em_err err = { 0 };
    int rc = c->w->o.storage ? em_storage_response_delete(c->w->o.storage, id, auth.key_id, &err) : EM_ENOENT;
    if (rc) {
        web_storage_fail(&e, rc, &err, &resp_store, id, NULL);
        web_respond_error(c, &e);
        return;
    }
    json_t *j = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response.deleted", "deleted", 1);
    web_respond_json(c, 200, j);
    json_decref(j);
}

int web_responses_route(web_conn *c)
{
    const char *p = c->path;
    if (strncmp(p, "/v1/responses", 13) || (p[13] && p[13] != '/'))
        return 1;
    em_web_error e = { 0 };
    const char *id = p[13] ? p + 14 : NULL;
    const char *slash = id ? strchr(id, '/') : NULL;
    char one[128] = "";
    if (id)
        snprintf(one, sizeof one, "%.*s", (int)(slash ? (size_t)(slash - id) : strlen(id)), id);
    if (!id && c->method == EM_M_POST)
        create(c);
    else if (id && one[0] && !slash && c->method == EM_M_GET)
        get_one(c, one, 0);
    else if (id && one[0] && slash && !strcmp(slash, "/input_items") && c->method == EM_M_GET)
        get_one(c, one, 1);
    else if (id && one[0] && !slash && c->method == EM_M_DELETE)
        delete_one(c, one);
    else {
        em_web_fail(&e, id && !one[0] ? 404 : 405, "invalid_request_error", id && !one[0] ? "not_found"
                    : "method_not_allowed", NULL, "%s %s is not a route of the Responses API",
                    web_method_name(c->method), p);
        web_respond_error(c, &e);
    }
    return 0;
}
