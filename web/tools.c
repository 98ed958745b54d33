/* tools.c — tool calling (tools.h): the call format read off the model's own
 * chat template by rendering probe conversations (no model names: what the
 * template writes is the format), the request's tools checked, the grammar
 * a call is generated under (so that every call ember returns parses and
 * validates against its tool's schema), and the streaming split of an
 * answer into its text and its calls. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/json_schema.h"
#include "core/tmpl/chat_tmpl.h"
#include "web/tools.h"

/* ---- the format, from the template ------------------------------------------- */

#define PROBE_A   "ember_probe_a"
#define PROBE_B   "ember_probe_b"
#define PROBE_ARG "ember_probe_arg"
#define PROBE_ID  "a1b2c3d4e"     /* 9 alphanumerics: templates that check ids accept it */
#define PROBE_ID2 "f5g6h7i8j"
#define PROBE_TEXT "Ember probe text."

static json_t *probe_call(const char *id, const char *name, const char *val)
{
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s}}}", "id", id, "type", "function", "function", "name", name,
                     "arguments", PROBE_ARG, val);
}

static json_t *probe_tools(void)
{
    json_t *t = json_array();
    const char *names[2] = { PROBE_A, PROBE_B };
    for (int i = 0; i < 2; i++)
        json_array_append_new(t, json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}", "type", "function",
                                           "function", "name", names[i], "description", "a probe", "parameters",
                                           "type", "object", "properties", PROBE_ARG, "type", "string",
                                           "required", PROBE_ARG));
    return t;
}

/* The template's text for [user, assistant with calls (0..2)] (calls 0:
 * the generation prompt after the user turn). NULL when it fails. */
static char *render_probe(const char *src, size_t len, const char *bos, const char *eos, int calls,
                          const char *content, size_t *out_len)
{
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "What is the probe?");
    if (calls) {
        json_t *tc = json_array();
        json_array_append_new(tc, probe_call(PROBE_ID, PROBE_A, "ember_val_a"));
        if (calls > 1)
            json_array_append_new(tc, probe_call(PROBE_ID2, PROBE_B, "ember_val_b"));
        json_array_append_new(msgs, json_pack("{s:s, s:s, s:o}", "role", "assistant", "content", content,
                                              "tool_calls", tc));
    }
    json_t *tools = probe_tools();
    char *out = NULL;
    em_err err = { 0 };
    if (em_chat_render(src, len, msgs, calls == 0, bos, eos, tools, NULL, &out, out_len, &err))
        out = NULL;
    json_decref(msgs);
    json_decref(tools);
    return out;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Where the JSON value starting at s[0] ('{') ends: the index after its
 * closing brace, or 0 when it does not close within n. */
