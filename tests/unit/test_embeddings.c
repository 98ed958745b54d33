/* test_embeddings.c — the /v1/embeddings and /v1/rerank requests and answers
 * (web/embeddings.c, web/rerank.c)
 * with a real vocabulary (GPT-2's, ../shared/golden/tokenizer): every form
 * of input (a string, strings, token ids, arrays of them) tokenized and
 * counted; the answer's floats and base64 (little-endian float32, decoded
 * back here); truncation keeping the special token an input ends with; and
 * each bad request refused with a 400 naming its parameter: empty strings
 * and arrays, too many inputs, ids outside the vocabulary, an input longer
 * than the model takes, dimensions the model was not trained for, unknown
 * formats and pooling. Rerank: the query and documents as separate
 * sequences (an embedding model) or pairs with the document's tokens of
 * type 1 (a cross-encoder), results sorted by score, top_n of them, with
 * their documents when asked; its refusals likewise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libwebsockets.h>

#include "core/model/gguf.h"
#include "tests/common/testutil.h"
#include "web/embeddings.h"
#include "web/rerank.h"

static em_tokenizer *tok;

/* body parsed into r: 0, or the status with param copied. */
static int parse(const char *body, web_embed_req *r, uint32_t max, char *param)
{
    json_t *req = json_loads(body, 0, NULL);
    em_web_error e = { 0 };
    int rc = web_embed_parse(req, tok, 50257, 4, max, r, &e);
    json_decref(req);
    snprintf(param, 64, "%s", e.param);
    if (rc)
        printf("  %d %s: %s\n", e.status, e.param, e.message);
    return rc ? e.status : 0;
}

static int rerank(const char *body, web_rerank_req *r, int pairs, uint32_t max, char *param)
{
    json_t *req = json_loads(body, 0, NULL);
    em_web_error e = { 0 };
    int rc = web_rerank_parse(req, tok, pairs, max, r, &e);
    json_decref(req);   /* (r->docs borrows from it: the checks below look at ids only) */
    snprintf(param, 64, "%s", e.param);
    if (rc)
        printf("  %d %s: %s\n", e.status, e.param, e.message);
    return rc ? e.status : 0;
}

