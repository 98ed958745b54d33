/* rerank.c — /v1/rerank in the shape llama-server, Jina and Cohere clients
 * use (rerank.h): the query and documents checked and tokenized as pairs
 * (a cross-encoder) or apart (an embedding model), the answer sorted by
 * score. */
#include <stdlib.h>
#include <string.h>

#include "web/embeddings.h"
#include "web/rerank.h"

void web_rerank_free(web_rerank_req *r)
{
    for (size_t i = 0; r->ids && i < r->n_seq; i++) {
        free(r->ids[i]);
        if (r->types)
            free(r->types[i]);
    }
    free(r->ids);
    free(r->types);
    free(r->n_ids);
    memset(r, 0, sizeof *r);
}

static int fail(web_rerank_req *r, em_web_error *e, int status, const char *param, const char *fmt, const char *a)
{
    web_rerank_free(r);
    return em_web_fail(e, status, status == 500 ? "server_error" : "invalid_request_error", NULL, param, fmt, a);
}

/* Document i's text (a string, or an object's "text"); NULL when neither. */
static const char *doc_text(const json_t *d, size_t *len)
{
    const json_t *t = json_is_object(d) ? json_object_get(d, "text") : d;
    *len = json_string_length(t);
    return json_string_value(t);
}

/* text's tokens (special ones added when special) at *ids, *n; 0, or -1. */
static int tokens(const em_tokenizer *tok, const char *text, size_t len, int special, int32_t **ids, size_t *n,
                  const char *param, em_web_error *e)
{
    em_err err = { 0 };
    if (em_tokenizer_encode(tok, text, len, special, 0, ids, n, &err))
        return em_web_fail(e, err.code == EM_ENOMEM ? 500 : 400, err.code == EM_ENOMEM ? "server_error" :
                           "invalid_request_error", NULL, param, "%s: %s", param, err.msg);
    return 0;
}