static size_t json_end(const char *s, size_t n)
{
    int depth = 0, in_str = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

/* One call's pieces in an assistant text a (after the generation prompt):
 * the name's place, and the arguments' [start, end). 0 when not found as
 * a JSON object of the probe's arguments. */
static int find_call(const char *a, size_t n, size_t from, const char *name, const char *val, size_t *name_at,
                     size_t *args_at, size_t *args_end, char *why, size_t cap)
{
    const char *p = memmem(a + from, n - from, name, strlen(name));
    if (!p) {
        snprintf(why, cap, "the chat template does not render an assistant message's tool_calls");
        return 0;
    }
    *name_at = (size_t)(p - a);
    size_t after = *name_at + strlen(name);
    const char *k = memmem(a + after, n - after, "\"" PROBE_ARG "\"", strlen(PROBE_ARG) + 2);
    size_t b = k ? (size_t)(k - a) : 0;
    while (b > after && a[b] != '{')
        b--;
    size_t e = k && a[b] == '{' ? json_end(a + b, n - b) : 0;
    json_t *got = e ? json_loadb(a + b, e, 0, NULL) : NULL;
    json_t *want = json_pack("{s:s}", PROBE_ARG, val);
    int same = got && json_equal(got, want);
    json_decref(got);
    json_decref(want);
    if (!same) {
        snprintf(why, cap, "the chat template does not render a tool call's arguments as a JSON object after "
                           "its name");
        return 0;
    }
    *args_at = b;
    *args_end = b + e;
    return 1;
}

/* The probe ids in a render (s, *n; NUL-terminated) replaced by WEB_TOOL_ID. */
static void mark_ids(char *s, size_t *n)
{
    if (!s)
        return;
    const char *ids[2] = { PROBE_ID, PROBE_ID2 };
    for (int k = 0; k < 2; k++) {
        size_t idn = strlen(ids[k]);
        char *p;
        while ((p = memmem(s, *n, ids[k], idn))) {
            *p = WEB_TOOL_ID;
            memmove(p + 1, p + idn, *n - (size_t)(p + idn - s) + 1);
            *n -= idn - 1;
        }
    }
}

static size_t count_ids(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += *s == WEB_TOOL_ID;
    return n;
}

static size_t common_prefix(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

void web_toolfmt_detect(const char *src, size_t len, const char *bos, const char *eos, const char *const *stops,
                        size_t n_stops, web_toolfmt *f)
{
    memset(f, 0, sizeof *f);
    size_t ng = 0, n1 = 0, n2 = 0;
    char *g = NULL, *p1 = NULL, *p2 = NULL;
    if (!src) {
        snprintf(f->why, sizeof f->why, "the model has no chat template (the ChatML fallback has no tool calls)");
        return;
    }
    if (!(g = render_probe(src, len, bos, eos, 0, "", &ng)) || !(p1 = render_probe(src, len, bos, eos, 1, "", &n1))) {
        snprintf(f->why, sizeof f->why, "the chat template fails to render a conversation with tools and an "
                                        "assistant's tool_calls");
        goto done;
    }
    mark_ids(p1, &n1);   /* a call's id where the template writes one */
    size_t base = common_prefix(g, ng, p1, n1);
    const char *a = p1 + base;
    size_t na = n1 - base, name_at, args_at, args_end;
    if (!find_call(a, na, 0, PROBE_A, "ember_val_a", &name_at, &args_at, &args_end, f->why, sizeof f->why))
        goto done;
    size_t o = 0;   /* the open starts at the first character the model writes */
    /* ... after any text: with content, what stands between it and the call
     * (a template may put more before the content: an empty think block) */
    size_t nc = 0;
    char *pc = render_probe(src, len, bos, eos, 1, PROBE_TEXT, &nc);
    mark_ids(pc, &nc);
    const char *ct = pc ? memmem(pc, nc, PROBE_TEXT, strlen(PROBE_TEXT)) : NULL;
    if (ct) {
        size_t from = (size_t)(ct - pc) + strlen(PROBE_TEXT), cn, dummy1, dummy2;
        char why[256];
        if (find_call(pc, nc, from, PROBE_A, "ember_val_a", &cn, &dummy1, &dummy2, why, sizeof why) &&
            cn - from <= name_at && !memcmp(pc + from, a + name_at - (cn - from), cn - from))
            o = name_at - (cn - from);
    }
    free(pc);
    size_t o0 = o;
    while (o < name_at && isspace((unsigned char)a[o]))
        o++;
    if (o0 == 0 && o > 0 && !(f->lead = dupn(a, o)))   /* (harmony's " to=functions.") */
        goto done;
    if (o == name_at) {
        snprintf(f->why, sizeof f->why, "the chat template writes nothing before a tool call's name");
        goto done;
    }
    size_t name_end = name_at + strlen(PROBE_A);
    size_t close_end = na;   /* the close ends where the turn does */
    for (size_t i = 0; i < n_stops; i++) {
        const char *s = stops[i] && stops[i][0] ? memmem(a + args_end, na - args_end, stops[i], strlen(stops[i]))
                                                : NULL;
        if (s && (size_t)(s - a) < close_end)
            close_end = (size_t)(s - a);
    }
    while (close_end > args_end && isspace((unsigned char)a[close_end - 1]))
        close_end--;
    f->open = dupn(a + o, name_at - o);
    f->mid = dupn(a + name_end, args_at - name_end);
    f->close = dupn(a + args_end, close_end - args_end);
    if (memchr(a, WEB_TOOL_ID, name_at) || count_ids(f->mid) + count_ids(f->close) > 1 ||
        (f->mid && f->mid[0] == WEB_TOOL_ID)) {
        snprintf(f->why, sizeof f->why, "the chat template writes a tool call's id where ember cannot read it "
                                        "(before the call's name, right after it, or twice)");
        goto done;
    }
    if (count_ids(f->mid) + count_ids(f->close))
        f->id_len = strlen(PROBE_ID);
    size_t t = 1;   /* the trigger: open up to its first bracket or line break */
    while (t < strlen(f->open) && !strchr("{[\n", f->open[t]))
        t++;
    while (t > 1 && isspace((unsigned char)f->open[t - 1]))   /* what follows the tag is the grammar's */
        t--;
    f->trigger = dupn(f->open, t);
    if (f->open && f->close && t < strlen(f->open) && !f->id_len) {
        size_t b = t, c = 0;
        while (isspace((unsigned char)f->open[b]))
            b++;
        while (f->close[c] && strchr("}] ", f->close[c]))
            c++;
        if (f->open[b] == '{' && strchr(f->open + b, ':') && c) {   /* a JSON object with a key */
            f->bare_open = dupn(f->open + b, strlen(f->open) - b);
            f->bare_close = dupn(f->close, c);
            f->bare_key = dupn(f->open + b, (size_t)(strchr(f->open + b, ':') - (f->open + b)) + 1);
        }
    }
    if (!f->open || !f->mid || !f->close || !f->trigger) {
        snprintf(f->why, sizeof f->why, "out of memory");
        goto done;
    }
    /* two calls: what stands between them (none: one call per answer) */
    if ((p2 = render_probe(src, len, bos, eos, 2, "", &n2))) {
        mark_ids(p2, &n2);
        size_t b2 = common_prefix(g, ng, p2, n2), x, y, z, bx, by, bz;
        const char *a2 = p2 + b2;
        size_t na2 = n2 - b2;
        char why[256];
        if (find_call(a2, na2, 0, PROBE_A, "ember_val_a", &x, &y, &z, why, sizeof why) &&
            find_call(a2, na2, z, PROBE_B, "ember_val_b", &bx, &by, &bz, why, sizeof why) && bx >= z &&
            by - bx - strlen(PROBE_B) == strlen(f->mid) && !memcmp(a2 + bx + strlen(PROBE_B), f->mid, strlen(f->mid)))
            f->sep = dupn(a2 + z, bx - z);
        if (f->sep && count_ids(f->sep) != count_ids(f->close)) {   /* the id of the call before it, or none */
            snprintf(f->why, sizeof f->why, "the chat template writes a tool call's id between two calls but not "
                                            "after the last");
            goto done;
        }
    }
    f->ok = 1;
done:
    if (!f->ok) {
        char why[sizeof f->why];
        memcpy(why, f->why, sizeof why);
        web_toolfmt_free(f);
        memcpy(f->why, why, sizeof why);
    }
    free(g);
    free(p1);
    free(p2);
}

void web_toolfmt_free(web_toolfmt *f)
{
    free(f->open);
    free(f->mid);
    free(f->sep);
    free(f->close);
    free(f->trigger);
    free(f->lead);
    free(f->bare_open);
    free(f->bare_close);
    free(f->bare_key);
    memset(f, 0, sizeof *f);
}

/* ---- a request's tools ---------------------------------------------------------- */

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > WEB_TOOL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

int web_tools_parse(const json_t *req, web_tools *t, em_web_error *e)
{
    memset(t, 0, sizeof *t);
    json_t *tools = json_object_get(req, "tools"), *choice = json_object_get(req, "tool_choice");
    json_t *par = json_object_get(req, "parallel_tool_calls");
    t->parallel = 1;
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "parallel_tool_calls",
                               "'parallel_tool_calls' must be true or false");
        t->parallel = json_is_true(par);
    }
    if (!tools || json_is_null(tools) || (json_is_array(tools) && !json_array_size(tools))) {
        if (choice && !json_is_null(choice) && !(json_is_string(choice) && !strcmp(json_string_value(choice), "none")))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "tool_choice",
                               "'tool_choice' is only allowed when 'tools' are given");
        return 0;
    }
    if (!json_is_array(tools))
        return em_web_fail(e, 400, "invalid_request_error", NULL, "tools", "'tools' must be an array of tools");
    if (json_array_size(tools) > WEB_TOOLS_MAX)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "tools",
                           "'tools' has %zu tools; at most %d are allowed", json_array_size(tools), WEB_TOOLS_MAX);
    size_t total = 0, i;
    json_t *tool;
    t->render = json_array();
    json_array_foreach(tools, i, tool) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(tool, "type"));
        json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(tool) || !type || strcmp(type, "function")) {
            web_tools_free(t);
            return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                               "%s: only tools of type 'function' are supported here", param);
        }
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(fn) || !name || !name_ok(name)) {
            web_tools_free(t);
            return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                               "%s: 'function.name' must be 1 to %d letters, digits, '_' or '-'", param,
                               WEB_TOOL_NAME_MAX);
        }
        for (size_t k = 0; k < t->n; k++)
            if (!strcmp(t->name[k], name)) {
                web_tools_free(t);
                return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                                   "%s: a second tool named '%s'", param, name);
            }
        json_t *ps = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
            web_tools_free(t);
            return em_web_fail(e, 400, "invalid_request_error", NULL, param,
                               "%s: 'function.strict' must be true or false", param);
        }
        if (ps && !json_is_null(ps)) {
            const char *pt = json_string_value(json_object_get(ps, "type"));
            if (!json_is_object(ps) || (pt && strcmp(pt, "object"))) {
                web_tools_free(t);
                return em_web_fail(e, 400, "invalid_request_error", "invalid_tool_schema", param,
                                   "tool '%s': 'parameters' must be a JSON Schema of an object", name);
            }
            char *s = json_dumps(ps, JSON_COMPACT);
            size_t sn = s ? strlen(s) : 0;
            free(s);
            total += sn;
            if (sn > WEB_TOOL_SCHEMA_MAX || total > WEB_TOOLS_BYTES_MAX) {
                web_tools_free(t);
                return em_web_fail(e, 400, "invalid_request_error", "invalid_tool_schema", param,
                                   "tool '%s': the tools' schemas are over %d bytes each or %d in all", name,
                                   WEB_TOOL_SCHEMA_MAX, WEB_TOOLS_BYTES_MAX);
            }
        } else {
            ps = NULL;
        }
        t->name[t->n] = name;
        t->params[t->n] = ps;
        t->n++;
        /* the template sees the tool as sent, with parameters always there */
        json_t *r = json_deep_copy(tool);
        if (!ps)
            json_object_set_new(json_object_get(r, "function"), "parameters",
                                json_pack("{s:s, s:{}}", "type", "object", "properties"));
        json_array_append_new(t->render, r);
    }
    t->choice = WEB_TOOL_AUTO;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        t->choice = !strcmp(c, "auto") ? WEB_TOOL_AUTO : !strcmp(c, "none") ? WEB_TOOL_NONE
                  : !strcmp(c, "required") ? WEB_TOOL_REQUIRED : -1;
    } else if (json_is_object(choice)) {
        const char *type = json_string_value(json_object_get(choice, "type"));
        const char *name = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
        t->choice = type && !strcmp(type, "function") && name ? WEB_TOOL_NAMED : -1;
        for (size_t k = 0; t->choice == WEB_TOOL_NAMED && k < t->n; k++)
            if (!strcmp(t->name[k], name)) {
                t->named = k;
                name = NULL;
                break;
            }
        if (t->choice == WEB_TOOL_NAMED && name) {
            em_web_fail(e, 400, "invalid_request_error", NULL, "tool_choice",
                        "'tool_choice' names '%s', which is not one of the tools", name);
            web_tools_free(t);
            return -1;
        }
    } else if (choice && !json_is_null(choice)) {
        t->choice = -1;
    }
    if (t->choice < 0) {
        web_tools_free(t);
        return em_web_fail(e, 400, "invalid_request_error", NULL, "tool_choice",
                           "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}");
    }
    return 0;
}

