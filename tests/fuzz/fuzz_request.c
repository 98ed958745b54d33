/* fuzz_request.c — JSON request bodies as /v1/chat/completions,
 * /v1/completions, a batch line's body and a WebSocket chat's params reach
 * the parameter checks (web/openai.c): any bytes through jansson as the
 * server reads them (duplicate keys refused), then the sampling, penalty,
 * logit_bias, logprobs, stop and max_tokens checks of web_gen_params
 * (with an ordinary and an admin key), the messages check (roles,
 * content strings or parts, assistant tool_calls, tool messages answering
 * them), and the tools (tools, tool_choice, parallel_tool_calls; the
 * grammar of their calls in the Hermes format, compiled) — every refusal
 * with a message, every accepted value within its documented range; the
 * same body as /v1/embeddings' and /v1/rerank's requests (GPT-2's
 * vocabulary from ../shared; skipped without it), their answers framed;
 * and the input's bytes as a generated answer through the tool-call split,
 * in pieces (in each of four formats). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar.h"
#include "core/model/gguf.h"
#include "tests/fuzz/fuzz.h"
#include "web/embeddings.h"
#include "web/rerank.h"
#include "web/tools.h"
#include "web/web_int.h"

static void sink_text(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    FUZZ_ASSERT(n == 0 || s != NULL);
}

static void sink_call(void *ctx, uint32_t index, const char *name, const char *id)
{
    (void)ctx;
    FUZZ_ASSERT(name && index < 1u << 20 && (!id || strlen(id) < 24));
}

static void sink_args(void *ctx, uint32_t index, const char *s, size_t n)
{
    (void)ctx;
    (void)index;
    FUZZ_ASSERT(n == 0 || s != NULL);
}

static const web_toolsink sink = { sink_text, sink_call, sink_args };

static em_gguf *vocab_g;
static em_tokenizer *vocab;   /* GPT-2's (NULL: ../shared is not there) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *shared = getenv("EMBER_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/tokenizer/ggml-vocab-gpt-2.gguf", shared ? shared : "../shared");
    em_err e = { 0 };
    if (em_gguf_open(path, &vocab_g, &e) || em_tokenizer_create(vocab_g, &vocab, &e))
        fprintf(stderr, "fuzz_request: %s: %s (the embeddings and rerank bodies skipped)\n", path, e.msg);
    return 0;
}

/* The body as /v1/embeddings' and /v1/rerank's: refused with a status and
 * a parameter, or inputs within the bounds and an answer framed. */
