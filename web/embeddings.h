/* embeddings.h — the /v1/embeddings request and response in OpenAI's
 * shape (web/embeddings.c): the inputs (a string, strings, token ids or
 * arrays of them) checked and tokenized within bounds, the options
 * (encoding_format, dimensions, and ember's pooling, normalize and
 * truncate), and the answer framed from the vectors (floats, or base64 of
 * little-endian float32 as the official SDKs ask by default). Private to
 * web/ (and its unit test). */
#ifndef EM_WEB_EMBEDDINGS_H
#define EM_WEB_EMBEDDINGS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/model/model.h"
#include "core/text/tokenizer.h"
#include "web/web_int.h"

#define WEB_EMBED_INPUTS_MAX  2048        /* inputs in one request (OpenAI's limit) */
#define WEB_EMBED_TOKENS_MAX  300000      /* tokens of all of them (OpenAI's limit) */

typedef struct {
    size_t     n;            /* inputs */
    int32_t  **ids;          /* [n] each input's tokens (malloc'd) */
    uint32_t  *n_ids;        /* [n] */
    uint64_t   tokens;       /* all of them */
    int        base64;       /* encoding_format "base64" */
    em_pooling pooling;      /* "pooling" (EM_POOL_NONE: the model's own) */
    int        normalize;    /* "normalize" (default true): unit length */
} web_embed_req;

/* req's embedding inputs and options (borrowed) into r, tokenized with tok
 * (special tokens added as the vocabulary asks, strings never parsed for
 * special tokens). n_vocab bounds token ids, n_embd is the vectors' width
 * (dimensions must be absent or equal it: GGUF says nothing of shortened
 * vectors), max_tokens the most one input may have: a longer one is a 400
 * naming input[i], unless "truncate": true cuts it (keeping its last token
 * when the vocabulary ends inputs with one, as [SEP]). 0, or -1 with e
 * filled (400 naming the parameter; 500 out of memory); r is freed then. */
int  web_embed_parse(const json_t *req, const em_tokenizer *tok, uint32_t n_vocab, uint32_t n_embd,
                     uint32_t max_tokens, web_embed_req *r, em_web_error *e);
void web_embed_free(web_embed_req *r);

/* A sequence ids[0..*n) past max tokens: cut to max (its last token kept
 * when it is special: [SEP], EOS) when truncate, else a 400
 * (context_length_exceeded) naming param. 0, or -1 with e filled. The
 * rerank request's sequences are fitted the same way. */
int web_embed_fit(const em_tokenizer *tok, int32_t *ids, size_t *n, uint32_t max, int truncate, const char *param,
                  em_web_error *e);

/* The answer: {"object": "list", "data": [{"object": "embedding", "index",
 * "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}} with
 * vecs[r->n][dim] as floats or base64. New reference, NULL out of memory. */
json_t *web_embed_response(const web_embed_req *r, const float *vecs, uint32_t dim, const char *model);

#endif