void web_tools_free(web_tools *t)
{
    json_decref(t->render);
    memset(t, 0, sizeof *t);
}

/* ---- the grammar ------------------------------------------------------------------ */

/* s as one GBNF string literal. */
static void gbnf_literal(em_buf *b, const char *s)
{
    em_buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            em_buf_addf(b, "\\%c", *p);
        else if (*p == '\n')
            em_buf_add(b, "\\n", 2);
        else if (*p == '\r')
            em_buf_add(b, "\\r", 2);
        else if (*p == '\t')
            em_buf_add(b, "\\t", 2);
        else if (*p < 0x20)
            em_buf_addf(b, "\\x%02X", *p);
        else
            em_buf_add(b, p, 1);
    }
    em_buf_add(b, "\"", 1);
}

/* A piece of the format (mid, sep, close) as GBNF: its text, and the
 * call's id where it stands (id_len letters and digits); nothing for "". */
static void gbnf_piece(em_buf *b, const char *s, size_t id_len)
{
    const char *m;
    while ((m = strchr(s, WEB_TOOL_ID))) {
        if (m > s) {
            char *part = dupn(s, (size_t)(m - s));
            gbnf_literal(b, part ? part : "");
            free(part);
        }
        em_buf_addf(b, " [a-zA-Z0-9]{%zu} ", id_len);
        s = m + 1;
    }
    if (*s)
        gbnf_literal(b, s);
}

