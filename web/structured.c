/* structured.c — structured output for the one generation path: a
 * request's OpenAI "response_format" (json_object, json_schema) or ember's
 * "grammar" (GBNF text) or "regex" becomes one GBNF text, compiled once per
 * distinct text and kept with its token-mask cache in a small registry, so
 * requests with the same schema share both; each choice of a request gets
 * its own matcher, handed to the scheduler as an em_constraint. The
 * grammar vocabulary (the tokenizer's pieces as a byte trie) is built at
 * the first structured request.
 *
 * Lifetimes: the scheduler outlives em_web (firmware/cmd_serve.c destroys
 * the web first), so what a constraint uses — its grammar entry, the
 * vocabulary — is reference counted and freed by the last user, the
 * registry being one of them. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "core/log.h"
#include "web/reasoning.h"
#include "web/tools.h"
#include "web/web_int.h"

#define REGISTRY_MAX  16                 /* distinct grammars kept compiled */
#define CACHE_BYTES   (32u << 20)        /* masks cached per grammar */

typedef struct {
    atomic_int  refs;
    em_gvocab  *v;
    uint32_t    words;                   /* mask words */
} vocab_ref;

struct web_grammar {
    atomic_int   refs;                   /* the registry's, each constraint's, a request's */
    uint64_t     hash;
    char        *text;
    size_t       len;
    em_grammar  *g;
    em_gcache   *cache;
    vocab_ref   *vr;
    uint64_t     last_used;
};

struct web_structured {
    pthread_mutex_t mu;
    vocab_ref      *vr;                  /* built at the first use */
    web_grammar    *reg[REGISTRY_MAX];
    uint64_t        clock;
};

static void vocab_unref(vocab_ref *vr)
{
    if (vr && atomic_fetch_sub(&vr->refs, 1) == 1) {
        em_gvocab_destroy(vr->v);
        free(vr);
    }
}

void web_grammar_unref(web_grammar *e)
{
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    em_gcache_destroy(e->cache);
    em_grammar_destroy(e->g);
    vocab_unref(e->vr);
    free(e->text);
    free(e);
}

int web_structured_create(web_structured **out)
{
    web_structured *s = calloc(1, sizeof *s);
    if (!s)
        return EM_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return 0;
}

void web_structured_destroy(web_structured *s)
{
    if (!s)
        return;
    for (int i = 0; i < REGISTRY_MAX; i++)
        web_grammar_unref(s->reg[i]);
    vocab_unref(s->vr);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The request's structure as GBNF (*gbnf malloc'd; NULL when it asks for
 * none) and the parameter it came from. */