static void check_rerank(void)
{
    web_rerank_req r;
    char param[64];
    /* an embedding model: the query, then each document */
    CHECK(rerank("{\"query\": \"big cat\", \"documents\": [\"a lion\", {\"text\": \"tax law\"}]}", &r, 0, 512,
                 param) == 0 && r.n_docs == 2 && r.n_seq == 3 && r.n_ids[0] == 2 && r.n_ids[2] == 2 && !r.types &&
          r.top_n == 2 && r.tokens == 6);
    web_rerank_free(&r);
    /* a cross-encoder: query and document in one sequence, the document's tokens of type 1 */
    CHECK(rerank("{\"query\": \"big cat\", \"documents\": [\"a lion\", \"tax\"]}", &r, 1, 512, param) == 0 &&
          r.n_seq == 2 && r.n_ids[0] == 4 && r.n_ids[1] == 3 && r.types[0][1] == 0 && r.types[0][2] == 1 &&
          r.types[1][2] == 1);
    web_rerank_free(&r);
    CHECK(rerank("{\"query\": \"big cat\", \"documents\": [\"a lion roars loudly\"], \"truncate\": true}", &r, 1,
                 3, param) == 0 && r.n_ids[0] == 3);
    web_rerank_free(&r);
    /* the answer: sorted, top_n, documents when asked */
    json_t *req = json_loads("{\"query\": \"q\", \"documents\": [\"d0\", \"d1\", \"d2\"], \"top_n\": 2, "
                             "\"return_documents\": true}", 0, NULL);
    em_web_error e = { 0 };
    if (web_rerank_parse(req, tok, 0, 512, &r, &e)) {
        CHECK(0);
        return;
    }
    float scores[3] = { 0.1f, 0.9f, 0.5f };
    json_t *out = web_rerank_response(&r, scores, "m");
    json_t *res = json_object_get(out, "results");
    CHECK(json_array_size(res) == 2 && json_integer_value(json_object_get(json_array_get(res, 0), "index")) == 1 &&
          json_integer_value(json_object_get(json_array_get(res, 1), "index")) == 2 &&
          !strcmp(json_string_value(json_object_get(json_object_get(json_array_get(res, 0), "document"), "text")),
                  "d1") &&
          fabs(json_real_value(json_object_get(json_array_get(res, 0), "relevance_score")) - 0.9) < 1e-6 &&
          !strcmp(json_string_value(json_object_get(out, "score")), "cosine"));
    json_decref(out);
    web_rerank_free(&r);
    json_decref(req);
    /* refusals */
    CHECK(rerank("{\"documents\": [\"a\"]}", &r, 0, 512, param) == 400 && !strcmp(param, "query"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": []}", &r, 0, 512, param) == 400 && !strcmp(param, "documents"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": [\"a\", 3]}", &r, 0, 512, param) == 400 &&
          !strcmp(param, "documents[1]"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": [\"a\", {\"text\": \"\"}]}", &r, 0, 512, param) == 400 &&
          !strcmp(param, "documents[1]"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": [\"a\"], \"top_n\": 0}", &r, 0, 512, param) == 400 &&
          !strcmp(param, "top_n"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": [\"a b c d\"]}", &r, 0, 3, param) == 400 &&
          !strcmp(param, "documents[0]"));
    CHECK(rerank("{\"query\": \"q\", \"documents\": [\"a b c\"]}", &r, 1, 3, param) == 400 &&
          !strcmp(param, "documents[0]"));
    CHECK(rerank("{\"query\": \"a b c\", \"documents\": [\"d\"], \"truncate\": true}", &r, 1, 3, param) == 400 &&
          !strcmp(param, "query"));
    em_buf big = { 0 };
    em_buf_addf(&big, "%s", "{\"query\": \"q\", \"documents\": [");
    for (int i = 0; i < 1001; i++)
        em_buf_add(&big, i ? ", \"d\"" : "\"d\"", i ? 5 : 3);
    em_buf_add(&big, "]}", 2);
    CHECK(rerank(big.s, &r, 0, 512, param) == 400 && !strcmp(param, "documents"));
    em_buf_free(&big);
}