/* lit as GBNF with JSON's freedom of white space: its tokens (structural
 * characters, whole strings, a lone quote that opens or closes one) with
 * `ws` between them; in_str: lit begins inside a string (its first quote
 * closes it). */
static void gbnf_flex(em_buf *b, const char *lit, int in_str)
{
    int first = 1;
    for (const char *p = lit; *p;) {
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        size_t n = 1;
        int closing = *p == '"' && in_str;
        if (*p == '"' && in_str) {
            in_str = 0;
        } else if (*p == '"') {
            const char *q = strchr(p + 1, '"');
            if (q)
                n = (size_t)(q - p) + 1;
            else
                in_str = 1;
        }
        if (!first || !closing)
            em_buf_add(b, first ? "ws " : " ws ", first ? 3 : 4);
        char tok[128];
        snprintf(tok, sizeof tok, "%.*s", (int)(n < sizeof tok ? n : sizeof tok - 1), p);
        gbnf_literal(b, tok);
        first = 0;
        p += n;
    }
    if (!in_str)
        em_buf_add(b, " ws", 3);
}

/* The alternatives of one call: each allowed tool's name, the mid, its
 * arguments' rule (bare: the mid with free white space). */
static void tool_alternatives(em_buf *b, const web_toolfmt *f, const web_tools *t, int bare)
{
    int first = 1;
    for (size_t i = 0; i < t->n; i++) {
        if (t->choice == WEB_TOOL_NAMED && i != t->named)
            continue;
        em_buf_addf(b, "%s", first ? "" : " | ");
        first = 0;
        gbnf_literal(b, t->name[i]);
        em_buf_add(b, " ", 1);
        if (bare)
            gbnf_flex(b, f->mid, 1);
        else
            gbnf_piece(b, f->mid, f->id_len);
        em_buf_addf(b, " args%zu", i);
    }
}