static int request_gbnf(const json_t *req, char **gbnf, size_t *len, const char **param, em_web_error *e)
{
    *gbnf = NULL;
    *len = 0;
    *param = NULL;
    json_t *rf = json_object_get(req, "response_format"), *gr = json_object_get(req, "grammar"),
           *re = json_object_get(req, "regex");
    const char *type = NULL;
    if (rf && !json_is_null(rf)) {
        type = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !type)
            return em_web_fail(e, 400, "invalid_request_error", NULL, "response_format",
                               "'response_format' must be an object with a 'type'");
        if (strcmp(type, "text") == 0)
            type = NULL;
        else if (strcmp(type, "json_object") && strcmp(type, "json_schema"))
            return em_web_fail(e, 400, "invalid_request_error", "unsupported_parameter", "response_format",
                               "'response_format' type '%s' is not supported (text, json_object, json_schema)",
                               type);
    }
    int n = (type != NULL) + (gr && !json_is_null(gr)) + (re && !json_is_null(re));
    if (n > 1)
        return em_web_fail(e, 400, "invalid_request_error", NULL, type ? "response_format" : "grammar",
                           "give one of 'response_format' (json_object, json_schema), 'grammar' and 'regex'");
    em_err err = { 0 };
    int rc = 0;
    if (gr && !json_is_null(gr)) {
        *param = "grammar";
        if (!json_is_string(gr) || !json_string_length(gr))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "grammar",
                               "'grammar' must be a non-empty string of GBNF rules (root ::= ...)");
        if (!(*gbnf = malloc(json_string_length(gr) + 1)))
            return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*gbnf, json_string_value(gr), json_string_length(gr) + 1);
        *len = json_string_length(gr);
        return 0;
    }
    if (re && !json_is_null(re)) {
        *param = "regex";
        if (!json_is_string(re) || !json_string_length(re))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "regex", "'regex' must be a non-empty string");
        /* the whole output matches (a JSON Schema pattern, unanchored, only has to occur) */
        size_t rn = json_string_length(re);
        char *anchored = malloc(rn + 5);
        if (!anchored)
            return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        anchored[0] = '^';
        anchored[1] = '(';
        memcpy(anchored + 2, json_string_value(re), rn);
        memcpy(anchored + 2 + rn, ")$", 3);
        rc = em_regex_to_gbnf(anchored, rn + 4, gbnf, len, &err);
        free(anchored);
    } else if (type && strcmp(type, "json_object") == 0) {
        *param = "response_format";
        rc = em_json_object_gbnf(NULL, gbnf, len, &err);
    } else if (type) {
        *param = "response_format";
        json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
        json_t *strict = json_object_get(js, "strict");
        if (!json_is_object(js) || !json_is_object(schema))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "response_format",
                               "'response_format' of type json_schema needs 'json_schema': {'name': ..., "
                               "'schema': {...}}");
        if (strict && !json_is_boolean(strict))
            return em_web_fail(e, 400, "invalid_request_error", NULL, "response_format",
                               "'json_schema.strict' must be true or false");
        rc = em_json_schema_to_gbnf(schema, NULL, gbnf, len, &err);
    } else {
        return 0;
    }
    if (rc) {
        free(*gbnf);
        *gbnf = NULL;
        if (rc == EM_ENOMEM)
            return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return em_web_fail(e, 400, "invalid_request_error", "invalid_grammar", *param, "%s", err.msg);
    }
    return 0;
}

/* The grammar vocabulary, built at the first use (under s->mu). */
static int vocab_once(em_web *w, web_structured *s, em_err *err)
{
    if (s->vr)
        return 0;
    vocab_ref *vr = calloc(1, sizeof *vr);
    if (!vr)
        return EM_ENOMEM;
    int rc = em_gvocab_from_tokenizer(w->o.tok, &vr->v, err);
    if (rc) {
        free(vr);
        return rc;
    }
    atomic_init(&vr->refs, 1);
    vr->words = em_gvocab_mask_words(vr->v);
    s->vr = vr;
    return 0;
}

int web_structured_asked(const json_t *req)
{
    json_t *rf = json_object_get(req, "response_format"), *gr = json_object_get(req, "grammar"),
           *re = json_object_get(req, "regex");
    const char *type = json_string_value(json_object_get(rf, "type"));
    return (rf && !json_is_null(rf) && !(type && !strcmp(type, "text"))) || (gr && !json_is_null(gr)) ||
           (re && !json_is_null(re));
}

int web_structured_get(em_web *w, const json_t *req, web_grammar **out, em_web_error *e)
{
    *out = NULL;
    char *text;
    size_t len;
    const char *param;
    if (request_gbnf(req, &text, &len, &param, e))
        return -1;
    if (!text)
        return 0;
    return web_structured_text(w, text, len, param, out, e);
}

