/* api_req.h — one OpenAI-style generation request's state beside its
 * connection (openai.c's), shared with the doors that frame the same
 * generation their own way (responses.c, messages.c). Private to web/. */
#ifndef EM_WEB_API_REQ_H
#define EM_WEB_API_REQ_H

#include "web/tools.h"
#include "web/web_int.h"

/* The other doors read gen, stream, id, auth and created, and hang their
 * own state on door. */
typedef struct api_req {
    int         kind;              /* WEB_API_* */
    int         chat;              /* chat.completion, else text_completion */
    int         stream, include_usage;
    char        id[64];
    int64_t     created;
    em_web_auth auth;
    em_gen     *gen;
    em_buf      delta[EM_GEN_MAX_N];
    int         role_sent[EM_GEN_MAX_N], finish_sent[EM_GEN_MAX_N];
    json_t     *lp_all[EM_GEN_MAX_N];   /* every entry so far (as text[]) */
    size_t      text_off[EM_GEN_MAX_N]; /* completions' text_offset of the next token */
    /* the response cache: a hit's whole response (no generation), or a
     * miss to store once done */
    char       *cached;
    int         store;
    unsigned char key[EM_STORAGE_CACHE_KEY];
    web_tools   tools;             /* chat: the request's tools (borrowing from its body: kept) */
    json_t     *body;
    json_t     *tvars;             /* chat: the template's extra variables (NULL: none) */
    int         hide_reasoning;    /* "include_reasoning": false */
    uint32_t    budget;            /* "reasoning_budget" (0: none) */
    size_t      rsent[EM_GEN_MAX_N];   /* a stream's reasoning bytes seen (a chunk for new ones) */
    em_buf      rdelta;            /* a stream's reasoning not yet sent */
    /* another door's framing of the same generation (responses.c,
     * messages.c): its state, freed with the request, and its pump, run
     * where web_openai_pump would frame chat chunks */
    void       *door;
    void      (*door_free)(void *door);
    void      (*door_pump)(web_conn *c);
} api_req;

/* a, started, becomes c's: door (its state, freed by door_free with the
 * request; NULL: none) and door_pump frame it; c is woken as events come,
 * and a stream's headers go out. */
void web_api_go(web_conn *c, api_req *a, void *door, void (*door_free)(void *), void (*door_pump)(web_conn *c));

/* One Server-Sent Event "event: TYPE" whose data is j (stolen) with its
 * "type" member set to type; c NULL: none sent (a whole answer built by the
 * same code), j freed. */
void web_sse_event(web_conn *c, const char *type, json_t *j);

/* What choice 0 produced since the last pump, in order: its reasoning, its
 * text (a->delta[0], taken), then each tool call's start (call: its chat
 * delta, with id and function.name) and argument pieces, each handed to
 * piece (s/n its text; call NULL but for WEB_PIECE_CALL). */
enum { WEB_PIECE_REASONING, WEB_PIECE_TEXT, WEB_PIECE_CALL, WEB_PIECE_ARGS };
void web_api_take(api_req *a, void (*piece)(void *ctx, int kind, const char *s, size_t n, const json_t *call),
                  void *ctx);

#endif