int web_tools_gbnf(const web_toolfmt *f, const web_tools *t, char **gbnf, size_t *len, em_web_error *e)
{
    *gbnf = NULL;
    const json_t *schemas[WEB_TOOLS_MAX];
    json_t *empty = json_pack("{s:s, s:{}}", "type", "object", "properties");
    for (size_t i = 0; i < t->n; i++)
        schemas[i] = t->params[i] ? t->params[i] : empty;
    char *args = NULL;
    size_t args_len = 0, failed = 0;
    em_err err = { 0 };
    int rc = em_json_schemas_gbnf(schemas, t->n, "args", NULL, &args, &args_len, &failed, &err);
    json_decref(empty);
    if (rc == EM_ENOMEM)
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc) {
        char param[48];
        snprintf(param, sizeof param, "tools[%zu]", failed);
        return em_web_fail(e, 400, "invalid_request_error", "invalid_tool_schema", param,
                           "tool '%s': its parameters schema cannot be enforced: %s", t->name[failed], err.msg);
    }
    em_buf b = { 0 };
    em_buf_add(&b, "root ::= ", 9);
    if (f->lead && t->choice != WEB_TOOL_AUTO) {   /* the answer is the call: as the template begins it */
        gbnf_literal(&b, f->lead);
        em_buf_add(&b, " ", 1);
    }
    em_buf_add(&b, "calls", 5);
    if (f->bare_open && t->choice == WEB_TOOL_AUTO) {   /* what the start trigger begins: one bare call */
        em_buf_addf(&b, "%s", " | [ \\t\\n]* (\"```\" [a-z]{0,12} [ \\t]* \"\\n\")? ");
        gbnf_flex(&b, f->bare_open, 0);
        em_buf_add(&b, " bcall ", 7);
        gbnf_flex(&b, f->bare_close, 0);
        em_buf_addf(&b, "%s", " ([ \\t\\n]* \"```\")?\nbcall ::= ");
        tool_alternatives(&b, f, t, 1);
    }
    em_buf_add(&b, "\ncalls ::= ", 11);
    gbnf_literal(&b, f->open);
    em_buf_add(&b, " call", 5);
    if (t->parallel && f->sep) {
        em_buf_add(&b, " (", 2);
        gbnf_piece(&b, f->sep, f->id_len);
        em_buf_addf(&b, " call){0,%d}", WEB_TOOL_CALLS_MAX - 1);
    }
    em_buf_add(&b, " ", 1);
    gbnf_piece(&b, f->close, f->id_len);
    em_buf_add(&b, "\ncall ::= ", 10);
    tool_alternatives(&b, f, t, 0);
    em_buf_add(&b, "\n", 1);
    em_buf_add(&b, args, args_len);
    free(args);
    if (!b.s) {
        em_buf_free(&b);
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    *gbnf = b.s;
    *len = b.n;
    return 0;
}