int web_rerank_parse(const json_t *req, const em_tokenizer *tok, int pairs, uint32_t max_tokens, web_rerank_req *r,
                     em_web_error *e)
{
    memset(r, 0, sizeof *r);
    const json_t *q = json_object_get(req, "query"), *docs = json_object_get(req, "documents");
    const json_t *top = json_object_get(req, "top_n"), *ret = json_object_get(req, "return_documents");
    const json_t *trunc = json_object_get(req, "truncate");
    if (!json_is_string(q) || !json_string_length(q))
        return fail(r, e, 400, "query", "%s", "'query' must be a non-empty string");
    if (!json_is_array(docs) || !json_array_size(docs))
        return fail(r, e, 400, "documents", "%s", "'documents' must be a non-empty array of strings or {\"text\"} "
                    "objects");
    if (json_array_size(docs) > WEB_RERANK_DOCS_MAX)
        return em_web_fail(e, 400, "invalid_request_error", NULL, "documents", "'documents' has %zu documents; at "
                           "most %d are allowed", json_array_size(docs), WEB_RERANK_DOCS_MAX);
    if ((ret && !json_is_null(ret) && !json_is_boolean(ret)) || (trunc && !json_is_null(trunc) &&
                                                                 !json_is_boolean(trunc)))
        return fail(r, e, 400, ret && !json_is_boolean(ret) && !json_is_null(ret) ? "return_documents" : "truncate",
                    "%s", "'return_documents' and 'truncate' must be true or false");
    r->n_docs = json_array_size(docs);
    r->docs = docs;
    r->top_n = r->n_docs;
    if (top && !json_is_null(top)) {
        if (!json_is_integer(top) || json_integer_value(top) < 1)
            return fail(r, e, 400, "top_n", "%s", "'top_n' must be a positive integer");
        if ((size_t)json_integer_value(top) < r->n_docs)
            r->top_n = (size_t)json_integer_value(top);
    }
    r->return_docs = json_is_true(ret);
    r->pairs = pairs;
    int truncate = json_is_true(trunc);
    r->n_seq = r->n_docs + !pairs;
    r->ids = calloc(r->n_seq, sizeof *r->ids);
    r->n_ids = calloc(r->n_seq, sizeof *r->n_ids);
    r->types = pairs ? calloc(r->n_seq, sizeof *r->types) : NULL;
    if (!r->ids || !r->n_ids || (pairs && !r->types))
        return fail(r, e, 500, NULL, "%s", "out of memory");
    int32_t *qids = NULL;
    size_t nq = 0, i;
    if (tokens(tok, json_string_value(q), json_string_length(q), 1, &qids, &nq, "query", e)) {
        web_rerank_free(r);
        return -1;
    }
    const json_t *d;
    json_array_foreach(docs, i, d) {
        char param[48];
        size_t len, nd = 0;
        const char *text = doc_text(d, &len);
        snprintf(param, sizeof param, "documents[%zu]", i);
        if (!text || !len) {
            free(qids);
            return fail(r, e, 400, param, "%s must be a non-empty string or an object with a non-empty \"text\"",
                        param);
        }
        int32_t *dids = NULL;
        if (tokens(tok, text, len, !pairs, &dids, &nd, param, e))
            goto bad;
        if (!pairs) {
            r->ids[i + 1] = dids;
            r->n_ids[i + 1] = (uint32_t)nd;
            if (web_embed_fit(tok, dids, &nd, max_tokens, truncate, param, e))
                goto bad;
            r->n_ids[i + 1] = (uint32_t)nd;
            r->tokens += nd;
            continue;
        }
        /* [CLS] query [SEP] document [SEP]: the query's closing token closes the pair too */
        int32_t sep = nq && em_tokenizer_is_special(tok, qids[nq - 1]) ? qids[nq - 1] : -1;
        size_t n = nq + nd + (sep >= 0);
        int32_t *ids = malloc(n * sizeof *ids);
        uint8_t *ty = malloc(n);
        if (!ids || !ty) {
            free(ids);
            free(ty);
            free(dids);
            em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            goto bad;
        }
        memcpy(ids, qids, nq * sizeof *ids);
        memcpy(ids + nq, dids, nd * sizeof *ids);
        if (sep >= 0)
            ids[n - 1] = sep;
        memset(ty, 0, nq);
        memset(ty + nq, 1, n - nq);
        free(dids);
        r->ids[i] = ids;
        r->types[i] = ty;
        if (n > max_tokens && !truncate) {
            em_web_fail(e, 400, "invalid_request_error", "context_length_exceeded", param, "the query and %s have "
                        "%zu tokens; this model takes at most %u (or ask \"truncate\": true)", param, n, max_tokens);
            goto bad;
        }
        if (n > max_tokens && nq + 1 + (sep >= 0) > max_tokens) {
            em_web_fail(e, 400, "invalid_request_error", "context_length_exceeded", "query", "the query has %zu "
                        "tokens: it leaves no room for a document in this model's %u", nq, max_tokens);
            goto bad;
        }
        if (n > max_tokens) {   /* the document's end goes; its closing token stays */
            if (sep >= 0)
                ids[max_tokens - 1] = sep;
            n = max_tokens;
        }
        r->n_ids[i] = (uint32_t)n;
        r->tokens += n;
    }
    if (!pairs) {
        r->ids[0] = qids;
        r->n_ids[0] = (uint32_t)nq;
        qids = NULL;
        if (web_embed_fit(tok, r->ids[0], &nq, max_tokens, truncate, "query", e))
            goto bad;
        r->n_ids[0] = (uint32_t)nq;
        r->tokens += nq;
    }
    free(qids);
    return 0;
bad:
    free(qids);
    web_rerank_free(r);
    return -1;
}

typedef struct {
    size_t i;
    float  s;
} ranked;

static int by_score(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->s < y->s ? 1 : x->s > y->s ? -1 : (x->i > y->i) - (x->i < y->i);
}

json_t *web_rerank_response(const web_rerank_req *r, const float *scores, const char *model)
{
    ranked *o = malloc((r->n_docs ? r->n_docs : 1) * sizeof *o);
    json_t *res = json_array(), *out = NULL;
    if (!o || !res)
        goto done;
    for (size_t i = 0; i < r->n_docs; i++)
        o[i] = (ranked){ i, scores[i] };
    qsort(o, r->n_docs, sizeof *o, by_score);
    for (size_t k = 0; k < r->top_n; k++) {
        json_t *it = json_pack("{s:I, s:f}", "index", (json_int_t)o[k].i, "relevance_score", (double)o[k].s);
        if (it && r->return_docs) {
            size_t len;
            const char *t = doc_text(json_array_get(r->docs, o[k].i), &len);
            json_object_set_new(it, "document", json_pack("{s:s%}", "text", t, len));
        }
        if (!it || json_array_append_new(res, it))
            goto done;
    }
    out = json_pack("{s:s, s:s, s:O, s:s, s:{s:I, s:I}}", "object", "list", "model", model, "results", res, "score",
                    r->pairs ? "classifier" : "cosine", "usage", "prompt_tokens", (json_int_t)r->tokens,
                    "total_tokens", (json_int_t)r->tokens);
done:
    free(o);
    json_decref(res);
    return out;
}
