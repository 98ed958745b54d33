/* embeddings.c — /v1/embeddings in OpenAI's shape (embeddings.h): the
 * request's inputs checked and tokenized within bounds, its options read,
 * and the answer framed from the vectors. */
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "web/embeddings.h"

void web_embed_free(web_embed_req *r)
{
    for (size_t i = 0; r->ids && i < r->n; i++)
        free(r->ids[i]);
    free(r->ids);
    free(r->n_ids);
    memset(r, 0, sizeof *r);
}

static int fail(web_embed_req *r, em_web_error *e, int status, const char *param, const char *msg)
{
    web_embed_free(r);
    return em_web_fail(e, status, status == 500 ? "server_error" : "invalid_request_error", NULL, param, "%s", msg);
}

int web_embed_fit(const em_tokenizer *tok, int32_t *ids, size_t *n, uint32_t max, int truncate, const char *param,
                  em_web_error *e)
{
    if (*n <= max)
        return 0;
    if (!truncate)
        return em_web_fail(e, 400, "invalid_request_error", "context_length_exceeded", param, "%s has %zu tokens; "
                           "this model takes at most %u (or ask \"truncate\": true)", param, *n, max);
    if (max > 1 && em_tokenizer_is_special(tok, ids[*n - 1]))
        ids[max - 1] = ids[*n - 1];
    *n = max;
    return 0;
}

/* Input i's ids into r (taken), fitted to max (web_embed_fit). */
static int take(web_embed_req *r, size_t i, int32_t *ids, size_t n, uint32_t max, int truncate,
                const em_tokenizer *tok, em_web_error *e)
{
    char param[48], msg[160];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (n == 0) {
        free(ids);
        snprintf(msg, sizeof msg, "%s is empty: an embedding needs at least one token", param);
        return fail(r, e, 400, param, msg);
    }
    if (web_embed_fit(tok, ids, &n, max, truncate, param, e)) {
        free(ids);
        web_embed_free(r);
        return -1;
    }
    r->ids[i] = ids;
    r->n_ids[i] = (uint32_t)n;
    r->tokens += n;
    if (r->tokens > WEB_EMBED_TOKENS_MAX) {
        snprintf(msg, sizeof msg, "the inputs have more than %d tokens in all", WEB_EMBED_TOKENS_MAX);
        return fail(r, e, 400, "input", msg);
    }
    return 0;
}

/* A token array (JSON integers) as ids: 0, or -1 with e filled. */
static int token_array(const json_t *a, uint32_t n_vocab, const char *param, int32_t **out, size_t *n,
                       em_web_error *e)
{
    size_t k, m = json_array_size(a);
    json_t *v;
    *out = malloc((m ? m : 1) * sizeof **out);
    if (!*out)
        return em_web_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    json_array_foreach(a, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= (json_int_t)n_vocab) {
            free(*out);
            *out = NULL;
            return em_web_fail(e, 400, "invalid_request_error", NULL, param, "%s[%zu] is not a token id of this "
                               "model (0 to %u)", param, k, n_vocab - 1);
        }
        (*out)[k] = (int32_t)id;
    }
    *n = m;
    return 0;
}