/* ---- the answer, split ---------------------------------------------------------------- */

enum { P_TEXT, P_OPEN, P_NAME, P_ARGS, P_AFTER, P_END, P_BOPEN };

/* h[0..n) against a piece of the format lit: with ws, white space free
 * between lit's characters (in lit ignored, in h any amount skipped before
 * each of lit's characters); where lit has WEB_TOOL_ID, the call's id
 * (id_len letters and digits), copied to id (24 bytes). The bytes of h that
 * matched all of lit (>= 0), -1 when h ended first, -2 when they differ. */
static long lit_match(const char *h, size_t n, const char *lit, int ws, size_t id_len, char *id)
{
    size_t i = 0;
    for (const char *l = lit; *l; l++) {
        if (ws && isspace((unsigned char)*l))
            continue;
        while (ws && i < n && isspace((unsigned char)h[i]))
            i++;
        if (*l == WEB_TOOL_ID) {
            for (size_t k = 0; k < id_len; k++, i++) {
                if (i == n)
                    return -1;
                if (!isalnum((unsigned char)h[i]))
                    return -2;
                if (k < 23)
                    id[k] = h[i];
            }
            id[id_len < 23 ? id_len : 23] = 0;
            continue;
        }
        if (i == n)
            return -1;
        if (h[i] != *l)
            return -2;
        i++;
    }
    return (long)i;
}

static long flex(const char *h, size_t n, const char *lit)
{
    return lit_match(h, n, lit, 1, 0, NULL);
}

long web_tools_bare_start(const char *s, size_t n, const char *key)
{
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i < n && s[i] == '`') {   /* a code fence: ``` and a language */
        for (int k = 0; k < 3; k++, i++) {
            if (i == n)
                return -1;
            if (s[i] != '`')
                return -2;
        }
        while (i < n && isalpha((unsigned char)s[i]))
            i++;
        size_t nl = i;
        while (nl < n && (s[nl] == ' ' || s[nl] == '\t'))
            nl++;
        if (nl == n)
            return -1;
        if (s[nl] != '\n')
            return -2;
        i = nl + 1;
    }
    long r = flex(s + i, n - i, key);
    return r < 0 ? r : (long)i + r;
}

