/* cmd_embed.c — `ember embed`: the embedding of each input text, one JSON
 * line per input ({"index", "tokens", "embedding"}), from an encoder
 * (bert) or any decoder's final hidden states, pooled as the model says
 * or as asked and L2-normalised. On the GPU (core/gpu/engine.h
 * em_engine_embed: pooled rows of the forward pass) or the CPU reference
 * (core/run/encode.c). Every input is tokenized first, so that the engine
 * is made once, for the longest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gpu/engine.h"
#include "core/model/model.h"
#include "core/run/encode.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember embed --model PATH (--text TEXT ... | --file F) [--pooling mean|cls|last] [--no-normalize]\n"
    "                   [--backend vulkan|cpu]\n"
    "  Prints one JSON line per input: {\"index\": i, \"tokens\": n, \"embedding\": [...]}.\n"
    "  --text TEXT       an input (may repeat, up to 16)\n"
    "  --file F          one input per line of F (empty lines skipped)\n"
    "  --pooling P       how the tokens' hidden states make one vector: mean, cls (the first\n"
    "                    token's) or last; default the model's pooling_type, else mean\n"
    "  --no-normalize    leave the vector as pooled (default: unit length)\n"
    "  An encoder (bert: all-MiniLM-L6-v2) or any decoder (its output-normed hidden states).\n"
    "  --backend B       vulkan (default: the GPU) or cpu (the reference)\n"
    "  Example:\n"
    "    ember embed --model all-MiniLM-L6-v2-F16.gguf --text 'The cat sits on the mat.'\n";

typedef struct {
    int32_t *ids;
    size_t   n;
} input;

/* Each input tokenized into in[*n_in] (grown). 0, or the exit status. */
static int add_input(const em_tokenizer *tok, const char *text, size_t len, input **in, size_t *n_in)
{
    em_err err = { 0 };
    input *g = realloc(*in, (*n_in + 1) * sizeof *g);
    if (!g)
        return em_cli_fail(1, "embed: out of memory");
    *in = g;
    input *x = &g[*n_in];
    *x = (input){ 0 };
    if (em_tokenizer_encode(tok, text, len, 1, 0, &x->ids, &x->n, &err))
        return em_cli_fail(2, "embed: input %zu: %s", *n_in, err.msg);
    (*n_in)++;
    return 0;
}

/* Every input embedded and printed. 0, or the exit status. */
static int embed_all(const em_model *m, em_backend backend, const input *in, size_t n_in, em_pooling pool,
                     int normalize)
{
    const em_hparams *hp = em_model_hparams(m);
    size_t longest = 1;
    for (size_t i = 0; i < n_in; i++) {
        if (in[i].n == 0)
            return em_cli_fail(2, "embed: input %zu has no tokens", i);
        size_t cap = hp->encoder ? hp->n_pos : hp->n_ctx_train ? hp->n_ctx_train : UINT32_MAX;
        if (in[i].n > cap)
            return em_cli_fail(2, "embed: input %zu has %zu tokens; this model takes at most %zu", i, in[i].n, cap);
        longest = in[i].n > longest ? in[i].n : longest;
    }
    em_err err = { 0 };
    em_engine *e = NULL;
    em_engine_opts eo = { .chunk = hp->encoder ? (uint32_t)longest : 0 };
    if (em_engine_create(m, backend, (uint32_t)longest, &eo, &e, &err))
        return em_cli_fail(err.code == EM_ENOMEM ? 1 : 2, "embed: %s", err.msg);
    float *vec = malloc(hp->n_embd * sizeof *vec);
    int status = vec ? 0 : em_cli_fail(1, "embed: out of memory");
    for (size_t i = 0; !status && i < n_in; i++) {
        if (em_engine_embed(e, in[i].ids, (uint32_t)in[i].n, pool, normalize, vec, &err)) {
            status = em_cli_fail(err.code == EM_ENOMEM ? 1 : 2, "embed: input %zu: %s", i, err.msg);
            break;
        }
        printf("{\"index\": %zu, \"tokens\": %zu, \"embedding\": [", i, in[i].n);
        for (uint32_t d = 0; d < hp->n_embd; d++)
            printf(d ? ", %.7g" : "%.7g", vec[d]);
        printf("]}\n");
    }
    if (!status && em_engine_check(e, &err))
        status = em_cli_fail(1, "embed: %s", err.msg);
    free(vec);
    em_engine_destroy(e);
    return status;
}

int em_cmd_embed(int argc, char **argv)
{
    const char *model_path = NULL, *file_path = NULL, *pooling = NULL, *backend_name = "vulkan";
    em_cli_list texts = { 0 };
    int no_normalize = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--text", "-t", EM_OPT_MULTI, &texts, 0, 0 },
        { "--file", "-f", EM_OPT_STR, &file_path, 0, 0 },
        { "--pooling", NULL, EM_OPT_STR, &pooling, 0, 0 },
        { "--no-normalize", NULL, EM_OPT_FLAG, &no_normalize, 0, 0 },
        { "--backend", NULL, EM_OPT_STR, &backend_name, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("embed", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!model_path)
        return em_cli_fail(2, "embed: --model is required (see ember embed --help)");
    if (!texts.n == !file_path)
        return em_cli_fail(2, "embed: give --text (one or more) or --file, not both");
    em_pooling pool = EM_POOL_NONE;
    if (pooling && !strcmp(pooling, "mean"))
        pool = EM_POOL_MEAN;
    else if (pooling && !strcmp(pooling, "cls"))
        pool = EM_POOL_CLS;
    else if (pooling && !strcmp(pooling, "last"))
        pool = EM_POOL_LAST;
    else if (pooling)
        return em_cli_fail(2, "embed: --pooling must be mean, cls or last, not '%s'", pooling);

    em_err err = { 0 };
    em_backend backend;
    if (em_backend_parse(backend_name, &backend, &err))
        return em_cli_fail(2, "embed: %s", err.msg);
    char *file_text = NULL;
    size_t file_len = 0;
    if (file_path && em_cli_read_file(file_path, &file_text, &file_len, &err))
        return em_cli_fail_err(&err);
    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    if ((rc = em_cli_open_model("embed", model_path, &m, &tok))) {
        free(file_text);
        return rc;
    }
    input *in = NULL;
    size_t n_in = 0;
    int status = 0;
    for (int i = 0; !status && i < texts.n; i++)
        status = add_input(tok, texts.vals[i], strlen(texts.vals[i]), &in, &n_in);
    for (const char *p = file_text; !status && p && p < file_text + file_len;) {
        const char *nl = memchr(p, '\n', (size_t)(file_text + file_len - p));
        const char *next = nl ? nl + 1 : file_text + file_len;
        size_t len = (size_t)((nl ? nl : next) - p);
        if (len && p[len - 1] == '\r')
            len--;
        if (len)
            status = add_input(tok, p, len, &in, &n_in);
        p = next;
    }
    if (!status)
        status = embed_all(m, backend, in, n_in, pool, !no_normalize);
    if (!status && fflush(stdout) != 0)
        status = em_cli_fail(1, "embed: cannot write the output");
    for (size_t i = 0; i < n_in; i++)
        free(in[i].ids);
    free(in);
    free(file_text);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return status;
}