int web_structured_text(em_web *w, char *text, size_t len, const char *param, web_grammar **out, em_web_error *e)
{
    *out = NULL;
    web_structured *s = w->structured;
    uint64_t h = XXH3_64bits(text, len);
    em_err err = { 0 };
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    s->clock++;
    for (int i = 0; i < REGISTRY_MAX; i++) {
        web_grammar *g = s->reg[i];
        if (g && g->hash == h && g->len == len && memcmp(g->text, text, len) == 0) {
            atomic_fetch_add(&g->refs, 1);
            g->last_used = s->clock;
            *out = g;
            break;
        }
    }
    if (!*out)
        rc = vocab_once(w, s, &err);
    web_grammar *g = NULL;
    if (!*out && !rc) {
        g = calloc(1, sizeof *g);
        if (!g)
            rc = EM_ENOMEM;
        else if (!(rc = em_grammar_compile(text, len, NULL, &g->g, &err)) &&
                 !(rc = em_gcache_create(g->g, s->vr->v, CACHE_BYTES, &g->cache, &err))) {
            atomic_init(&g->refs, 2);   /* the registry's and the caller's */
            g->hash = h;
            g->text = text;
            g->len = len;
            text = NULL;
            g->vr = s->vr;
            atomic_fetch_add(&s->vr->refs, 1);
            g->last_used = s->clock;
            int slot = 0;   /* an empty slot, else the least recently used */
            for (int i = 0; i < REGISTRY_MAX; i++) {
                if (!s->reg[i]) {
                    slot = i;
                    break;
                }
                if (s->reg[i]->last_used < s->reg[slot]->last_used)
                    slot = i;
            }
            web_grammar_unref(s->reg[slot]);   /* constraints using it keep it alive */
            s->reg[slot] = g;
            *out = g;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (rc && g) {
        em_gcache_destroy(g->cache);
        em_grammar_destroy(g->g);
        free(g);
    }
    free(text);
    if (rc == EM_ENOMEM)
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc)
        return em_web_fail(e, 400, "invalid_request_error", "invalid_grammar", param, "%s", err.msg);
    return 0;
}

/* ---- one choice's matcher as a scheduler constraint ---------------------------- */


/* A lazy constraint (a trigger) lets every token through until the text
 * generated so far contains the trigger, or begins (after white space)
 * with the start trigger; from there the grammar applies, fed the trigger
 * and what followed it in that token. */
#define TRIGGER_MAX 64

typedef struct {
    web_grammar *g;
    em_gmatch   *m;
    uint32_t     words;                  /* mask words */
    int          waiting;                /* the trigger has not come */
    char         trigger[TRIGGER_MAX];
    char         tail[2 * TRIGGER_MAX];  /* the last bytes generated while waiting */
    size_t       n_tail;
    char         start[TRIGGER_MAX];     /* a bare call's key (tools.h); "": none */
    char         head[2 * TRIGGER_MAX];  /* the output so far, while it may still begin with it */
    size_t       n_head;
    int          start_live;
} con_ctx;

static int con_allowed(void *ctx, uint32_t *allow, em_err *err)
{
    con_ctx *c = ctx;
    if (c->waiting) {
        memset(allow, 0xff, c->words * sizeof *allow);
        return 0;
    }
    return em_gmatch_allowed(c->m, c->g->vr->v, c->g->cache, allow, err);
}

/* While waiting: token id's bytes onto the tail; when the trigger is in
 * it, the grammar starts there. */
static int con_wait(con_ctx *c, int32_t id, em_err *err)
{
    uint32_t n;
    const char *b = em_gvocab_token_bytes(c->g->vr->v, (uint32_t)id, &n);
    size_t tn = strlen(c->trigger);
    if (c->start_live) {   /* the output so far, whole, may begin a bare call */
        if (c->n_head + n > sizeof c->head) {
            c->start_live = 0;   /* too long a start to be one */
        } else {
            memcpy(c->head + c->n_head, b, n);
            c->n_head += n;
            long r = web_tools_bare_start(c->head, c->n_head, c->start);
            c->start_live = r == -1;
            if (r >= 0) {
                c->waiting = 0;
                int rc = em_gmatch_accept(c->m, c->head, c->n_head);
                return rc ? em_err_set(err, rc, "the tool call's grammar refused the token that began the call "
                                       "(%d)", id) : 0;
            }
        }
    }
    while (n) {
        size_t room = sizeof c->tail - c->n_tail, take = n < room ? n : room;
        memcpy(c->tail + c->n_tail, b, take);
        c->n_tail += take;
        b += take;
        n -= (uint32_t)take;
        const char *t = memmem(c->tail, c->n_tail, c->trigger, tn);
        if (t) {
            c->waiting = 0;
            size_t at = (size_t)(t - c->tail);
            int rc = em_gmatch_accept(c->m, t, c->n_tail - at);
            if (!rc && n)
                rc = em_gmatch_accept(c->m, b, n);
            return rc ? em_err_set(err, rc, "the tool call's grammar refused the token that began the call (%d)",
                                   id) : 0;
        }
        if (c->n_tail >= tn) {   /* keep the bytes a trigger could still end with */
            memmove(c->tail, c->tail + c->n_tail - (tn - 1), tn - 1);
            c->n_tail = tn - 1;
        }
    }
    return 0;
}

static int con_accept(void *ctx, int32_t id, em_err *err)
{
    con_ctx *c = ctx;
    if (c->waiting)
        return con_wait(c, id, err);
    int rc = em_gmatch_accept_token(c->m, c->g->vr->v, (uint32_t)id);
    return rc ? em_err_set(err, rc, "the grammar refused token %d, which its mask allowed", id) : 0;
}

static int con_can_end(void *ctx)
{
    con_ctx *c = ctx;
    return c->waiting || em_gmatch_can_end(c->m);
}

static int con_done(void *ctx)
{
    con_ctx *c = ctx;
    return !c->waiting && em_gmatch_done(c->m);
}

static void con_destroy(void *ctx)
{
    con_ctx *c = ctx;
    em_gmatch_destroy(c->m);
    web_grammar_unref(c->g);
    free(c);
}

int web_grammar_constraint(web_grammar *g, uint32_t n_vocab, const char *trigger, const char *start,
                           em_constraint *out, em_err *err)
{
    if ((trigger && (!trigger[0] || strlen(trigger) >= TRIGGER_MAX)) || (start && strlen(start) >= TRIGGER_MAX))
        return em_err_set(err, EM_EINVAL, "a grammar's trigger must be 1 to %d bytes", TRIGGER_MAX - 1);
    *out = (em_constraint){ 0 };
    if (g->vr->words > (n_vocab + 31) / 32)
        return em_err_set(err, EM_EINVAL, "the tokenizer has more tokens than the model's %u logits", n_vocab);
    con_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return em_err_set(err, EM_ENOMEM, "out of memory");
    int rc = em_gmatch_create(g->g, &c->m, err);
    if (rc) {
        free(c);
        return rc;
    }
    c->g = g;
    c->words = (n_vocab + 31) / 32;
    if (trigger) {
        c->waiting = 1;
        snprintf(c->trigger, sizeof c->trigger, "%s", trigger);
        snprintf(c->start, sizeof c->start, "%s", start ? start : "");
        c->start_live = c->start[0] != 0;
    }
    atomic_fetch_add(&g->refs, 1);
    *out = (em_constraint){ c, con_allowed, con_accept, con_can_end, con_done, con_destroy };
    return 0;
}

/* ---- a reasoning budget around another constraint --------------------------------- */

/* Counts the tokens of the think block an output begins with; once there
 * are budget of them the block is closed: only tokens that spell on the
 * close tag and a blank line may come (nothing may end the output
 * meanwhile), then the output goes on free. The inner constraint (a tool
 * call's grammar) sees every token and its mask applies too. */
typedef struct {
    em_constraint inner;
    vocab_ref    *vr;
    web_think     th;
    web_thinkfmt  fmt;
    uint32_t      budget, used;
    char          force[WEB_THINK_TAG_MAX + 2];   /* what closing writes */
    size_t        forced;      /* bytes of it written while forcing */
    int           forcing;
    uint32_t      words;
} budget_ctx;

static int budget_allowed(void *ctx, uint32_t *allow, em_err *err)
{
    budget_ctx *b = ctx;
    if (b->inner.ctx) {
        int rc = b->inner.allowed(b->inner.ctx, allow, err);
        if (rc)
            return rc;
    } else {
        memset(allow, 0xff, b->words * sizeof *allow);
    }
    if (!b->forcing)
        return 0;
    const char *rest = b->force + b->forced;
    size_t rn = strlen(rest);
    uint32_t n_vocab = em_gvocab_n_vocab(b->vr->v);
    for (uint32_t id = 0; id < n_vocab; id++) {   /* a prefix of what is left of the tag */
        uint32_t len;
        const char *t = em_gvocab_token_bytes(b->vr->v, id, &len);
        if (!len || len > rn || memcmp(t, rest, len))
            allow[id / 32] &= ~(1u << (id % 32));
    }
    for (uint32_t id = n_vocab; id < b->words * 32; id++)
        allow[id / 32] &= ~(1u << (id % 32));
    return 0;
}

static int budget_accept(void *ctx, int32_t id, em_err *err)
{
    budget_ctx *b = ctx;
    if (b->inner.ctx) {
        int rc = b->inner.accept(b->inner.ctx, id, err);
        if (rc)
            return rc;
    }
    uint32_t len;
    const char *t = em_gvocab_token_bytes(b->vr->v, (uint32_t)id, &len);
    em_buf r = { 0 }, a = { 0 };
    int in = web_think_feed(&b->th, t, len, &r, &a);
    em_buf_free(&r);
    em_buf_free(&a);
    if (b->forcing) {
        b->forced += len;
        if (b->forced >= strlen(b->force))
            b->forcing = 0;
    } else if (in && web_think_inside(&b->th) && ++b->used >= b->budget) {
        b->forcing = 1;   /* the budget is spent: the block is closed from the next token on */
        b->forced = 0;
    }
    return 0;
}

static int budget_can_end(void *ctx)
{
    budget_ctx *b = ctx;
    return !b->forcing && (!b->inner.ctx || b->inner.can_end(b->inner.ctx));
}

static int budget_done(void *ctx)
{
    budget_ctx *b = ctx;
    return !b->forcing && b->inner.ctx && b->inner.done(b->inner.ctx);
}

static void budget_destroy(void *ctx)
{
    budget_ctx *b = ctx;
    web_constraint_free(&b->inner);
    web_think_free(&b->th);
    vocab_unref(b->vr);
    free(b);
}

int web_budget_constraint(em_web *w, const web_thinkfmt *f, int inside, uint32_t budget, uint32_t n_vocab,
                          em_constraint *inner, em_constraint *out, em_err *err)
{
    *out = (em_constraint){ 0 };
    web_structured *s = w->structured;
    budget_ctx *b = calloc(1, sizeof *b);
    if (!b)
        return em_err_set(err, EM_ENOMEM, "out of memory");
    pthread_mutex_lock(&s->mu);
    int rc = vocab_once(w, s, err);
    if (!rc) {
        b->vr = s->vr;
        atomic_fetch_add(&s->vr->refs, 1);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        free(b);
        return rc == EM_ENOMEM ? em_err_set(err, rc, "out of memory") : rc;
    }
    if (b->vr->words > (n_vocab + 31) / 32) {
        vocab_unref(b->vr);
        free(b);
        return em_err_set(err, EM_EINVAL, "the tokenizer has more tokens than the model's %u logits", n_vocab);
    }
    b->fmt = *f;
    web_think_init(&b->th, &b->fmt, inside);
    /* what is forced: the close tag and the blank line models write after it */
    snprintf(b->force, sizeof b->force, "%s\n\n", f->close);
    b->budget = budget;
    b->words = (n_vocab + 31) / 32;
    b->inner = *inner;   /* taken */
    *inner = (em_constraint){ 0 };
    *out = (em_constraint){ b, budget_allowed, budget_accept, budget_can_end, budget_done, budget_destroy };
    return 0;
}

void web_constraint_free(em_constraint *c)
{
    if (c->ctx && c->destroy)
        c->destroy(c->ctx);
    c->ctx = NULL;
}
