/* rerank.h — /v1/rerank (and /rerank) in the shape llama-server, Jina and
 * Cohere clients use (web/rerank.c): a query and documents (strings or
 * {"text": ...} objects) checked and tokenized within bounds — as one
 * sequence per document for a cross-encoder (its [CLS] query [SEP]
 * document [SEP] pair, the document's tokens of type 1) or as separate
 * sequences for an embedding model (the query first) — and the answer
 * framed from the scores: results sorted by relevance_score, top_n of
 * them, each with its index (and its document when asked), and which kind
 * of score it is. Private to web/ (and its unit test). */
#ifndef EM_WEB_RERANK_H
#define EM_WEB_RERANK_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/text/tokenizer.h"
#include "web/web_int.h"

#define WEB_RERANK_DOCS_MAX  1000     /* documents in one request (Cohere's limit) */

typedef struct {
    size_t         n_docs;
    const json_t  *docs;         /* the request's documents (borrowed from it) */
    size_t         top_n;        /* results to give (n_docs when absent) */
    int            return_docs;  /* return_documents */
    int            pairs;        /* sequences are query-document pairs (a cross-encoder) */
    size_t         n_seq;        /* sequences to run: n_docs pairs, or the query and n_docs */
    int32_t      **ids;          /* [n_seq] (malloc'd) */
    uint8_t      **types;        /* [n_seq] token types of a pair's tokens (NULL without pairs) */
    uint32_t      *n_ids;        /* [n_seq] */
    uint64_t       tokens;       /* all of them */
} web_rerank_req;

/* req (borrowed: r->docs points into it) into r. pairs: the model scores a
 * pair itself (a classification head: pooling rank), else the query and
 * each document are embedded. max_tokens bounds a sequence: one past it is
 * a 400 naming the query or documents[i], unless "truncate": true (a pair
 * then loses the document's end, keeping its closing special token; a
 * lone text its end, keeping its last special token). 0, or -1 with e
 * filled (r freed). */
int  web_rerank_parse(const json_t *req, const em_tokenizer *tok, int pairs, uint32_t max_tokens, web_rerank_req *r,
                      em_web_error *e);
void web_rerank_free(web_rerank_req *r);

/* The answer from scores[n_docs] (document i's: the head's output, or the
 * cosine of its embedding and the query's): {"object": "list", "model",
 * "results": [{"index", "relevance_score", "document": {"text"}}] sorted by
 * score, highest first, top_n of them, "score": "classifier" | "cosine",
 * "usage": {"prompt_tokens", "total_tokens"}}. New reference; NULL out of
 * memory. */
json_t *web_rerank_response(const web_rerank_req *r, const float *scores, const char *model);

#endif