void web_toolparse_init(web_toolparse *p, const web_toolfmt *f, int text_first)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->state = text_first ? P_TEXT : P_OPEN;
    p->at_start = text_first && f->bare_open;
}

void web_toolparse_free(web_toolparse *p)
{
    em_buf_free(&p->hold);
    em_buf_free(&p->name);
    em_buf_free(&p->held);
}

static void drop(em_buf *b, size_t n)
{
    memmove(b->s, b->s + n, b->n - n);
    b->n -= n;
    b->s[b->n] = 0;
}

/* The longest end of s[0..n) that begins w. */
static size_t partial_suffix(const char *s, size_t n, const char *w)
{
    size_t wn = strlen(w);
    for (size_t k = wn > n ? n : wn - 1; k > 0; k--)
        if (!memcmp(s + n - k, w, k))
            return k;
    return 0;
}

/* A call whose id came after its arguments: given now, with them. */
static void release(web_toolparse *p, const web_toolsink *k, void *ctx)
{
    if (!p->held_on)
        return;
    p->held_on = 0;
    k->call(ctx, p->n_calls - 1, p->name.s ? p->name.s : "", p->id);
    k->args(ctx, p->n_calls - 1, p->held.s ? p->held.s : "", p->held.n);
    em_buf_reset(&p->held);
}

static int is_prefix(const char *s, size_t n, const char *w)
{
    size_t wn = strlen(w);
    return !memcmp(s, w, n < wn ? n : wn);
}

