/* tools.h — tool calling for the one generation path (web/tools.c): how a
 * model's chat template writes a tool call, found by rendering it; a
 * request's tools and tool_choice checked; the grammar every call is
 * generated under (the call format around each tool's JSON Schema); and
 * the parser that splits a generated answer into its text and its calls,
 * piece by piece as it streams. Private to web/ (and its unit test). */
#ifndef EM_WEB_TOOLS_H
#define EM_WEB_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "web/web_int.h"

/* Bounds on what a request may ask (400 past them). */
#define WEB_TOOLS_MAX        128                 /* tools in one request (OpenAI's limit) */
#define WEB_TOOL_SCHEMA_MAX  (64 * 1024)         /* one tool's parameters as compact JSON */
#define WEB_TOOLS_BYTES_MAX  (256 * 1024)        /* all of them */
#define WEB_TOOL_NAME_MAX    64                  /* [A-Za-z0-9_-]{1,64}, as OpenAI */
#define WEB_TOOL_CALLS_MAX   16                  /* calls in one answer (parallel) */

/* A template's call format: the assistant turn of one call reads
 * open NAME mid ARGS close; of two, open N1 mid A1 sep N2 mid A2 close.
 * A call in free text begins where trigger (open's start) appears. A
 * template that writes each call's id (Mistral's) has WEB_TOOL_ID in mid,
 * sep or close where it stands: the id of the call whose name came last,
 * id_len letters and digits that the model writes (ember's answer gives
 * them back as the call's id, so that the next turn renders). */
#define WEB_TOOL_ID '\x01'
typedef struct web_toolfmt {
    int   ok;              /* 0: the template has no format ember can use (why) */
    char  why[256];
    char *open, *mid, *sep, *close, *trigger;   /* sep NULL: one call per answer */
    size_t id_len;         /* 0: the calls have no id */
    char *lead;            /* white space the template writes before a call that begins the answer
                            * (harmony's " to=functions."; NULL: none) */
    /* the same call without its wrapper's tag (open minus the trigger,
     * close down to its closing brackets), as small models often write it:
     * a call too when an answer begins with it, with any white space
     * between JSON's tokens and in a Markdown code fence or not (NULL: open
     * has no tag, or is no JSON object); bare_key: bare_open up to its
     * first key's colon, what starts such an answer */
    char *bare_open, *bare_close, *bare_key;
} web_toolfmt;

/* Whether s[0..n), the start of an answer, begins a bare call of key (a
 * web_toolfmt's bare_key): white space, maybe a code fence's opening
 * ("```json"), then key with any white space between its characters. The
 * bytes through key's last character (>= 0), -1 when s is too short to
 * say, -2 when it does not. */
long web_tools_bare_start(const char *s, size_t n, const char *key);

/* Render the template (src, len; NULL: the ChatML fallback) with probe
 * conversations and read the format off them. bos and eos are the token
 * texts the template sees; stops (n) are texts that end a turn (the
 * end-of-generation tokens'), cut from the close. Never fails: f->ok 0 and
 * f->why say what is missing. web_toolfmt_free releases it. */
void web_toolfmt_detect(const char *src, size_t len, const char *bos, const char *eos, const char *const *stops,
                        size_t n_stops, web_toolfmt *f);
void web_toolfmt_free(web_toolfmt *f);

/* A request's tools. */
enum { WEB_TOOL_AUTO, WEB_TOOL_NONE, WEB_TOOL_REQUIRED, WEB_TOOL_NAMED };
typedef struct web_tools {
    size_t        n;                 /* 0: the request has no tools */
    const char   *name[WEB_TOOLS_MAX];          /* borrowed from the request */
    const json_t *params[WEB_TOOLS_MAX];        /* each tool's parameters schema (borrowed) */
    json_t       *render;            /* the tools as the template sees them (new reference; NULL: none) */
    int           choice;            /* WEB_TOOL_* */
    size_t        named;             /* WEB_TOOL_NAMED: which tool */
    int           parallel;          /* several calls in one answer */
} web_tools;

/* OpenAI's tools, tool_choice and parallel_tool_calls of req (borrowed;
 * chat completions' shape: {"type": "function", "function": {"name",
 * "description", "parameters", "strict"}}) into t; 0, or -1 with e filled
 * (400 naming the parameter). t->n 0 when there are none. */
int  web_tools_parse(const json_t *req, web_tools *t, em_web_error *e);
void web_tools_free(web_tools *t);

/* The grammar of the calls t allows in format f, from open to close:
 * each call's name one of the tools (or the named one) and its arguments
 * valid for that tool's schema; several separated by sep when parallel.
 * 0 with *gbnf malloc'd (caller frees) and *len, or -1 with e filled (400
 * naming the tool and the schema's JSON pointer). */
int  web_tools_gbnf(const web_toolfmt *f, const web_tools *t, char **gbnf, size_t *len, em_web_error *e);

/* The split of an answer into text and calls, fed as it comes. */
typedef struct {
    void (*text)(void *ctx, const char *s, size_t n);          /* the answer's text */
    /* call index begins; id: the one the model wrote (NULL: the format has
     * none). A format whose id follows the arguments has them held back
     * and given right after this, when the id has come. */
    void (*call)(void *ctx, uint32_t index, const char *name, const char *id);
    void (*args)(void *ctx, uint32_t index, const char *s, size_t n);   /* its arguments, in pieces */
} web_toolsink;

typedef struct {
    const web_toolfmt *f;
    int      state;
    em_buf   hold;        /* bytes not yet decided */
    em_buf   name;
    em_buf   held;        /* a call's arguments until its id comes (held_on) */
    int      held_on;
    char     id[24];      /* the call's id as read */
    uint32_t n_calls;     /* calls begun */
    uint32_t n_done;      /* calls whose arguments are whole */
    int      depth, in_str, esc, closed;
    int      at_start;    /* nothing but white space came yet */
    int      bare;        /* the call is the bare form */
} web_toolparse;

/* f borrowed (must outlive p). text_first: whether the answer may begin
 * with text (auto), else it begins with a call (required, named). */
void web_toolparse_init(web_toolparse *p, const web_toolfmt *f, int text_first);
void web_toolparse_feed(web_toolparse *p, const char *s, size_t n, const web_toolsink *k, void *ctx);
/* The answer ended: text held back goes out. 1 when it ended with its
 * calls whole (the close seen, or nothing but it left), 0 when a call was
 * cut off or there was none. */
int  web_toolparse_finish(web_toolparse *p, const web_toolsink *k, void *ctx);
void web_toolparse_free(web_toolparse *p);

#endif