int web_embed_parse(const json_t *req, const em_tokenizer *tok, uint32_t n_vocab, uint32_t n_embd,
                    uint32_t max_tokens, web_embed_req *r, em_web_error *e)
{
    memset(r, 0, sizeof *r);
    r->normalize = 1;
    const json_t *in = json_object_get(req, "input"), *fmt = json_object_get(req, "encoding_format");
    const json_t *dims = json_object_get(req, "dimensions"), *pool = json_object_get(req, "pooling");
    const json_t *norm = json_object_get(req, "normalize"), *trunc = json_object_get(req, "truncate");
    char msg[160];
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return fail(r, e, 400, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(f, "base64");
    }
    if (dims && !json_is_null(dims) && (!json_is_integer(dims) || json_integer_value(dims) != (json_int_t)n_embd)) {
        snprintf(msg, sizeof msg, "'dimensions' must be %u, this model's width, or absent: its metadata does not "
                 "say it was trained for shorter vectors", n_embd);
        return fail(r, e, 400, "dimensions", msg);
    }
    if (pool && !json_is_null(pool)) {
        const char *p = json_string_value(pool);
        if (p && !strcmp(p, "mean"))
            r->pooling = EM_POOL_MEAN;
        else if (p && !strcmp(p, "cls"))
            r->pooling = EM_POOL_CLS;
        else if (p && !strcmp(p, "last"))
            r->pooling = EM_POOL_LAST;
        else
            return fail(r, e, 400, "pooling", "'pooling' must be \"mean\", \"cls\" or \"last\"");
    }
    if ((norm && !json_is_null(norm) && !json_is_boolean(norm)) || (trunc && !json_is_null(trunc) &&
                                                                    !json_is_boolean(trunc)))
        return fail(r, e, 400, norm && !json_is_boolean(norm) && !json_is_null(norm) ? "normalize" : "truncate",
                    "'normalize' and 'truncate' must be true or false");
    if (norm && json_is_false(norm))
        r->normalize = 0;
    int truncate = json_is_true(trunc);
    /* the inputs: a string, a token array, or an array of either */
    int one = json_is_string(in) || (json_is_array(in) && json_array_size(in) &&
                                     json_is_integer(json_array_get(in, 0)));
    size_t n = one ? 1 : json_array_size(in);
    if (!in || (!one && !json_is_array(in)))
        return fail(r, e, 400, "input", "'input' must be a string, an array of strings, an array of token ids or "
                    "an array of such arrays");
    if (n == 0)
        return fail(r, e, 400, "input", "'input' is empty");
    if (n > WEB_EMBED_INPUTS_MAX) {
        snprintf(msg, sizeof msg, "'input' has %zu inputs; at most %d are allowed", n, WEB_EMBED_INPUTS_MAX);
        return fail(r, e, 400, "input", msg);
    }
    r->ids = calloc(n, sizeof *r->ids);
    r->n_ids = calloc(n, sizeof *r->n_ids);
    if (!r->ids || !r->n_ids)
        return fail(r, e, 500, NULL, "out of memory");
    r->n = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = one ? in : json_array_get(in, i);
        char param[48];
        snprintf(param, sizeof param, one ? "input" : "input[%zu]", i);
        int32_t *ids = NULL;
        size_t k = 0;
        if (json_is_string(x)) {
            em_err err = { 0 };
            if (!json_string_length(x)) {
                snprintf(msg, sizeof msg, "%s is an empty string", param);
                return fail(r, e, 400, param, msg);
            }
            if (em_tokenizer_encode(tok, json_string_value(x), json_string_length(x), 1, 0, &ids, &k, &err))
                return fail(r, e, err.code == EM_ENOMEM ? 500 : 400, param, err.msg);
        } else if (json_is_array(x)) {
            if (token_array(x, n_vocab, param, &ids, &k, e)) {
                web_embed_free(r);
                return -1;
            }
        } else {
            snprintf(msg, sizeof msg, "%s must be a string or an array of token ids", param);
            return fail(r, e, 400, param, msg);
        }
        if (take(r, i, ids, k, max_tokens, truncate, tok, e))
            return -1;
    }
    return 0;
}

json_t *web_embed_response(const web_embed_req *r, const float *vecs, uint32_t dim, const char *model)
{
    json_t *data = json_array(), *out = NULL;
    char *b64 = NULL;
    size_t cap = ((size_t)dim * 4 + 2) / 3 * 4 + 2;   /* (lws wants a byte past the NUL) */
    if (!data || (r->base64 && !(b64 = malloc(cap))))
        goto done;
    for (size_t i = 0; i < r->n; i++) {
        const float *v = vecs + i * dim;
        json_t *emb;
        if (r->base64) {   /* float32, little-endian (this host's order: x86-64, AArch64) */
            if (lws_b64_encode_string((const char *)v, (int)(dim * sizeof *v), b64, (int)cap) < 0)
                goto done;
            emb = json_string(b64);
        } else {
            emb = json_array();
            for (uint32_t d = 0; emb && d < dim; d++)
                json_array_append_new(emb, json_real(v[d]));
        }
        if (!emb || json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                                          (json_int_t)i, "embedding", emb)))
            goto done;
    }
    out = json_pack("{s:s, s:O, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model", model, "usage",
                    "prompt_tokens", (json_int_t)r->tokens, "total_tokens", (json_int_t)r->tokens);
done:
    json_decref(data);
    free(b64);
    return out;
}