void web_toolparse_feed(web_toolparse *p, const char *s, size_t n, const web_toolsink *k, void *ctx)
{
    const web_toolfmt *f = p->f;
    em_buf_add(&p->hold, s, n);
    for (int moved = 1; moved && p->hold.n;) {
        moved = 0;
        em_buf *h = &p->hold;
        switch (p->state) {
        case P_TEXT: {
            if (p->at_start) {   /* an answer that begins with the bare call */
                long r = web_tools_bare_start(h->s, h->n, f->bare_key);
                if (r == -1)
                    break;   /* not decided yet */
                p->at_start = 0;
                if (r >= 0) {
                    drop(h, (size_t)r);
                    p->bare = 1;
                    p->state = P_BOPEN;
                    moved = 1;
                    break;
                }
            }
            const char *t = memmem(h->s, h->n, f->trigger, strlen(f->trigger));
            size_t cut = t ? (size_t)(t - h->s) : h->n - partial_suffix(h->s, h->n, f->trigger), keep = cut;
            while (cut > 0 && isspace((unsigned char)h->s[cut - 1]))   /* the space before a call is not text */
                cut--;
            if (cut)
                k->text(ctx, h->s, cut);
            drop(h, t ? keep : cut);
            if (t) {
                p->state = P_OPEN;
                moved = 1;
            }
            break;
        }
        case P_OPEN: {
            size_t on = strlen(f->open);
            while (h->n && isspace((unsigned char)h->s[0]))   /* (the lead: not text) */
                drop(h, 1);
            if (!h->n)
                break;
            if (!is_prefix(h->s, h->n, f->open)) {   /* not a call after all (the grammar rules it out) */
                k->text(ctx, h->s, h->n);
                drop(h, h->n);
                p->state = P_TEXT;
            } else if (h->n >= on) {
                drop(h, on);
                p->state = P_NAME;
                moved = 1;
            }
            break;
        }
        case P_BOPEN: {   /* the rest of the bare open after its key */
            long r = flex(h->s, h->n, f->bare_open + strlen(f->bare_key));
            if (r == -2)
                p->state = P_END;   /* (the grammar rules it out) */
            if (r >= 0) {
                drop(h, (size_t)r);
                p->state = P_NAME;
                moved = 1;
            }
            break;
        }
        case P_NAME: {
            size_t nn, mn;
            const char *mark = p->bare ? NULL : strchr(f->mid, WEB_TOOL_ID);
            if (p->bare) {   /* the name ends at its quote; the mid with free white space */
                const char *q = memchr(h->s, '"', h->n);
                long r = q ? flex(q, h->n - (size_t)(q - h->s), f->mid) : -1;
                if (r == -2)
                    p->state = P_END;
                if (r < 0)
                    break;
                nn = (size_t)(q - h->s);
                mn = (size_t)r;
            } else {   /* the name ends where the mid begins (up to the id in it) */
                const char *m = memmem(h->s, h->n, f->mid, mark ? (size_t)(mark - f->mid) : strlen(f->mid));
                long r = m ? lit_match(m, h->n - (size_t)(m - h->s), f->mid, 0, f->id_len, p->id) : -1;
                if (r == -2)
                    p->state = P_END;   /* (the grammar rules it out) */
                if (r < 0)
                    break;
                nn = (size_t)(m - h->s);
                mn = (size_t)r;
            }
            em_buf_reset(&p->name);
            em_buf_add(&p->name, h->s, nn);
            p->held_on = f->id_len && !mark;   /* the id comes after the arguments */
            if (!p->held_on)
                k->call(ctx, p->n_calls, p->name.s ? p->name.s : "", mark ? p->id : NULL);
            p->n_calls++;
            drop(h, nn + mn);
            p->state = P_ARGS;
            p->depth = p->in_str = p->esc = 0;
            moved = 1;
            break;
        }
        case P_ARGS: {
            size_t i = 0, end = 0;
            while (p->bare && !p->depth && i < h->n && isspace((unsigned char)h->s[i]))
                i++;   /* (white space before the arguments: not theirs) */
            drop(h, i);
            i = 0;
            for (; i < h->n && !end; i++) {
                char c = h->s[i];
                if (p->in_str) {
                    if (p->esc)
                        p->esc = 0;
                    else if (c == '\\')
                        p->esc = 1;
                    else if (c == '"')
                        p->in_str = 0;
                } else if (c == '"') {
                    p->in_str = 1;
                } else if (c == '{' || c == '[') {
                    p->depth++;
                } else if ((c == '}' || c == ']') && --p->depth == 0) {
                    end = i + 1;
                }
            }
            if (p->held_on)
                em_buf_add(&p->held, h->s, i);
            else
                k->args(ctx, p->n_calls - 1, h->s, i);
            drop(h, i);
            if (end) {
                p->n_done++;
                p->state = P_AFTER;
                moved = 1;
            }
            break;
        }
        case P_AFTER: {
            const char *close = p->bare ? f->bare_close : f->close, *sep = p->bare ? NULL : f->sep;
            if (p->bare) {   /* a bare call ends at its close (a fence after it is not text) */
                long r = flex(h->s, h->n, close);
                if (r != -1) {
                    p->closed = r >= 0;
                    p->state = P_END;
                    moved = 1;
                }
                break;
            }
            long rs = sep ? lit_match(h->s, h->n, sep, 0, f->id_len, p->id) : -2;
            long rc = rs == -2 ? lit_match(h->s, h->n, close, 0, f->id_len, p->id) : -1;
            if (rs >= 0 || rc >= 0) {
                release(p, k, ctx);
                drop(h, (size_t)(rs >= 0 ? rs : rc));
                p->closed = rs < 0;
                p->state = rs >= 0 ? P_NAME : P_END;
                moved = rs >= 0;
            }
            break;
        }
        default:   /* after the close: nothing may follow (the grammar's end) */
            drop(h, h->n);
        }
    }
}

int web_toolparse_finish(web_toolparse *p, const web_toolsink *k, void *ctx)
{
    em_buf *h = &p->hold;
    if (p->state == P_TEXT && h->n)
        k->text(ctx, h->s, h->n);
    if (p->state == P_AFTER && !p->bare && lit_match(h->s, h->n, p->f->close, 0, p->f->id_len, p->id) >= 0) {
        release(p, k, ctx);
        p->closed = 1;
    }
    em_buf_reset(h);
    return p->n_calls > 0 && p->closed && p->n_done == p->n_calls;
}