int main(void)
{
    em_gguf *g;
    em_err err = { 0 };
    if (!test_shared_dir()) {
        printf("SKIP: no shared folder\n");
        return 77;
    }
    REQUIRE(em_gguf_open(test_shared("golden/tokenizer/ggml-vocab-gpt-2.gguf"), &g, &err) == 0 &&
            em_tokenizer_create(g, &tok, &err) == 0);
    web_embed_req r;
    char param[64];

    /* the forms of input */
    CHECK(parse("{\"input\": \"Hello world\"}", &r, 512, param) == 0 && r.n == 1 && r.n_ids[0] == 2 &&
          r.tokens == 2 && r.normalize && !r.base64 && r.pooling == EM_POOL_NONE);
    web_embed_free(&r);
    CHECK(parse("{\"input\": [\"a\", \"b c\"], \"encoding_format\": \"base64\", \"pooling\": \"cls\", "
                "\"normalize\": false, \"dimensions\": 4}", &r, 512, param) == 0 && r.n == 2 && r.n_ids[1] == 2 &&
          r.tokens == 3 && r.base64 && !r.normalize && r.pooling == EM_POOL_CLS);
    float vecs[8] = { 1.5f, -2, 0.25f, 3e-8f, 0, 1, -1, 1e30f };
    json_t *out = web_embed_response(&r, vecs, 4, "m");
    REQUIRE(out);
    const char *b = json_string_value(json_object_get(json_array_get(json_object_get(out, "data"), 1), "embedding"));
    float back[8];   /* (lws wants room past the bytes) */
    CHECK(b && lws_b64_decode_string(b, (char *)back, sizeof back) == 16 && !memcmp(back, vecs + 4, 16));
    CHECK(json_integer_value(json_object_get(json_object_get(out, "usage"), "prompt_tokens")) == 3 &&
          !strcmp(json_string_value(json_object_get(out, "object")), "list") &&
          json_integer_value(json_object_get(json_array_get(json_object_get(out, "data"), 1), "index")) == 1);
    json_decref(out);
    r.base64 = 0;
    out = web_embed_response(&r, vecs, 4, "m");
    json_t *f = json_object_get(json_array_get(json_object_get(out, "data"), 0), "embedding");
    CHECK(json_array_size(f) == 4 && json_real_value(json_array_get(f, 0)) == 1.5 &&
          json_real_value(json_array_get(f, 3)) == (double)3e-8f);
    json_decref(out);
    web_embed_free(&r);
    CHECK(parse("{\"input\": [15496, 995]}", &r, 512, param) == 0 && r.n == 1 && r.n_ids[0] == 2 &&
          r.ids[0][1] == 995);
    web_embed_free(&r);
    CHECK(parse("{\"input\": [[15496], [995, 1, 2]]}", &r, 512, param) == 0 && r.n == 2 && r.n_ids[1] == 3);
    web_embed_free(&r);
    /* truncation: the first tokens, and the special one it ended with */
    CHECK(parse("{\"input\": [[1, 2, 3, 4, 50256]], \"truncate\": true}", &r, 3, param) == 0 && r.n_ids[0] == 3 &&
          r.ids[0][0] == 1 && r.ids[0][1] == 2 && r.ids[0][2] == 50256);
    web_embed_free(&r);
    CHECK(parse("{\"input\": [[1, 2, 3, 4]], \"truncate\": true}", &r, 3, param) == 0 && r.ids[0][2] == 3);
    web_embed_free(&r);

    /* refusals, each naming its parameter */
    CHECK(parse("{\"input\": \"\"}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": [\"a\", \"\"]}", &r, 512, param) == 400 && !strcmp(param, "input[1]"));
    CHECK(parse("{\"input\": []}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": [[]]}", &r, 512, param) == 400 && !strcmp(param, "input[0]"));
    CHECK(parse("{}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": 7}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": [[1], {\"a\": 1}]}", &r, 512, param) == 400 && !strcmp(param, "input[1]"));
    CHECK(parse("{\"input\": [1, 50257]}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": [1, -1]}", &r, 512, param) == 400 && !strcmp(param, "input"));
    CHECK(parse("{\"input\": [[1, 2, 3], [1, 2, 3, 4]]}", &r, 3, param) == 400 && !strcmp(param, "input[1]"));
    CHECK(parse("{\"input\": \"a\", \"dimensions\": 2}", &r, 512, param) == 400 && !strcmp(param, "dimensions"));
    CHECK(parse("{\"input\": \"a\", \"encoding_format\": \"int8\"}", &r, 512, param) == 400 &&
          !strcmp(param, "encoding_format"));
    CHECK(parse("{\"input\": \"a\", \"pooling\": \"max\"}", &r, 512, param) == 400 && !strcmp(param, "pooling"));
    CHECK(parse("{\"input\": \"a\", \"normalize\": \"yes\"}", &r, 512, param) == 400 && !strcmp(param, "normalize"));
    CHECK(parse("{\"input\": \"a\", \"truncate\": 1}", &r, 512, param) == 400 && !strcmp(param, "truncate"));
    /* 2049 inputs; 2048 of 147 tokens each (over 300,000 in all) */
    em_buf big = { 0 };
    em_buf_add(&big, "{\"input\": [", 11);
    for (int i = 0; i < 2049; i++)
        em_buf_addf(&big, "%s[1]", i ? ", " : "");
    em_buf_add(&big, "]}", 2);
    CHECK(parse(big.s, &r, 512, param) == 400 && !strcmp(param, "input"));
    em_buf_reset(&big);
    em_buf_add(&big, "{\"input\": [", 11);
    for (int i = 0; i < 2048; i++) {
        em_buf_add(&big, i ? ", [1" : "[1", i ? 4 : 2);
        for (int k = 1; k < 147; k++)
            em_buf_add(&big, ", 1", 3);
        em_buf_add(&big, "]", 1);
    }
    em_buf_add(&big, "]}", 2);
    CHECK(parse(big.s, &r, 512, param) == 400 && !strcmp(param, "input"));
    em_buf_free(&big);

    check_rerank();
    em_tokenizer_destroy(tok);
    em_gguf_close(g);
    return test_summary("embeddings");
}