static void embeddings_and_rerank(const json_t *req, size_t size)
{
    uint32_t max = 1 + (uint32_t)(size % 300);
    web_embed_req er;
    em_web_error e = { 0 };
    if (web_embed_parse(req, vocab, 50257, 8, max, &er, &e) == 0) {
        FUZZ_ASSERT(er.n >= 1 && er.n <= WEB_EMBED_INPUTS_MAX && er.tokens <= WEB_EMBED_TOKENS_MAX);
        for (size_t i = 0; i < er.n; i++)
            FUZZ_ASSERT(er.n_ids[i] >= 1 && er.n_ids[i] <= max && er.ids[i][0] >= 0 && er.ids[i][0] < 50257);
        float *v = calloc(er.n * 8, sizeof *v);
        json_t *o = v ? web_embed_response(&er, v, 8, "m") : NULL;
        FUZZ_ASSERT(!v || (o && json_array_size(json_object_get(o, "data")) == er.n));
        json_decref(o);
        free(v);
        web_embed_free(&er);
    } else {
        FUZZ_ASSERT(e.status >= 400 && e.message[0]);
    }
    web_rerank_req rr;
    em_web_error re = { 0 };
    if (web_rerank_parse(req, vocab, (int)(size & 4), max, &rr, &re) == 0) {
        FUZZ_ASSERT(rr.n_docs >= 1 && rr.n_docs <= WEB_RERANK_DOCS_MAX && rr.top_n <= rr.n_docs);
        for (size_t i = 0; i < rr.n_seq; i++)
            FUZZ_ASSERT(rr.n_ids[i] <= max);
        float *sc = calloc(rr.n_docs, sizeof *sc);
        json_t *o = sc ? web_rerank_response(&rr, sc, "m") : NULL;
        FUZZ_ASSERT(!sc || (o && json_array_size(json_object_get(o, "results")) == rr.top_n));
        json_decref(o);
        free(sc);
        web_rerank_free(&rr);
    } else {
        FUZZ_ASSERT(re.status >= 400 && re.message[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the bytes as an answer the model wrote, split into text and calls, in
     * one of the formats (Hermes with its bare form; Mistral's ids after the
     * arguments and after the name; harmony's with a lead) */
    web_toolfmt fmts[4] = {
        { .ok = 1, .open = "<tool_call>\n{\"name\": \"", .mid = "\", \"arguments\": ",
          .sep = "}\n</tool_call>\n<tool_call>\n{\"name\": \"", .close = "}\n</tool_call>", .trigger = "<tool_call>",
          .bare_open = "{\"name\": \"", .bare_close = "}", .bare_key = "{\"name\":" },
        { .ok = 1, .open = "[TOOL_CALLS][{\"name\": \"", .mid = "\", \"arguments\": ",
          .sep = ", \"id\": \"\x01\"}, {\"name\": \"", .close = ", \"id\": \"\x01\"}]", .trigger = "[TOOL_CALLS]",
          .id_len = 9 },
        { .ok = 1, .open = "[TOOL_CALLS]", .mid = "[CALL_ID]\x01[ARGS]", .sep = "[TOOL_CALLS]", .close = "",
          .trigger = "[TOOL_CALLS]", .id_len = 9 },
        { .ok = 1, .open = "to=functions.", .mid = "<|channel|>commentary json<|message|>", .close = "",
          .trigger = "to=functions.", .lead = " " },
    };
    web_toolfmt f = fmts[(size >> 2) % 4];
    web_toolparse tp;
    web_toolparse_init(&tp, &f, (size & 2) == 0);
    size_t step = 1 + (size % 7);
    for (size_t i = 0; i < size; i += step)
        web_toolparse_feed(&tp, (const char *)data + i, step < size - i ? step : size - i, &sink, NULL);
    int whole = web_toolparse_finish(&tp, &sink, NULL);
    FUZZ_ASSERT(!whole || (tp.n_calls > 0 && tp.n_done == tp.n_calls));
    web_toolparse_free(&tp);

    json_error_t je;
    json_t *req = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!req)
        return 0;
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    em_web_auth auth = { .key_id = 1, .default_class = EM_CLASS_INTERACTIVE, .admin = (int)(size & 1) };
    em_gen_params gp;
    memset(&gp, 0, sizeof gp);
    em_web_error e = { 0 };
    if (web_gen_params(req, &auth, &gp, &e) == 0) {
        FUZZ_ASSERT(gp.sample.temp >= 0 && gp.sample.temp <= 2);
        FUZZ_ASSERT(gp.sample.top_p > 0 && gp.sample.top_p <= 1);
        FUZZ_ASSERT(gp.cls == EM_CLASS_INTERACTIVE || gp.cls == EM_CLASS_BACKGROUND);
    } else {
        FUZZ_ASSERT(e.status >= 400 && e.status < 600 && e.message[0]);
    }
    json_t *msgs = json_object_get(req, "messages");
    if (msgs) {
        em_web_error me = { 0 };
        json_t *ok = web_messages_check(msgs, &me);
        if (ok) {
            size_t i;
            json_t *m;
            json_array_foreach(ok, i, m)
                FUZZ_ASSERT(json_is_string(json_object_get(m, "role")) && json_is_string(json_object_get(m, "content")));
            json_decref(ok);
        } else {
            FUZZ_ASSERT(me.status == 400 && me.message[0]);
        }
    }
    web_tools t;
    em_web_error te = { 0 };
    if (web_tools_parse(req, &t, &te) == 0) {
        FUZZ_ASSERT(t.n <= WEB_TOOLS_MAX && (t.n == 0 || json_array_size(t.render) == t.n));
        char *gbnf = NULL;
        size_t len = 0;
        if (t.n && web_tools_gbnf(&f, &t, &gbnf, &len, &te) == 0) {
            em_grammar *g = NULL;
            em_err err = { 0 };
            /* what ember builds compiles, or is refused by a limit with a message */
            int rc = em_grammar_compile(gbnf, len, NULL, &g, &err);
            FUZZ_ASSERT(rc == 0 || (rc == EM_ERANGE && err.msg[0]));
            em_grammar_destroy(g);
            free(gbnf);
        } else if (t.n) {
            FUZZ_ASSERT(te.status >= 400 && te.message[0]);
        }
        web_tools_free(&t);
    } else {
        FUZZ_ASSERT(te.status == 400 && te.message[0] && te.param[0]);
    }
    if (vocab)
        embeddings_and_rerank(req, size);
    json_decref(req);
    return 0;
}
